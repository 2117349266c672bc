"""Detection of pages that update on a clock (hourly, daily, weekly) rather than at random.

Grimes & O'Brien found many fast pages on a 1-hour or 1-day clock, and Wolf et al. call such
pages quasi-deterministic: updates happen only at known potential instants, so a fetch
should come just after one (docs/MODEL.md section 3). Here "the evidence is strong enough" is a
stated test: a Rayleigh test that update phases are not uniform (what a Poisson page gives),
Bonferroni-corrected for the candidate periods, plus a second check that the period explains
the data better than Poisson (see each function).

Times are absolute, in days (e.g. days since the Unix epoch, so that phases are clock times).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from crawler.core.estimate import mle_rate_irregular

FloatArray = npt.NDArray[np.float64]

HOUR_DAYS = 1.0 / 24.0
DEFAULT_CANDIDATES_DAYS: tuple[float, ...] = (HOUR_DAYS, 1.0, 7.0)
_TWO_PI = 2.0 * math.pi
MAX_JITTER_FRACTION = 0.12
"""The widest jitter a fitted model tries, as a share of its period."""


@dataclass(frozen=True, slots=True)
class PeriodicModel:
    """Updates happen near phase_days + k * period_days."""

    period_days: float
    phase_days: float
    """In [0, period_days): absolute time modulo the period."""
    jitter_days: float
    """Spread (standard deviation) of update times around the phase."""
    strength: float
    """Test statistic the model won with (Rayleigh Z for instants, penalised log-likelihood
    ratio against Poisson for intervals)."""


def rayleigh_p_value(events: int, mean_resultant_length: float) -> float:
    """P-value of the Rayleigh test that `events` phases are uniform on the circle.

    Zar, Biostatistical Analysis (1999), eq. 27.4: p = exp(sqrt(1 + 4n + 4(n^2 - R^2))
    - (1 + 2n)) with R = n * mean resultant length; accurate down to small n.
    """
    if events <= 0:
        return 1.0
    resultant = events * mean_resultant_length
    exponent = math.sqrt(1.0 + 4.0 * events + 4.0 * (events**2 - resultant**2)) - (1.0 + 2 * events)
    return min(1.0, math.exp(exponent))


def _circular_summary(times_days: FloatArray, period_days: float) -> tuple[float, float]:
    """(mean resultant length, mean phase in days) of times modulo the period."""
    angles = _TWO_PI * np.mod(times_days, period_days) / period_days
    cos_mean, sin_mean = float(np.cos(angles).mean()), float(np.sin(angles).mean())
    length = math.hypot(cos_mean, sin_mean)
    phase_days = (math.atan2(sin_mean, cos_mean) / _TWO_PI * period_days) % period_days
    return length, phase_days


def _jitter_from_length(length: float, period_days: float) -> float:
    """Circular standard deviation sqrt(-2 ln R), in days."""
    return math.sqrt(-2.0 * math.log(max(length, 1e-300))) * period_days / _TWO_PI


def detect_period(
    update_times_days: Sequence[float],
    *,
    candidates: Sequence[float] = DEFAULT_CANDIDATES_DAYS,
    min_events: int = 8,
    significance: float = 0.01,
    min_resultant_length: float = 0.8,
    max_short_gap_fraction: float = 0.1,
) -> PeriodicModel | None:
    """Detect a period from (approximately) exact update instants, e.g. credible Last-Modified.

    A candidate period P fits when (1) the Rayleigh test rejects uniform phases at
    `significance / len(candidates)`, (2) the phases are concentrated (mean resultant length
    >= `min_resultant_length`), so a page merely busier in working hours is not called
    clock-driven, and (3) at most `max_short_gap_fraction` of the gaps between consecutive
    distinct updates are shorter than P/2 (no more than one update per cycle).

    Times concentrated modulo P are also concentrated modulo every divisor of P, but not
    modulo its multiples: among the fitting candidates the LONGEST is the page's period.
    """
    times = np.unique(np.asarray(update_times_days, dtype=np.float64))
    if times.size < min_events or not candidates:
        return None
    gaps_days = np.diff(times)
    threshold = significance / len(candidates)
    best: PeriodicModel | None = None
    for period_days in sorted(candidates):
        length, phase_days = _circular_summary(times, period_days)
        if length < min_resultant_length:
            continue
        if rayleigh_p_value(times.size, length) >= threshold:
            continue
        if np.mean(gaps_days < 0.5 * period_days) > max_short_gap_fraction:
            continue
        jitter_days = _jitter_from_length(length, period_days)
        best = PeriodicModel(period_days, phase_days, jitter_days, times.size * length**2)
    return best


# ---------------------------------------------------------------------------------------------
# Detection from fetch brackets


def _expected_slots_up_to(
    times_days: FloatArray, phases_days: FloatArray, jitters_days: FloatArray, period_days: float
) -> FloatArray:
    """Smoothed count of update slots phase + k*P (jittered, Gaussian) at or before each time.

    Broadcasts times [N, 1, 1] against phases [1, F, 1] and jitters [1, 1, S]. Only the
    nearest slot on each side is smoothed: the jitter is at most MAX_JITTER_FRACTION of P, so
    the next slots out are at least 8.3 standard deviations away and would add under 1e-16.
    """
    cycles = (times_days - phases_days) / period_days
    whole = np.floor(cycles)
    fraction = cycles - whole
    scale = period_days / jitters_days
    from scipy import special  # scipy on first use (see crawler.core)
    smoothed: FloatArray = (
        whole - special.ndtr(-fraction * scale) + special.ndtr((fraction - 1.0) * scale)
    )
    return smoothed


def _periodic_log_likelihood(
    starts: FloatArray, ends: FloatArray, changed: npt.NDArray[np.bool_],
    phases_days: FloatArray, jitters_days: FloatArray, period_days: float,
    leak_probability: float,
) -> FloatArray:
    """Log-likelihood [phase, jitter] of the change/no-change record under a periodic model.

    An interval (a, b] shows a change with probability eps + (1 - 2 eps) q, q the chance that
    a jittered slot falls in it; eps lets an occasional off-schedule edit or missed update
    cost a bounded penalty instead of refuting the model.
    """
    shape = (-1, 1, 1)
    phase_grid = phases_days[None, :, None]
    jitter_grid = jitters_days[None, None, :]
    # Consecutive brackets share their ends (a changed bracket ends where the unchanged gap
    # after it starts): the slot counts, most of the cost, are computed once per instant.
    instants, where = np.unique(np.concatenate([starts, ends]), return_inverse=True)
    counts = _expected_slots_up_to(instants.reshape(shape), phase_grid, jitter_grid, period_days)
    slots = counts[where[starts.size :]] - counts[where[: starts.size]]
    hit = np.clip(slots, 0.0, 1.0)
    change_probability = leak_probability + (1.0 - 2.0 * leak_probability) * hit
    # Each row needs only one of the two logarithms.
    per_interval = np.empty_like(change_probability)
    per_interval[changed] = np.log(change_probability[changed])
    unchanged = ~changed
    per_interval[unchanged] = np.log1p(-change_probability[unchanged])
    result: FloatArray = per_interval.sum(axis=0)
    return result


def _poisson_log_likelihood(lengths_days: FloatArray, changed: npt.NDArray[np.bool_]) -> float:
    """Maximised Poisson log-likelihood of the same record (0 when every interval changed)."""
    rate = mle_rate_irregular(lengths_days[changed].tolist(), float(lengths_days[~changed].sum()))
    if rate is None:
        return 0.0 if changed.all() else -math.inf
    detected = -np.expm1(-rate * lengths_days[changed])
    return float(np.log(detected).sum()) - rate * float(lengths_days[~changed].sum())


def detect_period_from_intervals(
    changed_intervals: Sequence[tuple[float, float]],
    unchanged_intervals: Sequence[tuple[float, float]] = (),
    *,
    candidates: Sequence[float] = DEFAULT_CANDIDATES_DAYS,
    min_events: int = 8,
    significance: float = 0.01,
    leak_probability: float = 0.02,
    max_repeat_fraction: float = 0.1,
    phase_points: int = 61,
    max_intervals: int = 2000,
) -> PeriodicModel | None:
    """Detect a period from fetch brackets: a change seen in (a, b], none seen in (c, d].

    The three tests of docs/MODEL.md section 3.1, for each candidate P: a Rayleigh test on the
    midpoints of changed brackets shorter than P/2, at `significance / len(candidates)`; the
    periodic model (phase and jitter fitted by maximum likelihood over all brackets) beating
    the best Poisson rate by more than log(len(candidates) / significance) after a BIC penalty
    log(N); at most `max_repeat_fraction` of the short changed brackets sharing their nearest
    slot. Unchanged brackets are what refute a too-short period, so the candidate with the
    largest penalised ratio wins. An hourly page needs fetches under 30 min apart here, or
    Last-Modified times (detect_period). Only the newest `max_intervals` brackets are used.
    """
    if not changed_intervals or not candidates:
        return None
    bounds = np.asarray([*changed_intervals, *unchanged_intervals], dtype=np.float64)
    starts, ends = bounds[:, 0], bounds[:, 1]
    if np.any(ends <= starts):
        raise ValueError("every interval (a, b] needs a < b")
    changed = np.zeros(starts.size, dtype=np.bool_)
    changed[: len(changed_intervals)] = True
    if starts.size > max_intervals:  # bound the cost: the newest brackets only
        newest = np.argsort(ends)[-max_intervals:]
        starts, ends, changed = starts[newest], ends[newest], changed[newest]
    lengths = ends - starts
    # The Poisson fit (a root search) is needed only by a candidate that passes the cheap
    # tests; most records have none.
    poisson: float | None = None
    rayleigh_threshold = significance / len(candidates)
    required_strength = math.log(len(candidates) / significance)
    penalty = math.log(starts.size)

    best: PeriodicModel | None = None
    for period_days in candidates:
        informative = changed & (lengths < 0.5 * period_days)
        if np.count_nonzero(informative) < min_events:
            continue
        midpoints = 0.5 * (starts[informative] + ends[informative])
        length, mean_phase = _circular_summary(midpoints, period_days)
        if rayleigh_p_value(midpoints.size, length) >= rayleigh_threshold:
            continue
        # Cheap check first, with the midpoints' phase: it rejects most non-clock pages.
        if _repeat_fraction(starts, ends, changed, period_days, mean_phase) > max_repeat_fraction:
            continue
        phase, jitter, periodic = _fit_phase_and_jitter(
            starts, ends, changed, period_days, mean_phase, leak_probability, phase_points
        )
        if _repeat_fraction(starts, ends, changed, period_days, phase) > max_repeat_fraction:
            continue
        if poisson is None:
            poisson = _poisson_log_likelihood(lengths, changed)
        strength = periodic - poisson - penalty
        if strength <= required_strength or (best is not None and strength <= best.strength):
            continue
        best = PeriodicModel(period_days, phase, jitter, strength)
    return best


def _repeat_fraction(
    starts: FloatArray, ends: FloatArray, changed: npt.NDArray[np.bool_], period_days: float,
    phase_days: float,
) -> float:
    """Share of short changed brackets that are not the first one seen for their slot."""
    short = changed & (ends - starts < period_days)
    if not np.any(short):
        return 0.0
    midpoints = 0.5 * (starts[short] + ends[short])
    slots = np.round((midpoints - phase_days) / period_days)
    return 1.0 - np.unique(slots).size / slots.size


def _fit_phase_and_jitter(
    starts: FloatArray, ends: FloatArray, changed: npt.NDArray[np.bool_], period_days: float,
    start_phase_days: float, leak_probability: float, phase_points: int,
) -> tuple[float, float, float]:
    """Maximum-likelihood (phase, jitter, log-likelihood) near the brackets' mean phase.

    The midpoints passed the Rayleigh test, so their mean phase is within a fraction of the
    period of the answer: search +-P/4 around it, then a finer grid around the best point.
    """
    jitters = period_days * np.geomspace(0.002, MAX_JITTER_FRACTION, 7)
    step = 0.5 * period_days / (phase_points - 1)
    phase_steps = step * np.arange(-(phase_points // 2), phase_points // 2 + 1)
    phases = np.mod(start_phase_days + phase_steps, period_days)
    for _refinement in range(2):
        surface = _periodic_log_likelihood(
            starts, ends, changed, phases, jitters, period_days, leak_probability
        )
        # Several phases tie when brackets leave the phase only bounded: take the middle of
        # the best plateau rather than its first point.
        top = surface.max()
        tied_phase, tied_jitter = np.nonzero(surface >= top - 1e-9)
        jitter_index = int(tied_jitter.min())
        on_plateau = phases[tied_phase[tied_jitter == jitter_index]]
        anchor = on_plateau[0]
        offsets = np.mod(on_plateau - anchor + 0.5 * period_days, period_days) - 0.5 * period_days
        best_phase = (anchor + float(offsets.mean())) % period_days
        if _refinement == 1:
            break
        coarse_phases, coarse_surface = phases, surface
        phases = np.mod(best_phase + np.linspace(-1.5 * step, 1.5 * step, 31), period_days)
        step = 3.0 * step / 30
    # Brackets wider than the jitter leave the phase only bounded: the phases within half a
    # unit of log-likelihood of the best (about one standard error) measure its error, which
    # joins the jitter, so a fetch waits long enough and a vague model is not used for timing.
    near = np.concatenate([
        grid[values[:, jitter_index] >= top - 0.5]
        for grid, values in ((coarse_phases, coarse_surface), (phases, surface))
    ])
    offsets = np.mod(near - best_phase + 0.5 * period_days, period_days) - 0.5 * period_days
    phase_error = float(np.max(np.abs(offsets))) if near.size else 0.0
    jitter = math.hypot(float(jitters[jitter_index]), phase_error)
    return float(best_phase), jitter, float(top)


def next_update_after(model: PeriodicModel, t_days: float) -> float:
    """The first expected update instant strictly after t_days."""
    cycles = math.floor((t_days - model.phase_days) / model.period_days) + 1
    instant = model.phase_days + cycles * model.period_days
    return instant if instant > t_days else instant + model.period_days
