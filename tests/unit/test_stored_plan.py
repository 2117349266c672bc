"""The plan as data: what a fetch process adopts, and when a daemon must re-plan."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np

from crawler.core.estimate import ChangeHistory, GammaPrior, fast_posterior_rate
from crawler.core.replan import current_rates, moved_urls, policy_moved
from crawler.core.schedule import SchedulePolicy
from crawler.core.stored_plan import (
    BUDGET_FROM_SETTING,
    Plan,
    applied,
    host_priors_document,
    host_priors_from_json,
    plan_document,
    plan_from_row,
    settings_moved,
    solved_for,
)
from crawler.settings import Settings

OPTIMAL = SchedulePolicy(Settings(schedule="optimal"))
UNIFORM = SchedulePolicy(Settings(schedule="uniform", default_interval=3600.0))


def plan_for(policy: object, budget: float | None = 1000.0, mu: float | None = 0.01) -> Plan:
    return Plan(
        solved_for=solved_for(OPTIMAL, budget), budget_per_day=budget or 500.0,
        budget_source=BUDGET_FROM_SETTING, mu=mu, prior=GammaPrior(2.0, 4.0),
        host_priors={7: GammaPrior(1.0, 3.0)}, version=3,
    )


def test_a_process_adopts_mu_and_every_prior_of_the_plan() -> None:
    policy = applied(OPTIMAL, plan_for(OPTIMAL))
    assert policy.mu == 0.01
    assert policy.prior == GammaPrior(2.0, 4.0)
    assert policy.prior_for(7) == GammaPrior(1.0, 3.0)
    assert policy.settings is OPTIMAL.settings


def test_mu_solved_for_other_bounds_is_not_applied() -> None:
    other = SchedulePolicy(
        Settings(schedule="optimal", min_interval=OPTIMAL.settings.min_interval * 2))
    policy = applied(other, plan_for(OPTIMAL))
    assert policy.mu is None  # the uniform interval until the re-plan
    assert policy.prior == GammaPrior(2.0, 4.0)
    assert applied(UNIFORM, plan_for(OPTIMAL)).mu is None


def test_other_settings_force_a_replan() -> None:
    plan = plan_for(OPTIMAL)
    assert not settings_moved(plan, solved_for(OPTIMAL, 1000.0))
    assert settings_moved(plan, solved_for(OPTIMAL, 500.0))
    assert settings_moved(plan, solved_for(OPTIMAL, None))
    assert settings_moved(plan, solved_for(UNIFORM, 1000.0))
    assert settings_moved(None, solved_for(OPTIMAL, 1000.0))


def test_a_plan_reads_back_from_its_row() -> None:
    plan = plan_for(OPTIMAL)
    row = json.loads(plan_document(plan))
    row["version"] = plan.version
    assert plan_from_row(row) == plan
    assert host_priors_from_json(json.dumps(host_priors_document({3: GammaPrior(0.5, 2.0)}))) == {
        3: GammaPrior(0.5, 2.0)}


def test_a_lower_uniform_interval_moves_every_url() -> None:
    walked = UNIFORM
    shorter = SchedulePolicy(Settings(schedule="uniform", default_interval=600.0))
    assert policy_moved(walked, shorter)
    assert not policy_moved(walked, replace(UNIFORM, prior=GammaPrior(3.0, 1.0)))
    stored = np.full(3, 86400.0 / 3600.0)
    rates = np.array([0.1, 1.0, 10.0])
    assert not moved_urls(stored, rates, np.ones(3), walked).any()
    assert moved_urls(stored, rates, np.ones(3), shorter).all()


def test_rates_are_estimated_under_the_new_prior() -> None:
    history = ChangeHistory((0.01, 0.01), 0.0, 2)
    new_prior = GammaPrior(0.6, 0.001)
    rates = current_rates([history, None], np.array([0.03, np.nan]), [1, 2], new_prior,
                          {2: GammaPrior(1.0, 2.0)})
    assert rates[0] == fast_posterior_rate(history, new_prior, 0.03)
    assert rates[1] == 0.5  # host 2's prior mean: no history yet


def test_an_estimate_that_is_not_a_number_is_stored_as_unknown() -> None:
    plan = replace(plan_for(OPTIMAL), estimated_freshness=float("nan"),
                   estimated_beta_currency=float("inf"))
    row = json.loads(plan_document(plan))
    assert row["estimated_freshness"] is None and row["estimated_beta_currency"] is None
