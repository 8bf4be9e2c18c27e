"""The push worker's counters as Prometheus metrics, read from the worker when scraped."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from tapgate.services.outbox import PushStats


class PushCollector(Collector):
    def __init__(self, stats: PushStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        s = self._stats
        yield CounterMetricFamily("tapgate_push_sent", "Pushes a push service or relay accepted", s.sent)
        yield CounterMetricFamily(
            "tapgate_push_failed", "Pushes given up on (push.failed in the audit journal)", s.failed
        )
        yield CounterMetricFamily(
            "tapgate_push_retried", "Push attempts that failed and are tried again later", s.retried
        )
        withheld = CounterMetricFamily(
            "tapgate_push_withheld", "Outbox rows not sent, by reason", labels=["reason"]
        )
        withheld.add_metric(["skipped"], s.skipped)
        withheld.add_metric(["coalesced"], s.coalesced)
        withheld.add_metric(["capped"], s.capped)
        yield withheld


def register_push_metrics(registry: CollectorRegistry, stats: PushStats) -> None:
    registry.register(PushCollector(stats))
