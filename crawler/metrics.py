"""Prometheus metrics: the one place that turns the loop's events into metrics.

The daemon reports events through the ``Events`` protocol; it never touches a metric. No label
carries a URL or a host (unbounded cardinality).
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from crawler import __version__
from crawler.core.model import Observation

PREFIX = "crawler"


class Events(Protocol):
    """What the daemon reports; ``Metrics`` subscribes to it, tests may record it."""

    def fetch_completed(self, obs: Observation) -> None: ...
    def frontier_sampled(
        self, urls_by_state: dict[str, int], due: int, most_overdue_seconds: float, hosts_leased: int
    ) -> None: ...
    def db_transaction(self, seconds: float) -> None: ...
    def politeness_wait(self, seconds: float) -> None: ...


def status_class(status: int | None) -> str:
    return "none" if status is None else f"{status // 100}xx"


class Metrics:
    """All of the crawler's metrics, on a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.fetches = Counter(
            f"{PREFIX}_fetches", "Fetches completed, by outcome and HTTP status class.",
            ["outcome", "status_class"], registry=r,
        )
        self.fetch_duration = Histogram(
            f"{PREFIX}_fetch_duration_seconds", "Time from request to last body byte.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), registry=r,
        )
        self.response_bytes = Counter(
            f"{PREFIX}_response_bytes", "Body bytes received (after decompression).", registry=r
        )
        self.changes = Counter(
            f"{PREFIX}_changes", "Fetches that found the page changed (simhash distance ≥ k).",
            registry=r,
        )
        self.cosmetic_changes = Counter(
            f"{PREFIX}_cosmetic_changes",
            "Fetches whose bytes changed but whose simhash moved less than k bits.", registry=r,
        )
        self.simhash_distance = Histogram(
            f"{PREFIX}_simhash_distance_bits",
            "Hamming distance between a page's fingerprint and its previous one.",
            buckets=(0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 64), registry=r,
        )
        self.urls = Gauge(f"{PREFIX}_urls", "URLs in the frontier, by state.", ["state"],
                          registry=r)
        self.urls_due = Gauge(f"{PREFIX}_urls_due", "URLs whose next fetch time has passed.",
                              registry=r)
        self.most_overdue = Gauge(
            f"{PREFIX}_most_overdue_seconds", "How late the most overdue URL is.", registry=r
        )
        self.hosts_leased = Gauge(
            f"{PREFIX}_hosts_leased", "Hosts currently leased by any daemon.", registry=r
        )
        self.db_latency = Histogram(
            f"{PREFIX}_db_transaction_seconds", "Latency of the daemon's database transactions.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5), registry=r,
        )
        self.politeness_waits = Counter(
            f"{PREFIX}_politeness_wait_seconds", "Time spent waiting out per-host delays.",
            registry=r,
        )
        self.build = Info(f"{PREFIX}_build", "Build information.", registry=r)
        self.build.info({"version": __version__})

    def fetch_completed(self, obs: Observation) -> None:
        self.fetches.labels(obs.outcome, status_class(obs.status)).inc()
        self.fetch_duration.observe(obs.duration_seconds)
        self.response_bytes.inc(obs.bytes)
        if obs.changed:
            self.changes.inc()
        elif obs.content_changed:
            self.cosmetic_changes.inc()
        if obs.simhash_distance is not None:
            self.simhash_distance.observe(obs.simhash_distance)

    def frontier_sampled(
        self, urls_by_state: dict[str, int], due: int, most_overdue_seconds: float, hosts_leased: int
    ) -> None:
        from crawler.db.schema import URL_STATES

        for state in URL_STATES:
            self.urls.labels(state).set(urls_by_state.get(state, 0))
        self.urls_due.set(due)
        self.most_overdue.set(most_overdue_seconds)
        self.hosts_leased.set(hosts_leased)

    def db_transaction(self, seconds: float) -> None:
        self.db_latency.observe(seconds)

    def politeness_wait(self, seconds: float) -> None:
        self.politeness_waits.inc(seconds)
