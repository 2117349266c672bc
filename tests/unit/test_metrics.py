"""The metric set: conventions operators rely on, and events mapped to the right series."""

from __future__ import annotations

import inspect
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from crawler.core.model import SECONDS_PER_DAY, Observation
from crawler.metrics import PREFIX, Events, Metrics, exported_names, status_class

# Labels whose values are unbounded: one series per page or site would swamp Prometheus.
FORBIDDEN_LABELS = {"url", "host", "origin", "path", "domain", "owner"}
BASE_UNIT_WORDS = {"milliseconds", "minutes", "hours", "days", "kilobytes", "megabytes", "bits"}


def observation(outcome: str = "ok", status: int | None = 200, size: int = 100,
                changed: bool | None = None, content_changed: bool | None = None,
                distance: int | None = None, duration: float = 0.05) -> Observation:
    return Observation(
        fetched_at=1.0, outcome=outcome, status=status, size_bytes=size, duration_seconds=duration,
        simhash=None, content_hash=None, simhash_distance=distance, changed=changed,
        content_changed=content_changed, last_modified=None, error_kind=None, truncated=False,
    )


def value(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    sample = metrics.registry.get_sample_value(name, labels or {})
    assert sample is not None, name
    return sample


def test_names_help_and_labels_follow_conventions() -> None:
    metrics = Metrics()
    families = list(metrics.registry.collect())
    assert len(families) >= 20
    for family in families:
        assert family.name.startswith(PREFIX + "_"), family.name
        assert family.documentation.strip(), family.name
        words = set(family.name.split("_"))
        assert not words & BASE_UNIT_WORDS, family.name
        if family.type != "counter":
            assert not family.name.endswith("_total"), family.name
    for attribute in vars(metrics).values():
        labels = set(getattr(attribute, "_labelnames", ()))
        assert not labels & FORBIDDEN_LABELS, attribute


def test_every_event_of_the_protocol_is_implemented() -> None:
    events = {n for n, _ in inspect.getmembers(Events, inspect.isfunction) if not n.startswith("_")}
    assert {"fetch_completed", "collection_estimated", "plan_solved", "robots_denied"} <= events
    for name in events:
        assert callable(getattr(Metrics, name)), name
        assert inspect.signature(getattr(Metrics, name)) == inspect.signature(
            getattr(Events, name)
        ), name


@given(st.lists(st.tuples(
    st.sampled_from(["ok", "not_modified", "gone", "http_error", "timeout", "network_error"]),
    st.one_of(st.none(), st.integers(100, 599)),
    st.integers(0, 10**7),
    st.one_of(st.none(), st.booleans()),
    st.one_of(st.none(), st.integers(0, 64)),
), max_size=30))
def test_fetch_events_are_counted_exactly(
    fetches: list[tuple[str, int | None, int, bool | None, int | None]],
) -> None:
    metrics = Metrics()
    for outcome, status, size, changed, distance in fetches:
        metrics.fetch_completed(observation(outcome, status, size, changed, None, distance))
    counted = {
        (s.labels["outcome"], s.labels["status_class"]): s.value
        for family in metrics.registry.collect() if family.name == "crawler_fetches"
        for s in family.samples
    }
    expected: dict[tuple[str, str], float] = {}
    for outcome, status, *_ in fetches:
        key = (outcome, status_class(status))
        expected[key] = expected.get(key, 0) + 1
    assert counted == expected
    assert value(metrics, "crawler_response_bytes_total") == sum(f[2] for f in fetches)
    assert value(metrics, "crawler_changes_total") == sum(bool(f[3]) for f in fetches)
    assert value(metrics, "crawler_fetch_duration_seconds_count") == len(fetches)
    assert value(metrics, "crawler_simhash_distance_count") == sum(
        f[4] is not None for f in fetches
    )


def test_status_class() -> None:
    assert [status_class(s) for s in (None, 200, 304, 404, 503)] == [
        "none", "2xx", "3xx", "4xx", "5xx"
    ]


def test_cosmetic_change_is_not_a_change() -> None:
    metrics = Metrics()
    metrics.fetch_completed(observation(changed=False, content_changed=True, distance=2))
    metrics.fetch_completed(observation(changed=True, content_changed=True, distance=20))
    assert value(metrics, "crawler_changes_total") == 1
    assert value(metrics, "crawler_cosmetic_changes_total") == 1
    assert value(metrics, "crawler_simhash_distance_bucket", {"le": "3.0"}) == 1


def test_planner_and_collection_gauges_are_unknown_until_reported() -> None:
    metrics = Metrics()
    for name in ("crawler_planner_mu", "crawler_collection_freshness_ratio",
                 "crawler_collection_beta_currency_ratio"):
        assert math.isnan(value(metrics, name)), name
    assert value(metrics, "crawler_collection_estimated_timestamp_seconds") == 0
    metrics.plan_solved(mu=0.02, budget_per_day=8640.0, achieved_fetch_rate_per_day=4320.0,
                        prior_shape=0.7, prior_mean_rate_per_day=0.5)
    metrics.collection_estimated(freshness=0.83, beta_currency=0.91)
    assert value(metrics, "crawler_planner_mu") == 0.02
    assert value(metrics, "crawler_planner_budget_fetches_per_second") == pytest.approx(
        8640.0 / SECONDS_PER_DAY
    )
    assert value(metrics, "crawler_planner_achieved_fetches_per_second") == pytest.approx(0.05)
    assert value(metrics, "crawler_planner_prior_shape") == 0.7
    assert value(metrics, "crawler_planner_prior_mean_changes_per_second") == pytest.approx(
        0.5 / SECONDS_PER_DAY
    )
    assert value(metrics, "crawler_collection_freshness_ratio") == 0.83
    assert value(metrics, "crawler_collection_beta_currency_ratio") == 0.91
    assert value(metrics, "crawler_collection_estimated_timestamp_seconds") > 1.6e9


def test_host_and_frontier_events() -> None:
    metrics = Metrics()
    metrics.robots_denied()
    metrics.host_backoff(30.0)
    metrics.host_backoff(90.0)
    metrics.hosts_sampled(in_backoff=2, circuit_open=1)
    metrics.politeness_wait(0.5)
    metrics.db_transaction(0.003)
    metrics.frontier_sampled({"active": 7, "gone": 1}, due=3, most_overdue_seconds=12.5,
                             hosts_leased=2, due_paused=40)
    assert value(metrics, "crawler_robots_denials_total") == 1
    assert value(metrics, "crawler_host_backoffs_total") == 2
    assert value(metrics, "crawler_host_backoff_seconds_total") == 120
    assert value(metrics, "crawler_hosts_in_backoff") == 2
    assert value(metrics, "crawler_circuit_breakers_open") == 1
    assert value(metrics, "crawler_politeness_wait_seconds_total") == 0.5
    assert value(metrics, "crawler_db_transaction_seconds_count") == 1
    assert value(metrics, "crawler_urls", {"state": "active"}) == 7
    assert value(metrics, "crawler_urls", {"state": "new"}) == 0  # every state is exported
    assert value(metrics, "crawler_urls_due") == 3
    assert value(metrics, "crawler_urls_due_paused") == 40  # a paused host is no backlog
    assert value(metrics, "crawler_most_overdue_seconds") == 12.5
    assert value(metrics, "crawler_hosts_leased") == 2


def test_exported_names_match_the_exposition() -> None:
    metrics = Metrics()
    metrics.fetch_completed(observation(distance=3))
    metrics.frontier_sampled({"active": 1}, 0, 0.0, 0)
    exposed = {
        sample.name
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for sample in family.samples
    }
    names = exported_names(metrics.registry)
    assert exposed <= names
    assert "crawler_fetches_total" in names and "crawler_build_info" in names
    assert not any(name.endswith("_created") for name in exposed)


def test_hot_path_stages_are_timed_per_page() -> None:
    metrics = Metrics()
    metrics.stage_completed("claim", 0.002)
    metrics.stage_completed("parse", 0.004)
    metrics.db_transaction(0.003)  # the page's record transaction
    metrics.fetch_completed(observation(duration=0.05))
    metrics.fetch_completed(observation(outcome="disallowed", status=None, duration=0.0))
    counts = {stage: metrics.registry.get_sample_value(
        f"{PREFIX}_page_stage_seconds_count", {"stage": stage}
    ) for stage in ("claim", "fetch", "parse", "record")}
    assert counts == {"claim": 1, "fetch": 1, "parse": 1, "record": 1}  # no fetch, no fetch time
    assert metrics.registry.get_sample_value(
        f"{PREFIX}_page_stage_seconds_sum", {"stage": "fetch"}) == pytest.approx(0.05)


async def test_event_loop_lag_shows_a_blocked_loop() -> None:
    import asyncio
    import time

    from crawler.daemon.looplag import watch_loop_lag

    lags: list[float] = []

    class Lags:
        def loop_lag(self, seconds: float) -> None:
            lags.append(seconds)

    watcher = asyncio.create_task(watch_loop_lag(Lags(), interval=0.01))
    try:
        deadline = time.monotonic() + 30
        while not lags:  # the watcher is running
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        time.sleep(0.3)  # CPU-bound work holding the loop
        while not any(lag >= 0.25 for lag in lags):
            assert time.monotonic() < deadline, lags
            await asyncio.sleep(0.01)
    finally:
        watcher.cancel()
