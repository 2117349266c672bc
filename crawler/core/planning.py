"""The planner's mathematics: from a sample of the live population, the priors, μ for the
budget and the estimates a plan records. Pure: the sample is plain data (read by
``crawler.db.planning``), and the process that runs a round is ``crawler.daemon.planner``.

The sample stands for the whole population: each sampled URL for 1/fraction URLs, so the
budget and every host's politeness cap are scaled by the sampling fraction before μ is
solved (``solve_sample``); μ itself does not depend on the scale.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from crawler.core.budget import PopulationPlan, collection_estimates, plan_population
from crawler.core.estimate import DEFAULT_PRIOR, ChangeHistory, GammaPrior, fit_gamma_prior
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.replan import current_rates, interval_bounds_days
from crawler.core.schedule import SchedulePolicy, uniform_interval_seconds
from crawler.core.stored_plan import SolvedFor

# Host priors fitted per round (the hosts with most sampled URLs), and the sampled URLs a host
# needs for one.
MAX_HOST_PRIORS = 16
# The global prior's fit thins the sampled histories to this many (its cost is linear in them;
# two parameters need far fewer).
PRIOR_HISTORIES = 5_000
MIN_URLS_FOR_HOST_PRIOR = 50


@dataclass(frozen=True, slots=True)
class PlannerOutcome:
    """What a round this daemon solved came to: for the metrics and the log."""

    mu: float
    budget_per_day: float
    achieved_per_day: float
    estimated_freshness: float
    estimated_beta_currency: float
    prior: GammaPrior
    rescheduled: int
    sampled: int
    population: float
    solve_seconds: float
    walked: bool = False  # whether the round walked the population (μ or the prior moved)
    version: int = 0  # the stored plan's


@dataclass(frozen=True, slots=True)
class Sample:
    """The sampled live URLs, as arrays (one entry per URL)."""

    host_ids: np.ndarray
    importance: np.ndarray
    change_rates: np.ndarray  # NaN where the URL has no estimate yet
    crawl_delays: np.ndarray  # NaN where the host has no Crawl-delay
    histories: dict[str, list[ChangeHistory]]
    population: float
    url_histories: list[ChangeHistory | None]  # per sampled URL, None where it has none
    # The URLs' own interval bounds (crawler bound), in seconds; NaN where they have none.
    own_min_seconds: np.ndarray | None = None
    own_max_seconds: np.ndarray | None = None
    # The sampled URLs' ids (which of them are completely observed); None: not read.
    url_ids: np.ndarray | None = None


def uniform_estimates(
    sample: Sample, prior: GammaPrior, host_priors: dict[int, GammaPrior], policy: SchedulePolicy
) -> tuple[float, float]:
    """The uniform schedule's expected freshness and β-currency on the sample."""
    rates = sample_rates(sample, prior, host_priors)
    shortest, longest = interval_bounds_days(
        policy, rates.size, sample.own_min_seconds, sample.own_max_seconds
    )
    uniform = 1.0 / np.clip(uniform_interval_seconds(policy) / SECONDS_PER_DAY, shortest, longest)
    return collection_estimates(
        rates, uniform, sample.importance, policy.settings.beta_seconds / SECONDS_PER_DAY
    )


def sample_rates(
    sample: Sample, prior: GammaPrior, host_priors: dict[int, GammaPrior]
) -> np.ndarray:
    """The sampled URLs' change rates as their next fetches will estimate them, under the
    priors just fitted (``crawler.core.replan.current_rates``)."""
    return current_rates(
        sample.url_histories, sample.change_rates, sample.host_ids.tolist(), prior, host_priors
    )


def fit_priors(
    histories: dict[str, list[ChangeHistory]],
) -> tuple[GammaPrior, dict[int, GammaPrior]]:
    """The global prior from every sampled history; host priors for the best-sampled hosts.

    Each fit is a small optimisation (about 0.1 s): bounding their number bounds the round.
    """
    everyone = [h for host in histories.values() for h in host]
    prior = fit_gamma_prior(everyone, max_histories=PRIOR_HISTORIES) or DEFAULT_PRIOR
    largest = heapq.nlargest(MAX_HOST_PRIORS, histories, key=lambda k: len(histories[k]))
    host_priors: dict[int, GammaPrior] = {}
    for host in largest:
        if len(histories[host]) >= MIN_URLS_FOR_HOST_PRIOR:
            fitted = fit_gamma_prior(histories[host], min_histories=MIN_URLS_FOR_HOST_PRIOR)
            if fitted is not None:
                host_priors[int(host)] = fitted
    return prior, host_priors


def sampled_hosts(
    sample: Sample, politeness_delay: float
) -> tuple[float, NDArray[np.intp], NDArray[np.float64]]:
    """The sampling fraction, each sampled URL's index among the sampled hosts, and each host's
    delay between requests (its Crawl-delay, never under ``politeness_delay``)."""
    fraction = min(1.0, sample.host_ids.size / max(sample.population, 1.0))
    _, first, host_index = np.unique(sample.host_ids, return_index=True, return_inverse=True)
    crawl_delays = sample.crawl_delays[first]
    delays = np.where(
        np.isnan(crawl_delays), politeness_delay, np.maximum(crawl_delays, politeness_delay)
    )
    return fraction, host_index, delays


def solve_sample(
    sample: Sample, prior: GammaPrior, host_priors: dict[int, GammaPrior], budget_per_day: float,
    policy: SchedulePolicy, politeness_delay: float,
) -> PopulationPlan:
    """μ for the sample: the budget and every host's cap shrink by the sampling fraction.

    Each sampled URL stands for 1/fraction URLs, so the sample's share of the budget is
    budget × fraction, and a host's cap of one request per delay becomes one per
    delay / fraction among its sampled URLs. μ itself does not depend on the scale.
    """
    fraction, host_index, delays = sampled_hosts(sample, politeness_delay)
    rates = sample_rates(sample, prior, host_priors)
    # Each URL's own bounds (crawler bound) are box constraints of the same solve: what they
    # force is spent first, the rest of the budget goes where it does most good.
    shortest, longest = interval_bounds_days(
        policy, rates.size, sample.own_min_seconds, sample.own_max_seconds
    )
    return plan_population(
        rates, sample.importance, budget_per_day * fraction,
        objective=policy.settings.objective,
        beta_days=policy.settings.beta_seconds / SECONDS_PER_DAY,
        min_interval_days=shortest, max_interval_days=longest,
        host_index=host_index, host_delays_seconds=delays / fraction, mu_hint=policy.mu,
    )


def settings_change(old: SolvedFor, new: SolvedFor) -> str:
    """What moved between two SolvedFor, in words: "budget_setting_per_day 1000 -> 500"."""
    moved = [
        f"{name} {getattr(old, name)} -> {getattr(new, name)}"
        for name in SolvedFor.__dataclass_fields__
        if getattr(old, name) != getattr(new, name)
    ]
    return ", ".join(moved)
