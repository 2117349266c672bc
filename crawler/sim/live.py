"""What the live freshness harness concludes from a run: the daemons' true freshness and age,
the simulator's prediction for the same pages and budget, and the analytic figures (the
oracle and a uniform schedule) for the Poisson pages.

Inputs are plain data: every page's kind, mean rate and true change instants, and every
fetch each daemon recorded, in seconds since the crawl began. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from crawler.core import freshness as analytic
from crawler.core import plan
from crawler.core.model import SECONDS_PER_DAY, Outcome
from crawler.sim.groundtruth import Measured, collection_metrics, page_metrics
from crawler.sim.policies import Optimal
from crawler.sim.populations import Population, from_pages
from crawler.sim.simulator import simulate_windows

# Per page, a daemon's recorded fetches: (seconds since the crawl began, outcome), sorted.
Fetches = Sequence[Sequence[tuple[float, str]]]
# A fetch that told what the server held then: the page, unchanged, or its absence.
OBSERVING_OUTCOMES = frozenset({Outcome.OK, Outcome.NOT_MODIFIED, Outcome.GONE})


@dataclass(frozen=True, slots=True)
class TruePage:
    kind: str  # "poisson", "periodic", "outage"
    change_rate_per_second: float  # mean rate of visible changes
    change_times: tuple[float, ...]  # seconds since the crawl began, sorted
    lastmod: str | None = None  # how its site's sitemap dates it (crawler.demo.sites.SitemapSpec)


@dataclass(frozen=True, slots=True)
class RunShape:
    """The measurement and the settings the daemons ran with, which the simulator and the
    oracle must share: seconds throughout."""

    seconds: float
    warmup_seconds: float
    budget_per_day: float
    min_interval_seconds: float
    max_interval_seconds: float
    planner_interval_seconds: float

    @property
    def window_seconds(self) -> float:
        return self.seconds - self.warmup_seconds


@dataclass(frozen=True, slots=True)
class Figures:
    """One schedule's fetch rate, freshness and mean age (seconds), or None where a row does
    not apply."""

    fetches_per_second: float | None
    freshness: float | None
    age_seconds: float | None


NONE = Figures(None, None, None)


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    everything: Figures
    poisson: Figures


@dataclass(frozen=True, slots=True)
class LiveEvaluation:
    rows: tuple[Row, ...]
    pages: int
    poisson_pages: int
    budget_per_second: float
    live_optimal: Row
    live_uniform: Row
    simulated_optimal: Row
    # Computed for the Poisson pages at the live optimal's (uniform's) own Poisson fetch rate.
    oracle_at_optimal: Figures
    uniform_at_optimal: Figures
    uniform_at_uniform: Figures

    @property
    def gain_share(self) -> float:
        """Live optimal − uniform over oracle − uniform, all at the live optimal's fetch rate
        on the Poisson pages: the share of the achievable gain the daemon captured."""
        live = self.live_optimal.poisson.freshness
        oracle = self.oracle_at_optimal.freshness
        uniform = self.uniform_at_optimal.freshness
        assert live is not None and oracle is not None and uniform is not None
        if oracle - uniform <= 0.0:
            return math.nan
        return (live - uniform) / (oracle - uniform)


class _Measured:
    """A daemon's per-page figures after the warm-up: true freshness and age from the
    observing fetches, and every attempt for the fetch rate."""

    def __init__(self, pages: Sequence[TruePage], fetches: Fetches, shape: RunShape) -> None:
        start, end = shape.warmup_seconds, shape.seconds
        self.shape = shape
        self.measured: list[Measured] = []
        self.counts: list[int] = []
        for page, page_fetches in zip(pages, fetches, strict=True):
            seen = [at for at, outcome in page_fetches if outcome in OBSERVING_OUTCOMES]
            self.measured.append(page_metrics(page.change_times, seen, start, end, origin=0.0))
            self.counts.append(sum(1 for at, _ in page_fetches if start <= at < end))

    def figures(self, indexes: Sequence[int]) -> Figures:
        if not indexes:
            return NONE
        metrics = collection_metrics([self.measured[i] for i in indexes])
        rate = sum(self.counts[i] for i in indexes) / self.shape.window_seconds
        return Figures(rate, metrics.freshness, metrics.age)


def live_row(label: str, pages: Sequence[TruePage], fetches: Fetches, shape: RunShape) -> Row:
    """A daemon's figures from its recorded fetches: every attempt counts towards the fetch
    rate, the observing ones towards freshness."""
    measured = _Measured(pages, fetches, shape)
    poisson = [i for i, page in enumerate(pages) if page.kind == "poisson"]
    return Row(label, measured.figures(range(len(pages))), measured.figures(poisson))


def population(pages: Sequence[TruePage], shape: RunShape) -> Population:
    """The simulator's population: the same pages, times in days since the crawl began."""
    return from_pages(
        "live",
        [page.change_rate_per_second * SECONDS_PER_DAY for page in pages],
        [[t / SECONDS_PER_DAY for t in page.change_times if 0.0 < t <= shape.seconds]
         for page in pages],
        [page.kind for page in pages],
    )


