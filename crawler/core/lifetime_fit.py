"""Fitting the Weibull distribution of mean lifetimes (t = 1/λ) to what a crawler observed.

The lifetime-based fit of Brewington & Cybenko (2000), section 5, eqs. 12–16. A Poisson page
with rate λ watched for τ days shows a change with probability 1 − e^{−λτ} (eq. 12), so pages
that showed changes are a sample biased toward short lifetimes (eqs. 13–14). The paper pools
the observed intervals and fits their CDF by least squares (eq. 16). We maximise the exact
per-page likelihood instead: given t, a page with n changes seen in τ days has likelihood
t^{−n} e^{−τ/t}, so

    L_i(σ, θ) = ∫ w(t) t^{−n_i} e^{−τ_i/t} dt                     (all pages), or
    L_i(σ, θ) = ∫ w(t) t^{−n_i} e^{−τ_i/t} dt / ∫ w(t)(1 − e^{−τ_i/t}) dt   (changed pages
    only: eq. 14 applied page by page, Z_bias from the page's own span, eq. 13).

Why not the pooled CDF fit: a page contributes about λτ intervals, not 1 − e^{−λτ}, and
intervals longer than its span are never seen, so eq. 15 with eq. 14 is still biased.
`span_correction=False` drops the normalisation (and the unchanged pages): the naive fit the
correction exists for, kept to show its bias.

Goodness of fit: Pearson's χ² of the per-page change counts against the fitted model (each
page counts once: pooled intervals are dominated by the few fastest pages).
`observed_lifetime_cdf` gives the fitted curve of the paper's Fig. 13 for plots.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# Log-spaced grid over mean lifetimes for the marginal likelihoods. Trapezoid sums of smooth
# peaks converge fast; the narrowest peak (a page with n changes) has width ~1/√n in log t.
_LOG_STEP = 0.04
_SHAPE_BOUNDS = (0.05, 20.0)
_SPAN_BINS = 48  # discretised span distribution Pr(τ_i) for the lifetime CDF (eq. 13)


@dataclass(frozen=True, slots=True)
class PageObservation:
    """What was seen of one page.

    span_days: time between the first and last observation (τ).
    change_count: changes seen within the span (exact count, e.g. from Last-Modified).
    intervals_days: times between consecutive changes, both inside the span.
    """

    span_days: float
    change_count: int
    intervals_days: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class LifetimeFit:
    """Weibull (shape σ, scale θ days) of mean lifetimes fitted to page observations."""

    shape: float
    scale_days: float
    mean_lifetime_days: float
    log_likelihood: float
    pages_used: int
    chi_square: float  # Pearson χ² of per-page change counts against the fitted model
    chi_square_dof: int
    chi_square_p_value: float
    span_correction: bool


def weibull_mean(shape: float, scale_days: float) -> float:
    """Mean of the Weibull: θ Γ(1 + 1/σ)."""
    return scale_days * math.gamma(1.0 + 1.0 / shape)


def _log_weibull_times_t(log_t: FloatArray, shape: float, scale_days: float) -> FloatArray:
    """log(w(t)·t): the Weibull density on the log-t axis, eq. (10)."""
    z = shape * (log_t - math.log(scale_days))
    return np.asarray(math.log(shape) + z - np.exp(z))


def _weibull_survival(t_days: float, shape: float, scale_days: float) -> float:
    return math.exp(-((t_days / scale_days) ** shape))


def _log_grid(low_days: float, high_days: float) -> tuple[FloatArray, FloatArray]:
    """Log-t nodes and log trapezoid weights."""
    count = max(3, math.ceil((math.log(high_days) - math.log(low_days)) / _LOG_STEP) + 1)
    log_t = np.linspace(math.log(low_days), math.log(high_days), count)
    step = log_t[1] - log_t[0]
    log_weights = np.full(count, math.log(step))
    log_weights[[0, -1]] -= math.log(2.0)
    return log_t, log_weights


class _ShiftedExp:
    """exp(A) for a fixed matrix A, stored row-shifted so that products do not underflow."""

    def __init__(self, log_matrix: FloatArray) -> None:
        self.log_matrix = log_matrix
        self.row_max = np.max(log_matrix, axis=1)
        self.scaled = np.exp(log_matrix - self.row_max[:, None])

    def log_product(self, log_vector: FloatArray) -> FloatArray:
        """log Σ_k exp(A_ik + v_k) for every row i (a matrix-vector product)."""
        top = float(np.max(log_vector))
        with np.errstate(divide="ignore"):
            values = self.row_max + top + np.log(self.scaled @ np.exp(log_vector - top))
        lost = ~np.isfinite(values)
        if np.any(lost):  # extreme parameters: fall back to the slow, exact form
            from scipy import special  # scipy on first use (see crawler.core)
            values[lost] = special.logsumexp(self.log_matrix[lost] + log_vector, axis=1)
        return np.asarray(values)


class _PageLikelihood:
    """Per-page log marginal likelihoods on one precomputed grid (the fit's inner loop)."""

    def __init__(self, spans_days: FloatArray, counts: FloatArray) -> None:
        # Integrand t^{−n} e^{−τ/t} peaks at t = τ/n; e^{−4} below and e^{7} above the
        # extreme peaks its value is negligible (or, above, constant: see the tail below).
        low = float(np.min(spans_days / (counts + 1.0))) * math.exp(-4.0)
        self.t_max_days = float(np.max(spans_days)) * math.exp(7.0)
        self.log_t, self.log_weights = _log_grid(low, self.t_max_days)
        inverse_t = np.exp(-self.log_t)
        self.spans_days = spans_days
        self.counts = counts
        # log of t^{−n} e^{−τ/t}, pages × nodes; independent of (σ, θ).
        self.changes = _ShiftedExp(-np.outer(counts, self.log_t) - np.outer(spans_days, inverse_t))
        self.no_change = _ShiftedExp(-np.outer(spans_days, inverse_t))
        self.unchanged = counts == 0

    def _log_density(self, shape: float, scale_days: float) -> FloatArray:
        return _log_weibull_times_t(self.log_t, shape, scale_days) + self.log_weights

    def log_marginal(self, shape: float, scale_days: float) -> FloatArray:
        """log ∫ w(t) t^{−n_i} e^{−τ_i/t} dt for every page."""
        values = self.changes.log_product(self._log_density(shape, scale_days))
        # Mass of w beyond the grid: e^{−τ/t} ≈ 1 there, it matters for unchanged pages only.
        tail = _weibull_survival(self.t_max_days, shape, scale_days)
        with_tail = np.logaddexp(values, math.log(tail + 1e-300))
        return np.asarray(np.where(self.unchanged, with_tail, values))

    def log_prob_change_seen(self, shape: float, scale_days: float) -> FloatArray:
        """log Z_bias for every page: log ∫ w(t)(1 − e^{−τ_i/t}) dt, eqs. (12)–(13)."""
        log_unseen = self.no_change.log_product(self._log_density(shape, scale_days))
        tail = _weibull_survival(self.t_max_days, shape, scale_days)
        unseen = np.minimum(np.exp(log_unseen) + tail, 1.0 - 1e-15)
        return np.asarray(np.log1p(-unseen))

    def count_probabilities(self, shape: float, scale_days: float, max_count: int) -> FloatArray:
        """P(n = k | τ_i) = ∫ w(t) Poisson(k; τ_i/t) dt for k = 0..max_count (pages × k)."""
        density = np.exp(self._log_density(shape, scale_days))
        expected = np.outer(self.spans_days, np.exp(-self.log_t))  # τ/t
        term = np.exp(-expected) * density  # Poisson pmf at k = 0, times w(t) dt
        columns = [term.sum(axis=1)]
        for k in range(1, max_count + 1):
            term = term * expected / k
            columns.append(term.sum(axis=1))
        probabilities = np.stack(columns, axis=1)
        probabilities[:, 0] += _weibull_survival(self.t_max_days, shape, scale_days)
        return np.asarray(probabilities)


# Below this p-value of the change-count χ² test the fit is rejected: the model is said not to
# describe the observations. 1%: pages that do follow a Weibull are wrongly called a misfit
# once in a hundred crawls, while a curve that visibly misses the observed one lies orders of
# magnitude below.
MISFIT_P_VALUE = 0.01


def fits_observations(fit: LifetimeFit, significance: float = MISFIT_P_VALUE) -> bool:
    """Whether the change-count test accepts the fit at the given significance."""
    # Written so that a NaN p-value (a test without data) rejects nothing.
    return not fit.chi_square_p_value < significance


# Change-count bins for the goodness-of-fit test: lower edges; the last bin is open.
_COUNT_BIN_EDGES = (0, 1, 2, 3, 4, 6, 9, 14, 21, 36)


def _count_chi_square(
    likelihood: _PageLikelihood, shape: float, scale_days: float, conditional: bool
) -> tuple[float, int, float]:
    """Pearson χ² of the per-page change counts against the fitted model (statistic, df, p).

    Each page counts once (pooled intervals would be dominated by a few fast pages).
    conditional: the sample holds only pages that showed a change.
    """
    max_count = _COUNT_BIN_EDGES[-1] - 1
    probabilities = likelihood.count_probabilities(shape, scale_days, max_count)
    probabilities = np.clip(probabilities, 0.0, 1.0)
    open_bin = np.clip(1.0 - probabilities.sum(axis=1), 0.0, 1.0)
    per_page = np.column_stack([probabilities, open_bin])  # k = 0..max_count, then ≥ 36
    edges = [*_COUNT_BIN_EDGES, max_count + 2]
    binned = np.column_stack(
        [per_page[:, lo:hi].sum(axis=1) for lo, hi in itertools.pairwise(edges)]
    )
    observed_bins = np.searchsorted(np.array(_COUNT_BIN_EDGES), likelihood.counts, "right") - 1
    if conditional:
        binned = binned[:, 1:] / np.maximum(binned[:, 1:].sum(axis=1, keepdims=True), 1e-300)
        observed_bins = observed_bins - 1
    expected = binned.sum(axis=0)
    observed = np.bincount(observed_bins, minlength=expected.size).astype(np.float64)
    # Merge sparse bins (expected < 5) into their left neighbour, as Pearson's test needs.
    merged_expected: list[float] = []
    merged_observed: list[float] = []
    for e, o in zip(expected, observed, strict=True):
        if merged_expected and (e < 5.0 or merged_expected[-1] < 5.0):
            merged_expected[-1] += float(e)
            merged_observed[-1] += float(o)
        else:
            merged_expected.append(float(e))
            merged_observed.append(float(o))
    e_arr = np.maximum(np.array(merged_expected), 1e-12)
    o_arr = np.array(merged_observed)
    statistic = float(np.sum((o_arr - e_arr) ** 2 / e_arr))
    dof = max(1, e_arr.size - 1 - 2)
    from scipy import stats  # scipy on first use (see crawler.core)
    return statistic, dof, float(stats.chi2.sf(statistic, dof))


def fit_lifetimes(
    observations: Sequence[PageObservation], *, span_correction: bool = True,
    include_unchanged: bool = True,
) -> LifetimeFit:
    """Maximum-likelihood Weibull (σ, θ) of mean lifetimes from per-page observations.

    span_correction=True with include_unchanged=True uses every page's exact likelihood;
    with include_unchanged=False only pages that showed a change, each normalised by its
    probability 1 − e^{−τ/t} of showing one (the paper's setting). span_correction=False
    fits the pages that changed as if they were a fair sample: biased toward short lifetimes.
    """
    pages = [o for o in observations if o.span_days > 0]
    if span_correction and include_unchanged:
        used = pages
    else:
        used = [o for o in pages if o.change_count > 0]
    if not used or not any(o.change_count > 0 for o in used):
        raise ValueError("need at least one page with an observed change to fit lifetimes")
    spans = np.array([o.span_days for o in used], dtype=np.float64)
    counts = np.array([o.change_count for o in used], dtype=np.float64)
    likelihood = _PageLikelihood(spans, counts)
    normalise = span_correction and not include_unchanged

    def negative_log_likelihood(params: FloatArray) -> float:
        shape = float(np.clip(math.exp(params[0]), *_SHAPE_BOUNDS))
        scale = math.exp(params[1])
        total = likelihood.log_marginal(shape, scale)
        if normalise:
            total = total - likelihood.log_prob_change_seen(shape, scale)
        value = -float(np.sum(total))
        return value if math.isfinite(value) else 1e300

    # Start: exponential (σ = 1) with the pooled rate estimate Σn / Στ.
    start_scale = float(spans.sum() / max(counts.sum(), 1.0))
    from scipy import optimize  # scipy on first use (see crawler.core)
    result = optimize.minimize(
        negative_log_likelihood, np.array([0.0, math.log(start_scale)]), method="Nelder-Mead",
        options={"xatol": 1e-5, "fatol": 1e-7, "maxiter": 2000},
    )
    shape = float(np.clip(math.exp(result.x[0]), *_SHAPE_BOUNDS))
    scale = math.exp(float(result.x[1]))
    chi_square, dof, p_value = _count_chi_square(
        likelihood, shape, scale, conditional=not include_unchanged or not span_correction
    )
    return LifetimeFit(
        shape=shape, scale_days=scale, mean_lifetime_days=weibull_mean(shape, scale),
        log_likelihood=-float(result.fun), pages_used=len(used), chi_square=chi_square,
        chi_square_dof=dof, chi_square_p_value=p_value, span_correction=span_correction,
    )


def observed_lifetime_cdf(
    lifetimes_days: FloatArray,
    spans_days: FloatArray,
    shape: float,
    scale_days: float,
    *,
    span_correction: bool = True,
    changed_pages_only: bool = False,
) -> FloatArray:
    """CDF of the intervals between changes that pages watched over the given spans show.

    With span correction: a page of mean lifetime t watched τ days shows on average
    C(ℓ) = (τ/t)(1 − e^{−a/t}) − 1 + e^{−a/t}(1 + a/t), a = min(ℓ, τ), intervals no longer
    than ℓ (consecutive Poisson events both inside the span); averaged over w and over the
    discretised span distribution Pr(τ_i) (eq. 13), and normalised. changed_pages_only weighs
    each span by 1/Z_bias(τ) (eq. 14), for a sample of pages that showed a change.
    Without: eq. (15) with f'_mean = w, F(ℓ) = ∫ w(t)(1 − e^{−ℓ/t}) dt.
    Cost grows with len(lifetimes_days): evaluate it on a plot grid of a few hundred points.
    """
    x = np.asarray(lifetimes_days, dtype=np.float64)
    spans = np.asarray(spans_days, dtype=np.float64)
    low = max(1e-6, float(min(np.min(x[x > 0], initial=1.0), spans.min()))) * 1e-3
    log_t, log_weights = _log_grid(low, float(spans.max()) * math.exp(12.0))
    t = np.exp(log_t)
    mass = np.exp(_log_weibull_times_t(log_t, shape, scale_days) + log_weights)
    if not span_correction:
        return np.asarray(mass @ -np.expm1(-np.outer(1.0 / t, x)))
    # Pr(τ_i): quantile bins of the spans, each represented by its mean.
    order = np.sort(spans)
    bins = np.array_split(order, min(_SPAN_BINS, order.size))
    span_values = np.array([b.mean() for b in bins])
    span_probs = np.array([b.size for b in bins], dtype=np.float64) / order.size
    if changed_pages_only:
        seen = mass @ -np.expm1(-np.outer(1.0 / t, span_values))  # Z_bias(τ), eq. (13)
        span_probs = span_probs / np.maximum(seen, 1e-300)
    rate = (1.0 / t)[:, None]  # nodes × lifetimes
    expected_counts = np.zeros_like(x)
    expected_total = 0.0
    for span, prob in zip(span_values, span_probs, strict=True):
        a = np.minimum(x, span)[None, :]
        decay = np.exp(-rate * a)
        counts = span * rate * (-np.expm1(-rate * a)) - 1.0 + decay * (1.0 + rate * a)
        expected_counts += prob * (mass @ counts)
        all_rate = 1.0 / t
        expected_total += prob * float(mass @ (span * all_rate - 1.0 + np.exp(-all_rate * span)))
    return np.asarray(expected_counts / max(expected_total, 1e-300))


def simulate_observations(
    spans_days: Sequence[float] | FloatArray, shape: float, scale_days: float,
    rng: np.random.Generator,
) -> list[PageObservation]:
    """Poisson pages with 1/λ ~ Weibull(σ, θ), each watched over its given span.

    For tests and the demo: the exact changes of each page inside [0, τ] are recorded.
    """
    observations = []
    for span in np.asarray(spans_days, dtype=np.float64):
        mean_lifetime = scale_days * float(rng.weibull(shape))
        count = int(rng.poisson(span / mean_lifetime))
        times = np.sort(rng.uniform(0.0, span, size=count))
        intervals = tuple(float(d) for d in np.diff(times))
        observations.append(PageObservation(float(span), count, intervals))
    return observations
