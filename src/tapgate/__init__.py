"""tapgate: let an AI agent act on a person's devices while the person stays in charge."""

__version__ = "0.1.0"