def simulated_row(label: str, policy_name: str, pages: Sequence[TruePage],
                  shape: RunShape, seed: int = 0) -> Row:
    """The simulator on the same pages at the budget, re-planning at the planner's interval
    with the daemons' interval bounds. Freshness and age over the whole collection only: the
    simulator integrates the collection, not pages."""
    as_the_daemon = partial(
        Optimal, max_interval_days=shape.max_interval_seconds / SECONDS_PER_DAY,
        shortest_interval_days=shape.min_interval_seconds / SECONDS_PER_DAY,
        refit_prior_each_round=True,
    )
    days = shape.seconds / SECONDS_PER_DAY
    result = simulate_windows(
        population(pages, shape), policy_name, days=days, budget_per_day=shape.budget_per_day,
        windows=((shape.warmup_seconds / SECONDS_PER_DAY, days),), seed=seed,
        replan_days=shape.planner_interval_seconds / SECONDS_PER_DAY,
        factory=as_the_daemon if policy_name == "optimal" else None,
    )[0]
    return Row(
        label,
        Figures(shape.budget_per_day / SECONDS_PER_DAY, result.freshness,
                result.age_days * SECONDS_PER_DAY),
        NONE,
    )


def analytic_figures(
    change_rates_per_second: Sequence[float],
    fetches_per_second: float,
    shape: RunShape,
    *,
    optimal: bool,
) -> Figures:
    """Poisson pages at a total fetch rate, spread evenly (uniform) or as the Lagrange
    optimum knowing the true rates (the oracle), within the daemons' interval bounds."""
    rates = np.asarray(change_rates_per_second, dtype=np.float64) * SECONDS_PER_DAY
    budget = fetches_per_second * SECONDS_PER_DAY
    low_days = shape.min_interval_seconds / SECONDS_PER_DAY
    high_days = shape.max_interval_seconds / SECONDS_PER_DAY
    if optimal:
        fetch = plan.solve_mu(
            rates, 1.0, budget, min_interval_days=low_days, max_interval_days=high_days
        ).rates_per_day
    else:
        fetch = np.clip(np.full(rates.size, budget / rates.size), 1.0 / high_days, 1.0 / low_days)
    return Figures(
        float(np.sum(fetch)) / SECONDS_PER_DAY,
        float(np.mean(analytic.freshness(rates, fetch))),
        float(np.mean(analytic.age_days(rates, fetch))) * SECONDS_PER_DAY,
    )


def evaluate(
    pages: Sequence[TruePage], fetches: Mapping[str, Fetches], shape: RunShape
) -> LiveEvaluation:
    """The harness's table from ``fetches["optimal"]`` and ``fetches["uniform"]``."""
    live_optimal = live_row("live optimal", pages, fetches["optimal"], shape)
    live_uniform = live_row("live uniform", pages, fetches["uniform"], shape)
    simulated_optimal = simulated_row("simulated optimal", "optimal", pages, shape)
    simulated_uniform = simulated_row("simulated uniform", "uniform", pages, shape)
    poisson_rates = [p.change_rate_per_second for p in pages if p.kind == "poisson"]
    optimal_rate = live_optimal.poisson.fetches_per_second
    uniform_rate = live_uniform.poisson.fetches_per_second
    assert optimal_rate is not None and uniform_rate is not None
    oracle = analytic_figures(poisson_rates, optimal_rate, shape, optimal=True)
    uniform_at_optimal = analytic_figures(poisson_rates, optimal_rate, shape, optimal=False)
    uniform_at_uniform = analytic_figures(poisson_rates, uniform_rate, shape, optimal=False)
    rows = (
        live_optimal, live_uniform, simulated_optimal, simulated_uniform,
        Row("oracle at live optimal's rate", NONE, oracle),
        Row("uniform at live optimal's rate", NONE, uniform_at_optimal),
        Row("uniform at live uniform's rate", NONE, uniform_at_uniform),
    )
    return LiveEvaluation(
        rows=rows,
        pages=len(pages),
        poisson_pages=len(poisson_rates),
        budget_per_second=shape.budget_per_day / SECONDS_PER_DAY,
        live_optimal=live_optimal,
        live_uniform=live_uniform,
        simulated_optimal=simulated_optimal,
        oracle_at_optimal=oracle,
        uniform_at_optimal=uniform_at_optimal,
        uniform_at_uniform=uniform_at_uniform,
    )


