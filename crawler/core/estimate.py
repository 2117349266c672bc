"""Change-rate estimation for pages whose changes arrive as a Poisson process.

A fetch only reveals whether *at least one* change happened since the previous fetch, so the
plain ratio "changes / time" undercounts fast pages. This module holds the estimators of
docs/MODEL.md section 2 (Cho & Garcia-Molina, "Estimating frequency of change", 2003) and the
Bayesian shrinkage toward a population Gamma prior that the planner uses as the working rate.

Time is in days and rates are per day.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

try:
    from crawler.core import _speedups
except ImportError:  # built without a C compiler: the Python versions give the same results
    _speedups = None  # type: ignore[assignment]

FloatArray = npt.NDArray[np.float64]

MAX_CHANGED_INTERVALS = 64
"""A history keeps the newest this-many changed intervals, so its cost stays bounded and its
estimate follows a rate that drifts."""


@dataclass(frozen=True, slots=True)
class ChangeHistory:
    """Sufficient statistics of one URL's fetch record for the Poisson likelihood.

    The likelihood of rate lam given the record is
    prod_{changed i} (1 - exp(-lam t_i)) * exp(-lam * unchanged_days): unchanged intervals
    only enter through their total length, changed ones each need their own length.
    """

    changed_intervals_days: tuple[float, ...] = ()
    unchanged_days: float = 0.0
    fetches: int = 0
    """Number of intervals the statistics stand for (decays with old changes, see observe)."""

    def observe(self, interval_days: float, changed: bool) -> ChangeHistory:
        """Return the history extended by one fetch interval that did or did not see a change.

        When more than MAX_CHANGED_INTERVALS changed intervals would be kept, the oldest is
        dropped and the unchanged evidence (days and interval count) shrinks by the same
        fraction, so the ratio of unchanged time to changes, hence the estimate, does not jump,
        and old evidence fades geometrically (memory of about 64 changes).
        """
        if not (math.isfinite(interval_days) and interval_days > 0.0):
            raise ValueError(f"interval_days must be finite and positive, got {interval_days}")
        changed_intervals = self.changed_intervals_days
        unchanged_days = self.unchanged_days
        fetches = self.fetches + 1
        if not changed:
            return ChangeHistory(changed_intervals, unchanged_days + interval_days, fetches)
        changed_intervals = (*changed_intervals, interval_days)
        if len(changed_intervals) > MAX_CHANGED_INTERVALS:
            keep_fraction = MAX_CHANGED_INTERVALS / len(changed_intervals)
            unchanged_count = fetches - len(changed_intervals)
            changed_intervals = changed_intervals[-MAX_CHANGED_INTERVALS:]
            unchanged_days *= keep_fraction
            fetches = MAX_CHANGED_INTERVALS + round(unchanged_count * keep_fraction)
        return ChangeHistory(changed_intervals, unchanged_days, fetches)

    @property
    def changes(self) -> int:
        """Number of kept intervals in which a change was detected."""
        return len(self.changed_intervals_days)

    @property
    def observed_days(self) -> float:
        """Total time covered by the kept statistics."""
        return math.fsum(self.changed_intervals_days) + self.unchanged_days


@dataclass(frozen=True, slots=True)
class GammaPrior:
    """Gamma(shape, rate) prior on a page's change rate lam (per day)."""

    shape: float
    rate: float
    """In days: the prior is worth `shape` changes seen over `rate` days."""

    def __post_init__(self) -> None:
        if not (self.shape > 0.0 and self.rate > 0.0):
            raise ValueError(f"Gamma prior needs positive shape and rate, got {self}")
        if not (math.isfinite(self.shape) and math.isfinite(self.rate)):
            raise ValueError(f"Gamma prior needs finite shape and rate, got {self}")

    @property
    def mean_rate_per_day(self) -> float:
        return self.shape / self.rate


DEFAULT_PRIOR = GammaPrior(shape=0.5, rate=15.0)
"""Before any population data: mean one change per 30 days, weak (worth half a change)."""


