"""Wake adapters: waiters in this process, and PostgreSQL LISTEN/NOTIFY across processes."""