def _cell(value: float | None, width: int, digits: int, sign: str = "") -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{sign}{width}.{digits}f}"


def _cells(figures: Figures) -> str:
    return (_cell(figures.fetches_per_second, 9, 2) + _cell(figures.freshness, 8, 3)
            + _cell(figures.age_seconds, 9, 1))


_COLUMNS = f"{'fetch/s':>9}{'fresh':>8}{'age s':>9}"


def format_table(evaluation: LiveEvaluation) -> str:
    """One table: every row's fetch rate, freshness and mean age, over all pages and over
    the Poisson pages, then the spending and the live gain share."""
    head = (
        f"{'':32}{'all ' + str(evaluation.pages) + ' pages':^26}"
        f"{'Poisson ' + str(evaluation.poisson_pages) + ' pages':^26}"
    )
    lines = [head, f"{'schedule':32}" + _COLUMNS * 2]
    for row in evaluation.rows:
        lines.append(f"{row.label:32}{_cells(row.everything)}{_cells(row.poisson)}")
    budget = evaluation.budget_per_second
    optimal = evaluation.live_optimal.everything.fetches_per_second or 0.0
    uniform = evaluation.live_uniform.everything.fetches_per_second or 0.0
    lines.append(
        f"budget {budget:.2f}/s: live optimal spent {optimal:.2f}/s "
        f"({100.0 * (optimal / budget - 1.0):+.0f}%), live uniform {uniform:.2f}/s "
        f"({100.0 * (uniform / budget - 1.0):+.0f}%)"
    )
    lines.append(
        "live optimal's gain over uniform, as a share of the oracle's (Poisson pages, at its "
        f"own fetch rate): {100.0 * evaluation.gain_share:.0f}%"
    )
    return "\n".join(lines)


# The hint comparison's groups of pages, by what their site's sitemap says of their changes.
HINT_GROUPS: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("all", None),
    ("truthful dates", frozenset({"truthful"})),
    ("false dates", frozenset({"random", "now"})),
    ("no dates", frozenset({"absent"})),
)


@dataclass(frozen=True, slots=True)
class HintEvaluation:
    """Daemons differing only in whether they take sitemap dates as evidence: each one's
    figures per group of pages (``HINT_GROUPS``: name, pages), in the order of ``arms``."""

    groups: tuple[tuple[str, int], ...]
    arms: tuple[tuple[str, tuple[Figures, ...]], ...]

    def freshness(self, arm: str, group: str = "all") -> float:
        index = [name for name, _ in self.groups].index(group)
        value = dict(self.arms)[arm][index].freshness
        assert value is not None
        return value

    def fetches_per_second(self, arm: str) -> float:
        value = dict(self.arms)[arm][0].fetches_per_second
        assert value is not None
        return value


def evaluate_hints(
    pages: Sequence[TruePage], fetches: Mapping[str, Fetches], shape: RunShape
) -> HintEvaluation:
    """Every arm's true figures over all pages and per group of sitemap dates."""
    members = [
        [i for i, page in enumerate(pages) if modes is None or page.lastmod in modes]
        for _, modes in HINT_GROUPS
    ]
    arms = []
    for arm, arm_fetches in fetches.items():
        measured = _Measured(pages, arm_fetches, shape)
        arms.append((arm, tuple(measured.figures(m) for m in members)))
    return HintEvaluation(
        tuple((name, len(m)) for (name, _), m in zip(HINT_GROUPS, members, strict=True)),
        tuple(arms),
    )


def format_hint_table(evaluation: HintEvaluation) -> str:
    """Fetch rate, freshness and mean age of every arm per group, then every other arm's
    fetch rate and freshness minus the last one's."""
    width = 2 + max(len(f"{arm} - {evaluation.arms[-1][0]}") for arm, _ in evaluation.arms)
    head = f"{'':{width}}" + "".join(
        f"{f'{name} ({count})':^26}" for name, count in evaluation.groups)
    lines = [head, f"{'arm':{width}}" + _COLUMNS * len(evaluation.groups)]
    for arm, figures in evaluation.arms:
        lines.append(f"{arm:{width}}{''.join(_cells(f) for f in figures)}")
    last, b = evaluation.arms[-1]
    for arm, a in evaluation.arms[:-1]:
        cells = ""
        for x, y in zip(a, b, strict=True):
            cells += _difference(x.fetches_per_second, y.fetches_per_second, 9, 2)
            cells += _difference(x.freshness, y.freshness, 8, 3) + f"{'':9}"
        lines.append(f"{arm + ' - ' + last:{width}}{cells}")
    return "\n".join(lines)


def _difference(x: float | None, y: float | None, width: int, digits: int) -> str:
    return _cell(None if x is None or y is None else x - y, width, digits, sign="+")
