"""Storage adapters: SQLite and PostgreSQL through SQLAlchemy, and an in-memory store."""
