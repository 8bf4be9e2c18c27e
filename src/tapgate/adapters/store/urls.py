"""Database URLs as people write them, and as SQLAlchemy's async drivers want them."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url

from tapgate.domain.errors import ConfigurationError


def engine_url(url: str) -> URL:
    """``sqlite:///x.db`` → aiosqlite, ``postgresql://…`` → asyncpg. Raises ConfigurationError."""
    try:
        parsed = make_url(url)
    except Exception as e:
        raise ConfigurationError(
            "database_url is not a database URL; use sqlite:///path.db or postgresql://user@host/db."
        ) from e
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite")
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+asyncpg")
    raise ConfigurationError(
        f"database_url uses {backend!r}; tapgate runs on sqlite:/// or postgresql:// URLs."
    )


def is_postgres(url: str) -> bool:
    return engine_url(url).get_backend_name() == "postgresql"