def mle_rate_irregular(
    changed_intervals_days: Sequence[float], unchanged_days: float
) -> float | None:
    """Maximum-likelihood rate from irregular fetch intervals, or None when it is not finite.

    Solves sum_changed t / (e^{lam t} - 1) = sum_unchanged t (Cho & Garcia-Molina 2003,
    irregular access). No change seen (lam = 0) or no unchanged time (lam = infinity) has no
    finite positive MLE: the caller should use posterior_rate.
    """
    if not changed_intervals_days or unchanged_days <= 0.0:
        return None
    intervals = np.asarray(changed_intervals_days, dtype=np.float64)
    changes = intervals.size

    def score(rate_per_day: float) -> float:
        # t / (e^{x} - 1) written with e^{-x} so that large x underflows to 0 quietly.
        x = rate_per_day * intervals
        return float(np.sum(intervals * np.exp(-x) / -np.expm1(-x))) - unchanged_days

    # Bracket from x/(e^x - 1) in [1 - x/2, 1]: the left side lies in
    # [X/lam - S/2, X/lam], so the root is in [X / (U + S/2), X / U].
    low = changes / (unchanged_days + 0.5 * float(intervals.sum()))
    high = changes / unchanged_days
    if high <= low * (1.0 + 1e-12):
        return high
    from scipy import optimize  # scipy on first use (see crawler.core)
    root: float = optimize.brentq(score, low * 0.999, high * 1.001, xtol=1e-14, rtol=1e-12)
    return root


@dataclass(frozen=True, slots=True)
class LastModifiedHistory:
    """Statistics for the Last-Modified estimator (docs/MODEL.md 2, Cho & Garcia-Molina 2003).

    On a fetch that finds a change, X += 1 and T += fetch time - Last-Modified (the page was
    seen unchanged only since its last modification); otherwise T += the interval.
    """

    fetches: int = 0
    changes: int = 0
    observed_days: float = 0.0

    def observe(
        self, interval_days: float, changed: bool, days_since_last_modified: float | None = None
    ) -> LastModifiedHistory:
        if changed:
            if days_since_last_modified is None:
                raise ValueError("a changed fetch needs days_since_last_modified")
            # The change happened inside the interval: the unchanged stretch is at most it.
            unchanged_stretch = min(max(days_since_last_modified, 0.0), interval_days)
            return LastModifiedHistory(
                self.fetches + 1, self.changes + 1, self.observed_days + unchanged_stretch
            )
        return LastModifiedHistory(
            self.fetches + 1, self.changes, self.observed_days + interval_days
        )


def last_modified_rate(fetches: int, changes: int, observed_days: float) -> float | None:
    """Cho & Garcia-Molina's Last-Modified estimator, or None when it says nothing finite.

    ((X - 1) - X / (n log(1 - X/n))) / T. At X == n the second term vanishes (log 0 = -inf),
    giving (n - 1) / T; X == 0 gives 0, which is no estimate, so None (use the posterior).
    """
    if fetches <= 0 or changes <= 0 or observed_days <= 0.0 or changes > fetches:
        return None
    correction = 0.0 if changes == fetches else changes / (fetches * math.log1p(-changes / fetches))
    rate = ((changes - 1) - correction) / observed_days
    return rate if rate > 0.0 else None


def known_times_posterior_rate(history: LastModifiedHistory, prior: GammaPrior) -> float:
    """Posterior mean of lam (per day) when every change's time is known: the Last-Modified
    counterpart of ``fast_posterior_rate``, under the same Gamma prior.

    The likelihood is lam^X e^{-lam T}, with X and T as ``LastModifiedHistory`` keeps them:
    conjugate to the prior, so the mean is (shape + X) / (rate + T), exact, and shrunk toward
    the population's mean for a short history (docs/MODEL.md section 2.4).
    """
    return (prior.shape + history.changes) / (prior.rate + history.observed_days)


