"""Prometheus metrics: the one place that turns the loop's events into metrics.

The daemon reports events through the ``Events`` protocol; it never touches a metric. No label
carries a URL or a host (unbounded cardinality). Under ``crawler run --processes N`` every child
writes its samples to ``PROMETHEUS_MULTIPROC_DIR`` and the parent serves their aggregate
(prometheus-client multiprocess mode): counters and histograms add up, and a gauge shows the
value its processes set last (they are sampled from the one shared database). Names follow the
Prometheus conventions that ``promtool check metrics`` enforces: one ``crawler_`` prefix,
``_total`` on counters (added by prometheus-client), base units (``_seconds``, ``_bytes``), rates
per second, ratios in [0, 1] named ``_ratio``.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
)

from crawler import __version__
from crawler.core.model import SECONDS_PER_DAY, Observation, UrlState
from crawler.store.health import FAULT_KINDS, STORAGE_ERROR_PREFIX

PREFIX = "crawler"

# The ``_created`` series double the series count and no dashboard or alert uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]


class Events(Protocol):
    """What the daemon reports; ``Metrics`` subscribes to it, tests may record it."""

    def fetch_completed(self, obs: Observation, kind: str = "page") -> None:
        """A fetch of a ``page``, ``sitemap`` or ``feed`` was recorded (every outcome)."""

    def frontier_sampled(
        self, urls_by_state: dict[str, int], due: int, most_overdue_seconds: float,
        hosts_leased: int, due_paused: int = 0,
    ) -> None:
        """The frontier's size and backlog (paused hosts' due URLs apart), from the database."""

    def db_transaction(self, seconds: float) -> None:
        """One database transaction of the fetch loop took ``seconds``."""

    def politeness_wait(self, seconds: float) -> None:
        """A host task is about to wait ``seconds`` for its host's politeness delay."""

    def address_refused(self) -> None:
        """The SSRF policy refused a host's address before its robots.txt was fetched."""

    def robots_denied(self) -> None:
        """A URL was not fetched because the host's robots.txt disallows it."""

    def robots_failed(self, kind: str) -> None:
        """A request for a host's robots.txt failed (DNS, TLS, a timeout, a 5xx) with ``kind``."""

    def crawl_delay_capped(self) -> None:
        """A host's robots.txt asked for a Crawl-delay above the maximum; it gets the maximum."""

    def host_backoff(self, seconds: float) -> None:
        """A host was put in backoff for ``seconds`` (429, 503, Retry-After, repeated errors)."""

    def lease_rejected(self, write: str) -> None:
        """A write for a leased host was refused (fencing): its result was dropped."""

    def hosts_sampled(self, in_backoff: int, circuit_open: int) -> None:
        """Hosts now in backoff, and hosts whose circuit breaker is open (no requests sent)."""

    def plan_solved(
        self, mu: float, budget_per_day: float, achieved_fetch_rate_per_day: float,
        prior_shape: float, prior_mean_rate_per_day: float,
    ) -> None:
        """The planner solved for μ under its budget, with the prior it fitted."""

    def collection_estimated(self, freshness: float, beta_currency: float) -> None:
        """Importance-weighted freshness and β-currency of the collection (docs/MODEL.md §4)."""

    def stage_completed(self, stage: str, seconds: float) -> None:
        """``claim`` (one claim statement) or ``parse`` (of one page) took ``seconds``; fetch
        and record times arrive with ``fetch_completed`` and ``db_transaction``."""

    def loop_lag(self, seconds: float) -> None:
        """The event loop woke ``seconds`` later than asked: time the loop was busy (CPU)."""


def status_class(status: int | None) -> str:
    return "none" if status is None else f"{status // 100}xx"


def _gauge(
    name: str, documentation: str, labelnames: Sequence[str] = (), *, registry: CollectorRegistry
) -> Gauge:
    """A gauge that, aggregated over ``--processes`` children, shows the value set last."""
    return Gauge(name, documentation, labelnames, registry=registry,
                 multiprocess_mode="mostrecent")


