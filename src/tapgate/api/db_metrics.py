"""The database counts of this process (``adapters/store/counting.py``) as Prometheus counters."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from tapgate.adapters.store.counting import COUNTS


class DbCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "tapgate_db_transactions",
            "Database transactions ended (committed or rolled back)",
            COUNTS.transactions,
        )
        yield CounterMetricFamily(
            "tapgate_db_writing_transactions", "Database transactions that committed a write", COUNTS.writing
        )
        yield CounterMetricFamily(
            "tapgate_db_statements", "Statements sent to the database", COUNTS.statements
        )


def register_db_metrics(registry: CollectorRegistry) -> None:
    registry.register(DbCollector())