def last_modified_is_credible(
    last_modified_days: Sequence[float],
    fetched_at_days: Sequence[float],
    *,
    same_instant_days: float = 120.0 / 86400.0,
    clock_skew_days: float = 60.0 / 86400.0,
) -> bool:
    """Whether a URL's Last-Modified headers can be trusted as modification times.

    Rejects dynamic pages that stamp the response time (Last-Modified within
    `same_instant_days` of the fetch on every fetch), headers in the future beyond the allowed
    clock skew, and values that go backwards between fetches (load-balanced servers
    disagreeing). Both sequences are in the same absolute time, in fetch order.
    """
    if len(last_modified_days) != len(fetched_at_days):
        raise ValueError("one Last-Modified value per fetch is needed")
    if not last_modified_days:
        return False
    modified = np.asarray(last_modified_days, dtype=np.float64)
    fetched = np.asarray(fetched_at_days, dtype=np.float64)
    if not (np.all(np.isfinite(modified)) and np.all(np.isfinite(fetched))):
        return False
    lag_days = fetched - modified
    if np.any(lag_days < -clock_skew_days):
        return False
    if np.all(lag_days <= same_instant_days):
        return False
    return not np.any(np.diff(modified) < 0.0)


def dated_change_days(
    previous_fetch_days: float, fetched_at_days: float, last_modified_days: float | None,
    previous_last_modified_days: float | None, *, same_instant_days: float = 120.0 / 86400.0,
) -> float | None:
    """Days between a changed fetch and the page's last change, when Last-Modified says so.

    The per-fetch form of `last_modified_is_credible`: the header must fall inside the
    interval that saw the change, not within `same_instant_days` of the fetch (a page stamped
    with the response time), and not go backwards from the previous value. None otherwise:
    the interval is then only known to hold a change.
    """
    if last_modified_days is None or not math.isfinite(last_modified_days):
        return None
    if not previous_fetch_days < last_modified_days <= fetched_at_days - same_instant_days:
        return None
    if previous_last_modified_days is not None and last_modified_days < previous_last_modified_days:
        return None
    return fetched_at_days - last_modified_days


# ---------------------------------------------------------------------------------------------
# Posterior mean under a Gamma prior with the exact likelihood

_COARSE_LOG_OFFSETS = np.linspace(-26.0, 26.0, 27)
_FINE_POINTS = 48
_LOG_MASS_CUTOFF = 40.0  # grid points below max - 40 nats carry < e^-40 of the mass


def _log_posterior_kernel(
    log_rates: FloatArray, changed_intervals: FloatArray, shape: float, exposure_days: float
) -> FloatArray:
    """log of lam * prior(lam) * likelihood(lam) up to a constant, on a log-lam grid.

    The extra lam is the Jacobian of integrating in u = log lam.
    """
    rates = np.exp(log_rates)
    # 1 - e^{-x} rather than -expm1(-x): faster, and its relative error 1e-16/x only matters
    # where lam*t < 1e-10, far outside any posterior mass.
    with np.errstate(divide="ignore", under="ignore"):
        log_detect = np.log(1.0 - np.exp(-np.multiply.outer(rates, changed_intervals)))
    result: FloatArray = shape * log_rates - exposure_days * rates + log_detect.sum(axis=1)
    return result


def posterior_rate(history: ChangeHistory, prior: GammaPrior) -> float:
    """Posterior mean of lam (per day) under `prior` updated by the exact Poisson likelihood.

    Without changed intervals the Gamma prior is conjugate: shape / (rate + unchanged_days).
    Otherwise a two-pass 1-D quadrature in log lam: a coarse pass locates the mass, a fine
    trapezoid over it integrates (smooth integrand, so the trapezoid converges fast).
    Always finite and positive.
    """
    exposure_days = prior.rate + history.unchanged_days
    if not history.changed_intervals_days:
        return prior.shape / exposure_days
    intervals = np.asarray(history.changed_intervals_days, dtype=np.float64)
    # A crude centre: within a few decades of the posterior mass, which is all the coarse
    # pass (+-25 in log lam) needs.
    centre = (prior.shape + intervals.size) / (exposure_days + float(intervals.sum()))
    coarse = math.log(centre) + _COARSE_LOG_OFFSETS
    coarse_kernel = _log_posterior_kernel(coarse, intervals, prior.shape, exposure_days)
    significant = np.flatnonzero(coarse_kernel >= coarse_kernel.max() - _LOG_MASS_CUTOFF)
    low = coarse[max(int(significant[0]) - 1, 0)]
    high = coarse[min(int(significant[-1]) + 1, coarse.size - 1)]
    fine = np.linspace(low, high, _FINE_POINTS)
    fine_kernel = _log_posterior_kernel(fine, intervals, prior.shape, exposure_days)
    weights = np.exp(fine_kernel - fine_kernel.max())
    return float(np.dot(weights, np.exp(fine)) / weights.sum())


