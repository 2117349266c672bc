"""Ground-truth page populations for the simulator: every page's change instants over [0, D].

Change times are generated up front, event by event, so freshness can be integrated exactly
between fetches. Time 0 is a Monday 00:00 local time (the `grimes` population follows the clock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
HOUR_DAYS = 1.0 / 24.0
MINUTE_DAYS = 1.0 / 1440.0


@dataclass(frozen=True, slots=True)
class Population:
    """Pages with their mean change rates and their change instants, page by page (CSR)."""

    name: str
    change_rates_per_day: FloatArray  # mean rates: what `oracle` and `proportional` are told
    change_times_days: FloatArray  # all instants, sorted within each page's slice
    offsets: NDArray[np.int64]  # page i's instants are change_times_days[offsets[i]:offsets[i+1]]
    kinds: tuple[str, ...]  # per page: "poisson", "pareto", "quasi", "hourly", "daily", ...

    @property
    def pages(self) -> int:
        return int(self.change_rates_per_day.size)


def _pack(name: str, rates: FloatArray, per_page: list[FloatArray], kinds: list[str]) -> Population:
    counts = np.fromiter((times.size for times in per_page), dtype=np.int64, count=len(per_page))
    offsets = np.zeros(len(per_page) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = np.concatenate(per_page) if per_page else np.zeros(0)
    return Population(name, rates, flat.astype(np.float64), offsets, tuple(kinds))


def poisson_times(rng: np.random.Generator, rate_per_day: float, days: float) -> FloatArray:
    if rate_per_day <= 0.0:
        return np.zeros(0)
    count = rng.poisson(rate_per_day * days)
    return np.sort(rng.random(count) * days)


def brewington(pages: int, days: float, rng: np.random.Generator) -> Population:
    """Poisson pages; mean change interval 1/λ ~ Weibull(shape 1.4, scale 152.2 days).

    Brewington & Cybenko 2000, the lifetime fit (docs/MODEL.md section 5 reference table).
    """
    rates = 1.0 / (152.2 * rng.weibull(1.4, pages))
    per_page = [poisson_times(rng, float(rate), days) for rate in rates]
    return _pack("brewington", rates, per_page, ["poisson"] * pages)


def _pareto_renewal(
    rng: np.random.Generator, rate_per_day: float, days: float, shape: float = 1.5
) -> FloatArray:
    # Wolf et al. 2002: inter-update tail (b / (b + t))^a, mean b / (a − 1) = 1/λ.
    scale = (shape - 1.0) / rate_per_day
    chunks: list[FloatArray] = []
    # A random start inside a gap, so pages are not all renewed at time 0.
    now = -rng.random() * scale * (rng.random() ** (-1.0 / shape) - 1.0)
    batch = int(rate_per_day * days * 1.2) + 16
    while now <= days:
        gaps = scale * (rng.random(batch) ** (-1.0 / shape) - 1.0)
        times = now + np.cumsum(gaps)
        chunks.append(times)
        now = float(times[-1])
    all_times = np.concatenate(chunks)
    return all_times[(all_times > 0.0) & (all_times <= days)]


def _quasi_deterministic(
    rng: np.random.Generator, rate_per_day: float, days: float, realised: float = 0.8
) -> FloatArray:
    # Wolf et al. 2002: potential update instants on a fixed grid with a random phase, each
    # realised with probability 0.8; spacing 0.8/λ so the mean rate is λ.
    spacing = realised / rate_per_day
    grid = rng.random() * spacing + spacing * np.arange(int(days / spacing) + 1)
    grid = grid[grid <= days]
    return np.asarray(grid[rng.random(grid.size) < realised], dtype=np.float64)


def wolf(pages: int, days: float, rng: np.random.Generator) -> Population:
    """Wolf et al.'s experiment: Zipf-like rates λ_i ∝ 1/i^(1−q), q = 0.5, mean 1.5 per day.

    60% Poisson, 30% Pareto renewal (a = 1.5), 10% quasi-deterministic.
    """
    ranks = np.arange(1, pages + 1, dtype=np.float64)
    rates = 1.0 / ranks**0.5
    rates *= 1.5 / rates.mean()
    rates = rates[rng.permutation(pages)]
    kind_draw = rng.random(pages)
    per_page: list[FloatArray] = []
    kinds: list[str] = []
    for rate, draw in zip(rates.tolist(), kind_draw.tolist(), strict=True):
        if draw < 0.6:
            per_page.append(poisson_times(rng, rate, days))
            kinds.append("poisson")
        elif draw < 0.9:
            per_page.append(_pareto_renewal(rng, rate, days))
            kinds.append("pareto")
        else:
            per_page.append(_quasi_deterministic(rng, rate, days))
            kinds.append("quasi")
    return _pack("wolf", rates, per_page, kinds)


_WORKING_FACTOR = 3.0
_WORKING_FRACTION = (5 * 12) / (7 * 24)
# Mean of the intensity profile over a week: 3 in working hours, 1 otherwise.
_MEAN_PROFILE = _WORKING_FACTOR * _WORKING_FRACTION + (1.0 - _WORKING_FRACTION)


def _in_working_hours(times_days: FloatArray) -> NDArray[np.bool_]:
    hour = (times_days % 1.0) * 24.0
    weekday = np.floor(times_days % 7.0)  # day 0 is a Monday
    return (hour >= 8.0) & (hour < 20.0) & (weekday < 5.0)


def grimes(pages: int, days: float, rng: np.random.Generator) -> Population:
    """Grimes & O'Brien's fast pages: mean change intervals between 1 and 48 hours.

    A fifth update on an hourly clock, a fifth daily at a fixed local time (a few minutes of
    jitter), the rest Poisson with mean interval log-uniform in [1 h, 48 h] whose intensity is
    three times higher in working hours (08–20, Monday–Friday) than at other times.
    """
    kind_draw = rng.random(pages)
    rates = np.empty(pages)
    per_page: list[FloatArray] = []
    kinds: list[str] = []
    for index, draw in enumerate(kind_draw.tolist()):
        if draw < 0.2:
            phase = rng.random() * HOUR_DAYS
            times = phase + HOUR_DAYS * np.arange(int(days * 24) + 1)
            times = times + rng.normal(0.0, 0.5 * MINUTE_DAYS, times.size)
            rates[index] = 24.0
            kinds.append("hourly")
        elif draw < 0.4:
            slots = int(days) + 1
            times = rng.random() + np.arange(slots) + rng.normal(0.0, 3.0 * MINUTE_DAYS, slots)
            rates[index] = 1.0
            kinds.append("daily")
        else:
            mean_interval_days = HOUR_DAYS * float(np.exp(rng.uniform(0.0, np.log(48.0))))
            rate = 1.0 / mean_interval_days
            # Thinning: candidates at the peak intensity, kept with profile / peak.
            peak = _WORKING_FACTOR * rate / _MEAN_PROFILE
            candidates = poisson_times(rng, peak, days)
            keep = np.where(_in_working_hours(candidates), 1.0, 1.0 / _WORKING_FACTOR)
            times = candidates[rng.random(candidates.size) < keep]
            rates[index] = rate
            kinds.append("poisson-workhours")
        per_page.append(np.sort(times[(times > 0.0) & (times <= days)]).astype(np.float64))
    return _pack("grimes", rates, per_page, kinds)


def _clocked_times(
    rng: np.random.Generator, period_days: float, jitter_days: float, days: float, realised: float
) -> FloatArray:
    """Updates at phase + k * period, each late or early by N(0, jitter), a share skipped."""
    slots = int(days / period_days) + 2
    times = rng.random() * period_days + period_days * np.arange(slots)
    times = times + rng.normal(0.0, jitter_days, slots)
    times = times[rng.random(slots) < realised]
    return np.sort(times[(times > 0.0) & (times <= days)]).astype(np.float64)


def periodic(pages: int, days: float, rng: np.random.Generator) -> Population:
    """Clocked pages only: half hourly, half daily, the kind Grimes & O'Brien found.

    Hourly pages update within about a minute of their slot (σ 0.5–2 min), daily ones within
    minutes (σ log-uniform in 2–20 min, a cron job behind a publishing queue); 5% of slots
    are skipped (nothing new that hour or day), so the mean rate is 0.95 per period.
    """
    rates = np.empty(pages)
    per_page: list[FloatArray] = []
    kinds: list[str] = []
    for index, hourly in enumerate((rng.random(pages) < 0.5).tolist()):
        if hourly:
            jitter = MINUTE_DAYS * float(rng.uniform(0.5, 2.0))
            per_page.append(_clocked_times(rng, HOUR_DAYS, jitter, days, 0.95))
            rates[index] = 0.95 / HOUR_DAYS
            kinds.append("hourly")
        else:
            jitter = MINUTE_DAYS * float(np.exp(rng.uniform(np.log(2.0), np.log(20.0))))
            per_page.append(_clocked_times(rng, 1.0, jitter, days, 0.95))
            rates[index] = 0.95
            kinds.append("daily")
    return _pack("periodic", rates, per_page, kinds)


def from_pages(
    name: str,
    change_rates_per_day: Sequence[float],
    change_times_days: Sequence[Sequence[float]],
    kinds: Sequence[str],
) -> Population:
    """A population of known pages: each page's mean change rate, its change instants (days
    since the run's start) and its kind, as a ground-truth web defines them."""
    if not len(change_rates_per_day) == len(change_times_days) == len(kinds):
        raise ValueError("one rate, one list of change times and one kind per page")
    per_page = [np.sort(np.asarray(times, dtype=np.float64)) for times in change_times_days]
    rates = np.asarray(change_rates_per_day, dtype=np.float64)
    return _pack(name, rates, per_page, list(kinds))


POPULATIONS: dict[str, Callable[[int, float, np.random.Generator], Population]] = {
    "brewington": brewington,
    "wolf": wolf,
    "grimes": grimes,
    "periodic": periodic,
}
