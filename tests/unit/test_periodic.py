"""Detection of hourly / daily / weekly update clocks, checked by simulated pages."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.core import periodic
from crawler.core.estimate import DEFAULT_PRIOR, ChangeHistory
from crawler.core.model import SECONDS_PER_DAY, Observation, Outcome, UrlRecord
from crawler.core.periodic import (
    HOUR_DAYS,
    PeriodicModel,
    detect_period,
    detect_period_from_intervals,
    next_update_after,
    rayleigh_p_value,
)
from crawler.core.schedule import (
    SchedulePolicy,
    estimated_rate_per_day,
    next_fetch,
    update_delay_seconds,
)
from crawler.settings import default_settings

EPOCH_DAYS = 20_000.0  # absolute time, like days since 1970
MINUTE_DAYS = 1.0 / 1440.0

Brackets = tuple[list[tuple[float, float]], list[tuple[float, float]], list[float]]


def clock_updates(
    rng: np.random.Generator, period: float, phase: float, jitter: float, span: float
) -> np.ndarray:
    slots = np.arange(int(span / period) + 1)
    return np.sort(EPOCH_DAYS + phase + slots * period + rng.normal(0.0, jitter, slots.size))


def poisson_updates(rng: np.random.Generator, rate: float, span: float) -> np.ndarray:
    return np.sort(EPOCH_DAYS + rng.uniform(0.0, span, rng.poisson(rate * span)))


def observe(
    rng: np.random.Generator, updates: np.ndarray, mean_gap: float, span: float
) -> Brackets:
    """Fetch at jittered intervals: changed and unchanged brackets, Last-Modified values."""
    gaps = rng.uniform(0.5 * mean_gap, 1.5 * mean_gap, int(2 * span / mean_gap) + 2)
    fetches = EPOCH_DAYS + np.cumsum(gaps)
    fetches = fetches[fetches < EPOCH_DAYS + span]
    changed, unchanged, last_modified = [], [], []
    for start, end in zip(fetches[:-1].tolist(), fetches[1:].tolist(), strict=True):
        inside = updates[(updates > start) & (updates <= end)]
        if inside.size:
            changed.append((start, end))
            last_modified.append(float(inside.max()))
        else:
            unchanged.append((start, end))
    return changed, unchanged, last_modified


def phase_error(model: PeriodicModel, true_phase: float) -> float:
    true_mod = (EPOCH_DAYS + true_phase) % model.period_days
    difference = (model.phase_days - true_mod) % model.period_days
    return min(difference, model.period_days - difference)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_daily_page_found_from_brackets_of_fetches_every_three_hours(seed: int) -> None:
    rng = np.random.default_rng(seed)
    updates = clock_updates(rng, 1.0, phase=0.25, jitter=3 * MINUTE_DAYS, span=20.0)
    changed, unchanged, last_modified = observe(rng, updates, 3 * HOUR_DAYS, 20.0)
    for model in (detect_period_from_intervals(changed, unchanged), detect_period(last_modified)):
        assert model is not None
        assert model.period_days == 1.0  # not hourly, though 06:00 is also minute 0 of an hour
        assert phase_error(model, 0.25) < 15 * MINUTE_DAYS
        assert model.jitter_days < 30 * MINUTE_DAYS


@pytest.mark.parametrize("seed", [4, 5])
def test_hourly_page_found_from_fast_fetches_and_from_last_modified(seed: int) -> None:
    rng = np.random.default_rng(seed)
    updates = clock_updates(rng, HOUR_DAYS, phase=0.01, jitter=2 * MINUTE_DAYS, span=3.0)
    changed, unchanged, last_modified = observe(rng, updates, 20 * MINUTE_DAYS, 3.0)
    for model in (detect_period_from_intervals(changed, unchanged), detect_period(last_modified)):
        assert model is not None
        assert model.period_days == HOUR_DAYS
        assert phase_error(model, 0.01) < 4 * MINUTE_DAYS


def test_hourly_page_fetched_every_three_hours_is_hourly_by_last_modified() -> None:
    rng = np.random.default_rng(6)
    updates = clock_updates(rng, HOUR_DAYS, phase=0.02, jitter=2 * MINUTE_DAYS, span=30.0)
    changed, unchanged, last_modified = observe(rng, updates, 3 * HOUR_DAYS, 30.0)
    model = detect_period(last_modified)
    assert model is not None
    assert model.period_days == HOUR_DAYS  # its daily phases are uniform
    assert phase_error(model, 0.02) < 4 * MINUTE_DAYS
    # Brackets three hours long say nothing about an hourly phase; no false claim either.
    from_brackets = detect_period_from_intervals(changed, unchanged)
    assert from_brackets is None or from_brackets.period_days == HOUR_DAYS


def test_weekly_page() -> None:
    rng = np.random.default_rng(7)
    updates = clock_updates(rng, 7.0, phase=2.3, jitter=0.02, span=120.0)
    changed, unchanged, last_modified = observe(rng, updates, 0.5, 120.0)
    for model in (detect_period_from_intervals(changed, unchanged), detect_period(last_modified)):
        assert model is not None
        assert model.period_days == 7.0
        assert phase_error(model, 2.3) < 0.25


def test_poisson_pages_are_not_called_periodic() -> None:
    rng = np.random.default_rng(8)
    pages, from_brackets, from_last_modified = 200, 0, 0
    for _page in range(pages):
        rate = 10 ** rng.uniform(-1.0, 1.5)
        mean_gap = 10 ** rng.uniform(-2.0, 0.0)
        updates = poisson_updates(rng, rate, 60.0)
        changed, unchanged, last_modified = observe(rng, updates, mean_gap, 60.0)
        from_brackets += detect_period_from_intervals(changed, unchanged) is not None
        from_last_modified += detect_period(last_modified) is not None
    # The tests run at 1% significance; 2% leaves room for the seed, not for a broken test.
    assert from_brackets <= 0.02 * pages
    assert from_last_modified <= 0.02 * pages


def test_working_hours_poisson_page_is_not_a_clock() -> None:
    """Changes at random times but only 09:00-17:00: phases cluster, yet no single update."""
    rng = np.random.default_rng(9)
    detections = 0
    for _page in range(40):
        days = rng.integers(0, 60, 300)
        updates = np.sort(EPOCH_DAYS + days + rng.uniform(9 / 24, 17 / 24, days.size))
        changed, unchanged, last_modified = observe(rng, updates, 10 ** rng.uniform(-2, -0.5), 60)
        detections += detect_period_from_intervals(changed, unchanged) is not None
        detections += detect_period(last_modified) is not None
    assert detections <= 1


def test_poisson_page_on_a_clock_aligned_fetch_grid_is_not_periodic() -> None:
    """A crawler fetching exactly on the half hour must not impose its own phase."""
    rng = np.random.default_rng(10)
    detections = 0
    for page in range(30):
        updates = poisson_updates(rng, 10 ** rng.uniform(-0.5, 1.5), 30.0)
        fetches = EPOCH_DAYS + np.arange(0.0, 30.0, (HOUR_DAYS / 2, HOUR_DAYS, 0.125)[page % 3])
        changed: list[tuple[float, float]] = []
        unchanged: list[tuple[float, float]] = []
        for start, end in zip(fetches[:-1].tolist(), fetches[1:].tolist(), strict=True):
            hit = np.any((updates > start) & (updates <= end))
            (changed if hit else unchanged).append((start, end))
        detections += detect_period_from_intervals(changed, unchanged) is not None
    assert detections == 0


def test_too_few_events_gives_no_model() -> None:
    exact = [EPOCH_DAYS + 0.25 + k for k in range(5)]
    assert detect_period(exact) is None
    assert detect_period(exact, min_events=4) is not None
    assert detect_period_from_intervals([]) is None


def test_rayleigh_p_value() -> None:
    assert rayleigh_p_value(30, 1.0) < 1e-10
    assert rayleigh_p_value(30, 0.05) > 0.9
    assert rayleigh_p_value(0, 0.0) == 1.0
    # Large-n limit: p ~ exp(-n R^2).
    assert rayleigh_p_value(2000, 0.05) == pytest.approx(math.exp(-2000 * 0.05**2), rel=0.05)


@given(
    period=st.sampled_from([HOUR_DAYS, 1.0, 7.0]),
    phase_fraction=st.floats(0.0, 0.999),
    t_days=st.floats(0.0, 30_000.0),
    jitter_fraction=st.floats(0.0, 0.1),
)
def test_next_update_after(
    period: float, phase_fraction: float, t_days: float, jitter_fraction: float
) -> None:
    model = PeriodicModel(period, phase_fraction * period, jitter_fraction * period, 1.0)
    update = next_update_after(model, t_days)
    assert t_days < update <= t_days + period * (1 + 1e-9)
    cycles = (update - model.phase_days) / period
    assert abs(cycles - round(cycles)) < 1e-6


# ---------------------------------------------------------------------------------------------
# Scheduling a timed page (crawler.core.schedule)


def _timed_daily_record(changed_days: int) -> tuple[UrlRecord, SchedulePolicy]:
    """A daily page (updates at 06:00, jitter ~3 min) fetched just after every update: each
    interval a day long and changed, as the timed schedule produces."""
    history = ChangeHistory()
    for _ in range(changed_days):
        history = history.observe(1.0, True)
    record = UrlRecord(
        1,
        "http://a.test/",
        history=history,
        periodic=PeriodicModel(1.0, 0.25, 2.0 * MINUTE_DAYS, 50.0),
        last_fetched_at=(EPOCH_DAYS + 0.26) * SECONDS_PER_DAY,
    )
    policy = SchedulePolicy(default_settings(schedule="optimal", detect_periods=True),
                            mu=0.05, prior=DEFAULT_PRIOR)
    return record, policy


def test_a_timed_pages_rate_is_capped_at_one_change_per_period() -> None:
    # Every interval saw a change: the Poisson posterior reads that as a fast page...
    record, policy = _timed_daily_record(40)
    untimed = estimated_rate_per_day(
        record, SchedulePolicy(default_settings(schedule="optimal", detect_periods=False),
                               mu=0.05, prior=DEFAULT_PRIOR))
    assert untimed > 1.2
    # ...but a clock that updates once a day changes at most once a day.
    assert estimated_rate_per_day(record, policy) == pytest.approx(1.0)


def _unchanged(at_days: float) -> Observation:
    return Observation(
        fetched_at=at_days * SECONDS_PER_DAY, outcome=Outcome.OK, status=200, size_bytes=10,
        duration_seconds=0.1, simhash=1, content_hash=b"x", simhash_distance=0, changed=False,
        content_changed=False, last_modified=None, error_kind=None, truncated=False,
    )


def test_a_timed_page_fetched_early_retries_as_late_after_its_target() -> None:
    record, policy = _timed_daily_record(40)
    model = record.periodic
    assert model is not None
    delay = update_delay_seconds(model, policy) / SECONDS_PER_DAY
    target = next_update_after(model, EPOCH_DAYS + 1.0) + delay  # tomorrow 06:00 + delay
    early = 20.0 * MINUTE_DAYS
    schedule = next_fetch(record, _unchanged(target - early), policy)
    assert schedule.next_fetch_at / SECONDS_PER_DAY == pytest.approx(target + early)
    # On time and nothing new (a skipped update): no retry within the cycle.
    on_time = next_fetch(record, _unchanged(target + MINUTE_DAYS), policy)
    assert on_time.next_fetch_at / SECONDS_PER_DAY > target + 0.5


def test_bracket_likelihood_equals_the_direct_formula() -> None:
    """The likelihood surface computes each shared bracket end once and one logarithm per
    row: bit for bit the direct formula (slot counts at both ends of every bracket, log or
    log1p chosen by np.where)."""
    rng = np.random.default_rng(4)
    edges = np.cumsum(rng.uniform(0.01, 0.4, 41)) + EPOCH_DAYS
    starts, ends = edges[:-1], edges[1:]  # consecutive brackets: shared ends
    changed = rng.random(starts.size) < 0.4
    phases = np.linspace(0.0, 0.9, 13)
    jitters = np.geomspace(0.002, 0.12, 7)
    shape = (-1, 1, 1)
    grid = (phases[None, :, None], jitters[None, None, :], 1.0)
    slots = periodic._expected_slots_up_to(
        ends.reshape(shape), *grid
    ) - periodic._expected_slots_up_to(starts.reshape(shape), *grid)
    probability = 0.02 + 0.96 * np.clip(slots, 0.0, 1.0)
    direct = np.where(
        changed.reshape(shape), np.log(probability), np.log1p(-probability)
    ).sum(axis=0)
    surface = periodic._periodic_log_likelihood(
        starts, ends, changed, phases, jitters, 1.0, 0.02
    )
    assert np.array_equal(surface, direct)