def fast_posterior_rate(
    history: ChangeHistory, prior: GammaPrior, guess_rate_per_day: float | None = None
) -> float:
    """Posterior mean change rate (per day): what the daemon and the simulator schedule with.

    Same posterior as `posterior_rate` (docs/MODEL.md section 2), found without a grid: the
    log posterior in x = log lam is concave, so Newton's method reaches its mode in a few
    steps, and a 5-point Gauss-Hermite rule around the mode, reweighted by the exact kernel,
    gives the mean (Laplace's method with a skew correction), within 3% of the quadrature.
    `guess_rate_per_day` (the URL's previous estimate) only shortens the mode search.

    The sums run in plain floats for short records (in C when ``crawler.core._speedups`` is
    built, to the bit), in numpy for long ones (`_SCALAR_MODE_MAX_INTERVALS`,
    `_SCALAR_NODES_MAX_INTERVALS`): the same formulas, so they agree to rounding.
    """
    exposure_days = prior.rate + history.unchanged_days
    changed = history.changed_intervals_days
    if not changed:
        return prior.shape / exposure_days  # conjugate case: exact
    shape = prior.shape
    if guess_rate_per_day is not None and guess_rate_per_day > 0.0:
        x = math.log(guess_rate_per_day)
    else:
        x = math.log((shape + len(changed)) / (exposure_days + math.fsum(changed)))
    intervals: FloatArray | None = None
    if len(changed) > _SCALAR_MODE_MAX_INTERVALS:
        intervals = np.array(changed, dtype=np.float64)
        x, curvature = _mode_in_numpy(intervals, shape, exposure_days, x)
    elif _speedups is None:
        x, curvature = _mode_in_floats(changed, shape, exposure_days, x)
    else:
        x, curvature = _speedups.posterior_mode(
            changed, shape, exposure_days, x, _NEWTON_NEGLIGIBLE_U, _NEWTON_TOLERANCE,
            _NEWTON_MAX_STEPS,
        )
    if not curvature < 0.0:
        return math.exp(x)
    # Gauss-Hermite around the mode, reweighted by the exact kernel: corrects the skew that
    # the plain log-normal mean exp(x + s^2/2) gets wrong.
    spread = math.sqrt(-1.0 / curvature)
    if _speedups is None:
        node_rates = _node_rates_in_floats(x, spread)
    else:
        node_rates = _speedups.hermite_rates(x, spread, _HERMITE_OFFSET_LIST)
    if len(changed) > _SCALAR_NODES_MAX_INTERVALS:
        if intervals is None:
            intervals = np.array(changed, dtype=np.float64)
        detects = _log_detect_sums_in_numpy(node_rates, intervals)
    elif _speedups is None:
        detects = _log_detect_sums_in_floats(node_rates, changed)
    else:
        detects = _speedups.log_detect_sums(node_rates, changed, _DETECT_FLOOR)
    if _speedups is None:
        return _kernel_mean_in_floats(x, spread, shape, exposure_days, node_rates, detects)
    return _speedups.hermite_mean(
        x, spread, shape, exposure_days, node_rates, detects, _HERMITE_OFFSET_LIST,
        _HERMITE_CORRECTION_LIST,
    )


def _node_rates_in_floats(x: float, spread: float) -> list[float]:
    """The Gauss-Hermite nodes' rates: e^(x + spread z) at each offset z."""
    return [math.exp(x + spread * z) for z in _HERMITE_OFFSET_LIST]


