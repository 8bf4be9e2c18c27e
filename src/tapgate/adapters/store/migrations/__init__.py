"""Alembic migrations; they run unchanged on SQLite and PostgreSQL."""
