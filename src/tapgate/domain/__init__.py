"""The pure core: data and functions with no I/O, no framework and no environment."""