def _kernel_mean_in_floats(
    x: float, spread: float, shape: float, exposure_days: float, node_rates: Sequence[float],
    detects: Sequence[float],
) -> float:
    """The posterior mean from the nodes: their rates weighted by the exact kernel (its log
    detection sums given) over the Gauss-Hermite weight."""
    log_kernel_list = [
        shape * (x + spread * z) - exposure_days * node_rate + detect + correction
        for z, node_rate, detect, correction in zip(
            _HERMITE_OFFSET_LIST, node_rates, detects, _HERMITE_CORRECTION_LIST, strict=True
        )
    ]
    top = max(log_kernel_list)
    numerator = denominator = 0.0
    for node_rate, value in zip(node_rates, log_kernel_list, strict=True):
        weight = math.exp(value - top)
        numerator += weight * node_rate
        denominator += weight
    return numerator / denominator


def _mode_in_floats(
    changed: Sequence[float], shape: float, exposure_days: float, x: float
) -> tuple[float, float]:
    """Newton's search for the log posterior's mode from x: (mode, curvature there).

    l(x) = a x - E e^x + sum log(1 - e^{-u_i}), u_i = e^x t_i. With g = u / (e^u - 1):
    l' = a - E lam + sum g, l'' = -E lam + sum (g - g (u + g)). A curvature that is not
    negative (never for a proper prior) stops the search where it is.
    """
    expm1, negligible = math.expm1, _NEWTON_NEGLIGIBLE_U  # locals: read once per element
    curvature = -1.0
    for _ in range(_NEWTON_MAX_STEPS):
        rate = math.exp(x)
        slope = bend = 0.0
        for interval in changed:
            u = rate * interval
            if u < negligible:
                g = u / expm1(u) if u > 1e-12 else 1.0
                slope += g
                bend += g - g * (u + g)
        slope += shape - exposure_days * rate
        curvature = bend - exposure_days * rate
        x, done = _newton_step(x, slope, curvature)
        if done:
            break
    return x, curvature


def _newton_step(x: float, slope: float, curvature: float) -> tuple[float, bool]:
    """One safeguarded Newton step in x = log lam (at most 2 either way, since a far start
    can overshoot); the new x and whether to stop (not concave there, or converged)."""
    if not curvature < 0.0:
        return x, True
    step = max(-2.0, min(2.0, -slope / curvature))
    return x + step, abs(step) < _NEWTON_TOLERANCE


def _mode_in_numpy(
    intervals: FloatArray, shape: float, exposure_days: float, x: float
) -> tuple[float, float]:
    """`_mode_in_floats` with each step's sums taken in numpy (long records).

    u is capped at `_NEWTON_NEGLIGIBLE_U` (where the float loop drops the term) so that e^u
    never overflows; the cap is skipped when the longest interval stays under it.
    """
    ones = _ones(intervals.size)
    longest = float(np.maximum.reduce(intervals))
    curvature = -1.0
    for _ in range(_NEWTON_MAX_STEPS):
        rate = math.exp(x)
        u = intervals * rate
        if rate * longest < _NEWTON_NEGLIGIBLE_U:
            g = u / np.expm1(u)
        else:
            g = u / np.expm1(np.minimum(u, _NEWTON_NEGLIGIBLE_U))
        total = float(g.dot(ones))
        slope = total + shape - exposure_days * rate
        curvature = total - float(g.dot(u + g)) - exposure_days * rate
        x, done = _newton_step(x, slope, curvature)
        if done:
            break
    return x, curvature


def _log_detect_sums_in_floats(
    node_rates: Sequence[float], changed: Sequence[float]
) -> list[float]:
    """sum_i log(1 - e^{-lam t_i}) at each node's lam, with no function call per interval
    unless a product could underflow."""
    log, expm1 = math.log, math.expm1
    shortest = min(changed)
    sums = []
    for node_rate in node_rates:
        if node_rate * shortest > _DETECT_FLOOR:
            sums.append(sum([log(-expm1(-node_rate * t)) for t in changed]))
        else:
            sums.append(sum([_log_detect(node_rate * t) for t in changed]))
    return sums


