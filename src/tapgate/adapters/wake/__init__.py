"""Wake adapters: waiters in this process (local), and the ways a notification reaches the other
processes: PostgreSQL LISTEN/NOTIFY (postgres) or a NATS broker (nats)."""
