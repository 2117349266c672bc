"""The plan every fetch process schedules under, as plain data.

The planner solves μ and the priors for a budget and stores them, with the settings they were
solved for, as one versioned row (table ``plans``). Every fetch process of every daemon reads
the newest row and schedules under it: the plan reaches processes through the database, never
through a callback into one process's configuration. A daemon whose settings differ from those
the newest plan was solved for re-plans at once (``settings_moved``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from crawler.core.estimate import DEFAULT_PRIOR, GammaPrior
from crawler.core.schedule import SchedulePolicy

# Where the budget came from: the setting, or the uniform schedule's spend (the polite default).
BUDGET_FROM_SETTING = "setting"
BUDGET_FROM_DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class SolvedFor:
    """The settings a plan was solved for: a daemon with other settings re-plans."""

    mode: str
    objective: str
    beta_seconds: float
    default_interval_seconds: float
    min_interval_seconds: float
    max_interval_seconds: float
    budget_setting_per_day: float | None  # None: no budget set (the default is derived)


def solved_for(policy: SchedulePolicy, budget_setting_per_day: float | None) -> SolvedFor:
    s = policy.settings
    return SolvedFor(
        s.schedule, s.objective, s.beta_seconds, s.default_interval, s.min_interval,
        s.max_interval, budget_setting_per_day,
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """One solved plan. ``version`` is 0 until it is stored."""

    solved_for: SolvedFor
    budget_per_day: float
    budget_source: str  # BUDGET_FROM_SETTING or BUDGET_FROM_DEFAULT
    mu: float | None  # None in uniform mode
    prior: GammaPrior = DEFAULT_PRIOR
    host_priors: Mapping[int, GammaPrior] = field(default_factory=dict)
    estimated_freshness: float | None = None
    estimated_beta_currency: float | None = None
    achieved_per_day: float | None = None
    sampled: int = 0
    population: float = 0.0
    version: int = 0
    solved_by: str = ""
    # Sampled pages planned as completely observed (μ solved over both kinds by
    # crawler.core.observed); 0 when μ was solved without them.
    complete_sampled: int = 0
    # When it was stored (the database's clock); None until then. Not part of what it says.
    solved_at: dt.datetime | None = field(default=None, compare=False)


def settings_moved(plan: Plan | None, wanted: SolvedFor) -> bool:
    """Whether a daemon with settings ``wanted`` must re-plan rather than adopt ``plan``."""
    return plan is None or plan.solved_for != wanted


def applied(policy: SchedulePolicy, plan: Plan | None) -> SchedulePolicy:
    """``policy`` (the settings') under ``plan``: its μ and priors.

    μ is a Lagrange multiplier of one objective under one set of interval bounds; under other
    settings it means nothing, so a plan solved for other settings lends its priors only and
    the URL waits for the re-plan at the uniform interval.
    """
    if plan is None:
        return policy
    same = (
        plan.solved_for.mode == policy.settings.schedule
        and plan.solved_for.objective == policy.settings.objective
        and plan.solved_for.beta_seconds == policy.settings.beta_seconds
        and plan.solved_for.min_interval_seconds == policy.settings.min_interval
        and plan.solved_for.max_interval_seconds == policy.settings.max_interval
    )
    mu = plan.mu if same and policy.settings.schedule == "optimal" else None
    return replace(policy, mu=mu, prior=plan.prior, host_priors=dict(plan.host_priors))


def host_priors_document(host_priors: Mapping[int, GammaPrior]) -> dict[str, list[float]]:
    """Host priors as stored with the plan: host id -> [shape, rate]."""
    return {str(host): [p.shape, p.rate] for host, p in sorted(host_priors.items())}


def host_priors_from_json(value: str | Mapping[str, Any]) -> dict[int, GammaPrior]:
    data = json.loads(value) if isinstance(value, str) else value
    return {int(host): GammaPrior(float(pair[0]), float(pair[1])) for host, pair in data.items()}


def plan_from_row(row: Mapping[str, Any]) -> Plan:
    """A ``plans`` row (any mapping with its column names) as a Plan."""
    return Plan(
        solved_for=SolvedFor(
            row["mode"], row["objective"], row["beta_seconds"], row["default_interval_seconds"],
            row["min_interval_seconds"], row["max_interval_seconds"],
            row["budget_setting_per_day"],
        ),
        budget_per_day=row["budget_per_day"],
        budget_source=row["budget_source"],
        mu=row["mu"],
        prior=GammaPrior(row["prior_shape"], row["prior_rate"]),
        host_priors=host_priors_from_json(row["host_priors"]),
        estimated_freshness=row["estimated_freshness"],
        estimated_beta_currency=row["estimated_beta_currency"],
        achieved_per_day=row["achieved_per_day"],
        sampled=row["sampled"],
        population=row["population"],
        version=row["version"],
        solved_by=row["solved_by"],
        complete_sampled=row.get("complete_sampled") or 0,
        solved_at=row.get("solved_at"),
    )


def _finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity (PostgreSQL refuses them): an estimate that is not a
    number is stored as unknown."""
    return value if value is None or math.isfinite(value) else None


def plan_document(plan: Plan) -> str:
    """The plan as the JSON object the ``store_plan`` statement reads, by column name."""
    s = plan.solved_for
    return json.dumps({
        "solved_by": plan.solved_by,
        "mode": s.mode,
        "objective": s.objective,
        "beta_seconds": s.beta_seconds,
        "default_interval_seconds": s.default_interval_seconds,
        "min_interval_seconds": s.min_interval_seconds,
        "max_interval_seconds": s.max_interval_seconds,
        "budget_setting_per_day": s.budget_setting_per_day,
        "budget_per_day": plan.budget_per_day,
        "budget_source": plan.budget_source,
        "mu": _finite(plan.mu),
        "prior_shape": plan.prior.shape,
        "prior_rate": plan.prior.rate,
        "host_priors": host_priors_document(plan.host_priors),
        "estimated_freshness": _finite(plan.estimated_freshness),
        "estimated_beta_currency": _finite(plan.estimated_beta_currency),
        "achieved_per_day": _finite(plan.achieved_per_day),
        "sampled": plan.sampled,
        "population": plan.population,
        "complete_sampled": plan.complete_sampled,
    }, allow_nan=False)