def _log_detect_sums_in_numpy(node_rates: Sequence[float], intervals: FloatArray) -> list[float]:
    """`_log_detect_sums_in_floats` as one [node, interval] array.

    Floored as `_log_detect` floors, which spares the slow np.errstate context on this hot
    path; the outer product is a broadcast (``np.multiply.outer`` is slower on small arrays).
    """
    negated = np.array([-rate for rate in node_rates])[:, None] * intervals
    detect = np.log(-np.expm1(np.minimum(negated, -_DETECT_FLOOR)))
    sums: list[float] = detect.dot(_ones(intervals.size)).tolist()
    return sums


_NEWTON_NEGLIGIBLE_U = 700.0
"""Above this u = lam t, g = u / (e^u - 1) < 1e-301: the term is dropped (e^u would overflow)."""
_NEWTON_MAX_STEPS = 40
"""Newton's search stops here at the latest (it converges in a handful of steps)."""
_NEWTON_TOLERANCE = 1e-3
"""A step this small leaves the mode off by ~1e-6 in log lam; the reweighted nodes then move
the mean by under 1e-4 relative (tests/unit/test_estimate.py), 300x inside its error."""
_SCALAR_MODE_MAX_INTERVALS = 36
"""Longer records take the Newton steps in numpy: its fixed cost per step matches the float
loop's per-interval cost at 30 to 40 intervals."""
_SCALAR_NODES_MAX_INTERVALS = 8
"""Longer records weigh the Gauss-Hermite nodes in numpy (five node passes as one array)."""


_DETECT_FLOOR = 1e-300


@functools.cache
def _ones(size: int) -> FloatArray:
    """A shared, read-only vector of ones: the sums are dot products with it (np.ones on every
    call cost as much as the dot itself)."""
    ones = np.ones(size)
    ones.flags.writeable = False
    return ones


def _log_detect(u: float) -> float:
    """log(1 - e^{-u}), log(1e-300) where it would underflow."""
    return math.log(-math.expm1(-max(u, _DETECT_FLOOR)))


# The 5-point Gauss-Hermite rule for weight e^{-z^2/2}: nodes z and log(weight) + z^2/2.
_HERMITE_OFFSETS, _HERMITE_WEIGHTS = np.polynomial.hermite_e.hermegauss(5)
_HERMITE_OFFSET_LIST = [float(z) for z in _HERMITE_OFFSETS]
_HERMITE_CORRECTION_LIST = [
    float(c) for c in np.log(_HERMITE_WEIGHTS) + _HERMITE_OFFSETS * _HERMITE_OFFSETS / 2.0
]


# ---------------------------------------------------------------------------------------------
# Empirical Bayes: fit the Gamma prior to a population of histories

_FIT_LOG_RATES = np.linspace(math.log(1e-7), math.log(1e5), 320)
_FIT_STEP = float(_FIT_LOG_RATES[1] - _FIT_LOG_RATES[0])
_SHAPE_BOUNDS = (0.02, 50.0)
_RATE_BOUNDS_DAYS = (1e-4, 1e7)
_CHUNK_CELLS = 4_000_000  # cap on the histories x intervals x grid block built at once