class Metrics:
    """All of the crawler's metrics, on a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.collection = CollectionMetrics(r)
        self.pings = PingMetrics(r)
        # --- fetching ---------------------------------------------------------------------
        self.fetches = Counter(
            f"{PREFIX}_fetches", "Fetches completed, by what was fetched (page, sitemap, "
            "feed), outcome and HTTP status class.",
            ["kind", "outcome", "status_class"], registry=r,
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
        # A Hamming distance is a count of bits; promtool reads a "_bits" suffix as a unit.
        self.simhash_distance = Histogram(
            f"{PREFIX}_simhash_distance",
            "Hamming distance (differing bits) between a page's fingerprint and its previous one.",
            buckets=(0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 64), registry=r,
        )
        # --- politeness -------------------------------------------------------------------
        self.politeness_waits = Counter(
            f"{PREFIX}_politeness_wait_seconds", "Time spent waiting out per-host delays.",
            registry=r,
        )
        self.robots_denials = Counter(
            f"{PREFIX}_robots_denials", "URLs not fetched because robots.txt disallows them.",
            registry=r,
        )
        self.host_backoffs = Counter(
            f"{PREFIX}_host_backoffs", "Times a host was put in backoff.", registry=r
        )
        self.host_backoff_seconds = Counter(
            f"{PREFIX}_host_backoff_seconds", "Backoff time imposed on hosts, summed.", registry=r
        )
        self.fetch_limits_hit = Counter(
            f"{PREFIX}_fetch_errors",
            "Fetches that hit a limit or failed, by error kind (timeout_total, too_large, "
            "decompression_bomb, ssrf, redirect_loop, http_503, ...), robots.txt requests "
            "included.",
            ["kind"], registry=r,
        )
        self.fetches_not_stored = Counter(
            f"{PREFIX}_fetches_not_stored",
            "Fetches recorded as errors because their record could not be stored or written, "
            "by why (disk_full, read_only, directory_gone, io_error, error).",
            ["reason"], registry=r,
        )
        self.lease_rejected_writes = Counter(
            f"{PREFIX}_lease_rejected_writes",
            "Writes refused because this daemon's host lease had expired or moved on (fenced "
            "leases), by write.",
            ["write"], registry=r,
        )
        self.crawl_delays_capped = Counter(
            f"{PREFIX}_crawl_delay_capped",
            "robots.txt Crawl-delay values above the configured maximum (crawled at the maximum).",
            registry=r,
        )
        self.hosts_in_backoff = _gauge(
            f"{PREFIX}_hosts_in_backoff", "Hosts currently in backoff.", registry=r
        )
        self.circuit_breakers_open = _gauge(
            f"{PREFIX}_circuit_breakers_open",
            "Hosts whose circuit breaker is open (no requests are sent to them).", registry=r,
        )
        # --- frontier ---------------------------------------------------------------------
        self.urls = _gauge(f"{PREFIX}_urls", "URLs in the frontier, by state.", ["state"],
                          registry=r)
        # A paused host's URLs fall due and wait for `crawler resume`: no backlog, so they
        # are counted apart and the most overdue URL is one of a host not paused.
        self.urls_due = _gauge(
            f"{PREFIX}_urls_due",
            "URLs whose next fetch time has passed, of hosts not paused (the backlog).",
            registry=r,
        )
        self.urls_due_paused = _gauge(
            f"{PREFIX}_urls_due_paused",
            "URLs of paused hosts whose next fetch time has passed (not in crawler_urls_due).",
            registry=r,
        )
        self.most_overdue = _gauge(
            f"{PREFIX}_most_overdue_seconds",
            "How late the most overdue URL of a host not paused is.", registry=r
        )
        self.hosts_leased = _gauge(
            f"{PREFIX}_hosts_leased", "Hosts currently leased by any daemon.", registry=r
        )
        # --- planner and collection estimates (NaN until the planner first reports) -------
        self.planner_mu = _gauge(
            f"{PREFIX}_planner_mu",
            "Lagrange multiplier μ: weighted objective gained by one more fetch per day "
            "(docs/MODEL.md §5).", registry=r,
        )
        self.planner_prior_shape = _gauge(
            f"{PREFIX}_planner_prior_shape",
            "Shape of the empirical-Bayes Gamma prior on change rates (docs/MODEL.md §2).",
            registry=r,
        )
        self.planner_prior_mean_rate = _gauge(
            f"{PREFIX}_planner_prior_mean_changes_per_second",
            "Mean change rate under the empirical-Bayes prior: what an unobserved URL is "
            "assumed to do.", registry=r,
        )
        self.planner_budget = _gauge(
            f"{PREFIX}_planner_budget_fetches_per_second",
            "Fetch budget the planner spends, all daemons together.", registry=r,
        )
        self.planner_achieved = _gauge(
            f"{PREFIX}_planner_achieved_fetches_per_second",
            "Fetch rate achieved recently, all daemons together, as the planner measured it.",
            registry=r,
        )
        self.collection_freshness = _gauge(
            f"{PREFIX}_collection_freshness_ratio",
            "Estimated importance-weighted freshness of the collection (docs/MODEL.md §4).",
            registry=r,
        )
        self.collection_beta_currency = _gauge(
            f"{PREFIX}_collection_beta_currency_ratio",
            "Estimated probability that a page is β-current for β = CRAWLER_BETA_SECONDS: "
            "the α of the collection's (α, β)-currency (docs/MODEL.md §4).", registry=r,
        )
        self.collection_estimated_at = _gauge(
            f"{PREFIX}_collection_estimated_timestamp_seconds",
            "When the collection estimates were last computed (Unix time; 0: never).",
            registry=r,
        )
        for unknown in (self.planner_mu, self.planner_budget, self.planner_achieved,
                        self.collection_freshness, self.collection_beta_currency):
            unknown.set(math.nan)
        # --- database and build -----------------------------------------------------------
        self.db_latency = Histogram(
            f"{PREFIX}_db_transaction_seconds", "Latency of the daemon's database transactions.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5), registry=r,
        )
        # --- hot path: what a daemon waits on ---------------------------------------------
        self.stage_duration = Histogram(
            f"{PREFIX}_page_stage_seconds",
            "Time per page in each step of the hot path: claim (per claim statement), fetch "
            "(request to last byte), parse (decode, parse, features, simhash), record (the "
            "page's transaction).",
            ["stage"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                     10),
            registry=r,
        )
        self.loop_lag_seconds = Histogram(
            f"{PREFIX}_event_loop_lag_seconds",
            "How late the event loop ran a timer: time it was busy with CPU work, per sample.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self.build = Info(f"{PREFIX}_build", "Build information.", registry=r)
        self.build.info({"version": __version__, "python": platform.python_version()})

    def fetch_completed(self, obs: Observation, kind: str = "page") -> None:
        if obs.error_kind:
            self.fetch_limits_hit.labels(obs.error_kind).inc()
            if obs.error_kind.startswith(STORAGE_ERROR_PREFIX):
                self.fetches_not_stored.labels(
                    obs.error_kind.removeprefix(STORAGE_ERROR_PREFIX)).inc()
        self.fetches.labels(kind, obs.outcome, status_class(obs.status)).inc()
        self.fetch_duration.observe(obs.duration_seconds)
        if obs.duration_seconds > 0:  # not for URLs robots.txt kept from being fetched
            self.stage_duration.labels("fetch").observe(obs.duration_seconds)
        self.response_bytes.inc(obs.size_bytes)
        if obs.changed:
            self.changes.inc()
        elif obs.content_changed:
            self.cosmetic_changes.inc()
        if obs.simhash_distance is not None:
            self.simhash_distance.observe(obs.simhash_distance)

    def frontier_sampled(
        self, urls_by_state: dict[str, int], due: int, most_overdue_seconds: float,
        hosts_leased: int, due_paused: int = 0,
    ) -> None:
        for state in UrlState:
            self.urls.labels(state.value).set(urls_by_state.get(state.value, 0))
        self.urls_due.set(due)
        self.urls_due_paused.set(due_paused)
        self.most_overdue.set(most_overdue_seconds)
        self.hosts_leased.set(hosts_leased)

    def db_transaction(self, seconds: float) -> None:
        self.db_latency.observe(seconds)
        self.stage_duration.labels("record").observe(seconds)

    def stage_completed(self, stage: str, seconds: float) -> None:
        self.stage_duration.labels(stage).observe(seconds)

    def loop_lag(self, seconds: float) -> None:
        self.loop_lag_seconds.observe(seconds)

    def politeness_wait(self, seconds: float) -> None:
        self.politeness_waits.inc(seconds)

    def address_refused(self) -> None:
        self.fetch_limits_hit.labels("ssrf").inc()

    def robots_denied(self) -> None:
        self.robots_denials.inc()

    def robots_failed(self, kind: str) -> None:
        self.fetch_limits_hit.labels(kind).inc()

    def crawl_delay_capped(self) -> None:
        self.crawl_delays_capped.inc()

    def host_backoff(self, seconds: float) -> None:
        self.host_backoffs.inc()
        self.host_backoff_seconds.inc(max(0.0, seconds))

    def lease_rejected(self, write: str) -> None:
        self.lease_rejected_writes.labels(write).inc()

    def hosts_sampled(self, in_backoff: int, circuit_open: int) -> None:
        self.hosts_in_backoff.set(in_backoff)
        self.circuit_breakers_open.set(circuit_open)

    def plan_solved(
        self, mu: float, budget_per_day: float, achieved_fetch_rate_per_day: float,
        prior_shape: float, prior_mean_rate_per_day: float,
    ) -> None:
        self.planner_prior_shape.set(prior_shape)
        self.planner_prior_mean_rate.set(prior_mean_rate_per_day / SECONDS_PER_DAY)
        self.planner_mu.set(mu)
        self.planner_budget.set(budget_per_day / SECONDS_PER_DAY)
        self.planner_achieved.set(achieved_fetch_rate_per_day / SECONDS_PER_DAY)

    def collection_estimated(self, freshness: float, beta_currency: float) -> None:
        self.collection_freshness.set(freshness)
        self.collection_beta_currency.set(beta_currency)
        self.collection_estimated_at.set_to_current_time()


def exported_names(registry: CollectorRegistry) -> set[str]:
    """Every series name the registry can expose, with the suffixes the exposition adds."""
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_sum", "_count"),
        "summary": ("", "_sum", "_count"),
        "info": ("_info",),
    }
    names: set[str] = set()
    for family in registry.collect():
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


class CollectionMetrics:
    """The collection's metrics: stored records and bytes, change events and their delivery."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.records = Counter(
            f"{PREFIX}_warc_records_total", "WARC records stored, by type (response, revisit).",
            ["type"], registry=registry,
        )
        self.bytes = Counter(
            f"{PREFIX}_warc_bytes_total", "Compressed WARC bytes stored (records with their "
            "requests).", registry=registry,
        )
        self.events_queued = Counter(
            f"{PREFIX}_change_events_queued_total", "Change events written to the outbox, by "
            "kind.", ["kind"], registry=registry,
        )
        self.events_delivered = Counter(
            f"{PREFIX}_webhook_events_delivered_total", "Change events the webhook accepted.",
            registry=registry,
        )
        self.delivery_failures = Counter(
            f"{PREFIX}_webhook_delivery_failures_total", "Failed webhook POSTs (retried later).",
            registry=registry,
        )
        self.events_pending = _gauge(
            f"{PREFIX}_webhook_events_pending", "Change events not yet delivered.",
            registry=registry,
        )
        self.storage_writable = _gauge(
            f"{PREFIX}_storage_writable",
            "1 while the WARC directory can be written; 0 while it cannot (no host is claimed "
            "then).", registry=registry,
        )
        self.storage_writable.set(1)
        self.storage_probes = Counter(
            f"{PREFIX}_storage_probes_total",
            "Probes of the WARC directory (a file written, synced and removed).",
            registry=registry,
        )
        self.storage_fault = _gauge(
            f"{PREFIX}_storage_fault",
            "1 for the reason the WARC directory cannot be written now (disk_full, read_only, "
            "directory_gone, io_error), else 0.", ["reason"], registry=registry,
        )
        self.damaged_records = Counter(
            f"{PREFIX}_warc_damaged_records_total",
            "Stored records found unreadable while reading a URL's previous version, and "
            "marked damaged in the index, by kind (missing, truncated, corrupt, digest).",
            ["kind"], registry=registry,
        )
        self.oldest_pending_age = _gauge(
            f"{PREFIX}_webhook_oldest_pending_age_seconds",
            "Age of the oldest undelivered change event (0 when none).", registry=registry,
        )

    def storage_probed(self) -> None:
        self.storage_probes.inc()

    def storage_state(self, fault_kind: str | None) -> None:
        self.storage_writable.set(1 if fault_kind is None else 0)
        for kind in FAULT_KINDS:
            self.storage_fault.labels(kind).set(1 if kind == fault_kind else 0)

    def damaged_found(self, kind: str) -> None:
        self.damaged_records.labels(kind).inc()

    def stored(self, record_type: str, length_bytes: int) -> None:
        self.records.labels(record_type).inc()
        self.bytes.inc(length_bytes)

    def event_queued(self, kind: str) -> None:
        self.events_queued.labels(kind).inc()