def _changed_log_likelihoods(histories: Sequence[ChangeHistory]) -> FloatArray:
    """Matrix [history, grid point] of log likelihood(lam) for histories with changes."""
    rates = np.exp(_FIT_LOG_RATES)
    out = np.empty((len(histories), rates.size))
    width = max(h.changes for h in histories)
    per_chunk = max(1, _CHUNK_CELLS // (width * rates.size))
    for start in range(0, len(histories), per_chunk):
        block = histories[start : start + per_chunk]
        # Pad with +inf: 1 - e^{-inf} = 1 contributes log 1 = 0.
        padded = np.full((len(block), width), np.inf)
        for row, history in enumerate(block):
            padded[row, : history.changes] = history.changed_intervals_days
        unchanged = np.array([h.unchanged_days for h in block])
        with np.errstate(divide="ignore", under="ignore"):
            detect = np.log(-np.expm1(-padded[:, :, None] * rates[None, None, :]))
        out[start : start + len(block)] = detect.sum(axis=1) - np.multiply.outer(unchanged, rates)
    return out


def _initial_log_params(histories: Sequence[ChangeHistory]) -> tuple[float, float]:
    """Method-of-moments start from smoothed naive rates."""
    crude = np.array([(h.changes + 0.5) / (h.observed_days + 1.0) for h in histories])
    mean = float(crude.mean())
    variance = float(crude.var()) or mean * mean
    shape = min(max(mean * mean / variance, 0.1), 10.0)
    return math.log(shape), math.log(shape / mean)


def fit_gamma_prior(
    histories: Sequence[ChangeHistory],
    min_histories: int = 20,
    *,
    min_changes: int = 5,
    max_histories: int = 20_000,
) -> GammaPrior | None:
    """Empirical-Bayes Gamma prior: maximise the population's marginal likelihood.

    Each URL's marginal likelihood is exact, (beta / (beta + U))^alpha, for URLs that never
    changed and a quadrature on a fixed log-lam grid otherwise; L-BFGS-B on (log shape, log
    rate) with the analytic gradient. None with fewer than `min_histories` URLs or
    `min_changes` changes in all: the marginal likelihood of an all-static population grows
    without bound as the mean goes to 0, which would stop the crawler revisiting. Shape is
    clamped to [0.02, 50]; large populations are thinned to `max_histories` by an even stride.
    """
    if len(histories) < min_histories:
        return None
    if len(histories) > max_histories:
        stride = len(histories) / max_histories
        histories = [histories[int(i * stride)] for i in range(max_histories)]
    if sum(h.changes for h in histories) < min_changes:
        return None
    static_days = np.array([h.unchanged_days for h in histories if h.changes == 0])
    with_changes = [h for h in histories if h.changes > 0]
    log_likelihood = _changed_log_likelihoods(with_changes)
    rates = np.exp(_FIT_LOG_RATES)

    def negative_log_marginal(log_params: FloatArray) -> tuple[float, FloatArray]:
        shape, rate = math.exp(log_params[0]), math.exp(log_params[1])
        # log Gamma density in u = log lam (with the lam Jacobian) and its derivatives.
        log_prior = (
            shape * math.log(rate) - special.gammaln(shape) + shape * _FIT_LOG_RATES - rate * rates
        )
        d_shape_prior = math.log(rate) - special.digamma(shape) + _FIT_LOG_RATES
        d_rate_prior = shape / rate - rates
        joint = log_likelihood + log_prior[None, :]
        peak = joint.max(axis=1, keepdims=True)
        weights = np.exp(joint - peak)
        totals = weights.sum(axis=1)
        total = float(np.sum(peak[:, 0] + np.log(totals))) + len(with_changes) * math.log(_FIT_STEP)
        d_shape = float(np.sum(weights @ d_shape_prior / totals))
        d_rate = float(np.sum(weights @ d_rate_prior / totals))
        if static_days.size:
            # Closed form for never-changed URLs: (rate / (rate + U))^shape.
            log_ratio = np.log(rate / (rate + static_days))
            total += shape * float(log_ratio.sum())
            d_shape += float(log_ratio.sum())
            d_rate += shape * float(np.sum(1.0 / rate - 1.0 / (rate + static_days)))
        gradient = np.array([-d_shape * shape, -d_rate * rate])
        return -total, gradient

    start = np.array(_initial_log_params(histories))
    bounds = [
        (math.log(_SHAPE_BOUNDS[0]), math.log(_SHAPE_BOUNDS[1])),
        (math.log(_RATE_BOUNDS_DAYS[0]), math.log(_RATE_BOUNDS_DAYS[1])),
    ]
    # scipy on first use (see crawler.core); ``special`` is read by the objective above.
    from scipy import optimize, special
    result = optimize.minimize(
        negative_log_marginal, start, jac=True, method="L-BFGS-B", bounds=bounds
    )
    shape, rate = (math.exp(float(v)) for v in result.x)
    if not (math.isfinite(shape) and math.isfinite(rate)):
        return None
    return GammaPrior(shape=shape, rate=rate)