class PingMetrics:
    """IndexNow pings (crawler.daemon.indexnow), counted by the one process that serves
    /indexnow: the daemon, or under ``--processes N`` the parent, on its own registry beside
    the children's aggregate. Series appear once that process counts (``start``): a child
    never does, so the parent's aggregate holds no second copy of them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pings = Counter(
            f"{PREFIX}_indexnow_pings_total",
            "IndexNow pings answered, by outcome: accepted (200), pending (202, key check "
            "under way), invalid (400), wrong_key and unknown_host (403), outside_host and "
            "bad_key (422), rate_limited (429), unavailable (503).",
            ["outcome"], registry=registry,
        )
        self.key_fetches = Counter(
            f"{PREFIX}_indexnow_key_fetches_total",
            "IndexNow key checks that ended, by result: valid, invalid (the file answered "
            "without the key), failed (no answer, or the host could not be asked: paused, "
            "backing off, robots.txt).",
            ["result"], registry=registry,
        )

    def start(self, outcomes: Sequence[str], results: Sequence[str]) -> None:
        """Every series at 0, so that rates exist before the first ping."""
        for outcome in outcomes:
            self.pings.labels(outcome)
        for result in results:
            self.key_fetches.labels(result)

    def ping_answered(self, outcome: str) -> None:
        self.pings.labels(outcome).inc()

    def key_fetched(self, result: str) -> None:
        self.key_fetches.labels(result).inc()
