"""Complete and incomplete observations under one budget (crawler.core.observed), the trust
model (crawler.core.hint_trust) and the noisy-hint posterior, against independent derivations.

The optimum of Kolobov, Peres, Lu & Horvitz (NeurIPS 2019) is re-derived here by generic
convex optimisation (scipy's SLSQP on the per-page cost functions written out below), not by
the module's Lagrange rule, and the module's allocation must cost within 1% of it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from crawler.core import plan
from crawler.core.hint_trust import (
    COMPLETE,
    IGNORED,
    NOISY,
    HintCounts,
    announced_in,
    assess,
    prior_changed_probability,
)
from crawler.core.observed import (
    changed_probability,
    complete_fetch_probability,
    false_alarm_probability,
    hinted_fetch_time,
    silent_fetch_time,
    solve_observed,
)

LOW = 1.0 / plan.DEFAULT_MAX_INTERVAL_DAYS
HIGH = 1.0 / plan.DEFAULT_MIN_INTERVAL_DAYS


# The per-page costs, written from the model (docs/MODEL.md section 9), not imported.


def harmonic_cost(rates: np.ndarray, lam: np.ndarray, w: np.ndarray, done: np.ndarray) -> float:
    # Incomplete, Poisson fetches at rate ρ: w ln(1 + λ/ρ); complete, p = r/λ: −w ln p.
    incomplete = w * np.log1p(lam / rates)
    complete = -w * np.log(rates / lam)
    return float(np.sum(np.where(done, complete, incomplete)))


def harmonic_gradient(rates: np.ndarray, lam: np.ndarray, w: np.ndarray, done: np.ndarray):
    incomplete = -w * lam / (rates * (rates + lam))
    complete = -w / rates
    return np.where(done, complete, incomplete)


def negative_freshness(rates: np.ndarray, lam: np.ndarray, w: np.ndarray, done: np.ndarray):
    # Incomplete, evenly spaced: (1 − e^{−λ/ρ}) ρ/λ; complete: p = r/λ.
    incomplete = -np.expm1(-lam / rates) * rates / lam
    complete = rates / lam
    return -float(np.sum(w * np.where(done, complete, incomplete)))


def negative_freshness_gradient(rates, lam, w, done):
    r = lam / rates
    incomplete = (1.0 - (1.0 + r) * np.exp(-r)) / lam
    complete = 1.0 / lam
    return -w * np.where(done, complete, incomplete)


def generic_optimum(cost, gradient, lam, w, done, budget, hosts=None, caps=None):
    """min cost(r) s.t. Σ r = budget, per-page bounds (a complete page's r ≤ λ: p ≤ 1), and
    Σ_host r ≤ cap. SLSQP over y = ln r from an even split: the rates span six orders of
    magnitude, which in r itself leave SLSQP stalled short of the optimum."""
    size = lam.size
    low = np.where(done, np.minimum(LOW, lam), LOW)
    high = np.minimum(np.where(done, np.minimum(HIGH, lam), HIGH), budget)

    def f(y):
        return cost(np.exp(y), lam, w, done)

    def g(y):
        return gradient(np.exp(y), lam, w, done) * np.exp(y)

    constraints = [{"type": "eq", "fun": lambda y: (np.sum(np.exp(y)) - budget) / budget,
                    "jac": lambda y: np.exp(y) / budget}]
    if hosts is not None:
        for host, cap in enumerate(caps):
            member = (hosts == host).astype(float)
            constraints.append({
                "type": "ineq",
                "fun": lambda y, m=member, c=cap: (c - m @ np.exp(y)) / c,
                "jac": lambda y, m=member, c=cap: -m * np.exp(y) / c,
            })
    start = np.log(np.clip(np.full(size, budget / size), low, high))
    best = optimize.minimize(
        f, start, jac=g, bounds=list(zip(np.log(low), np.log(high), strict=True)),
        constraints=constraints, method="SLSQP", options={"maxiter": 3000, "ftol": 1e-12},
    )
    assert best.success, best.message
    return np.exp(best.x), best.fun


def population(seed: int, size: int, complete_share: float):
    rng = np.random.default_rng(seed)
    lam = np.exp(rng.uniform(np.log(0.02), np.log(30.0), size))
    w = rng.uniform(0.3, 3.0, size)
    done = rng.random(size) < complete_share
    return lam, w, done


CASES = [
    # (seed, pages, complete share, budget per page per day)
    (1, 40, 0.4, 0.5),
    (2, 40, 0.6, 2.0),
    (3, 60, 0.2, 0.1),
    (4, 30, 0.5, 5.0),
    (5, 50, 0.8, 1.0),
]


@pytest.mark.parametrize(("seed", "size", "share", "per_page"), CASES)
def test_harmonic_allocation_costs_the_generic_optimum(
    seed: int, size: int, share: float, per_page: float
) -> None:
    lam, w, done = population(seed, size, share)
    budget = per_page * size
    solved = solve_observed(lam, w, done, budget, "harmonic")
    _, optimum = generic_optimum(harmonic_cost, harmonic_gradient, lam, w, done, budget)
    ours = harmonic_cost(solved.rates_per_day, lam, w, done)
    assert solved.total_per_day == pytest.approx(budget, rel=1e-6)
    assert ours == pytest.approx(optimum, rel=0.01)
    # The generic solver finds nothing cheaper (up to its own tolerance).
    assert ours <= optimum * (1.0 + 1e-6) + 1e-9
    assert solved.objective_value == pytest.approx(ours, rel=1e-9)


@pytest.mark.parametrize(("seed", "size", "share", "per_page"), CASES)
def test_freshness_allocation_is_the_generic_optimum(
    seed: int, size: int, share: float, per_page: float
) -> None:
    lam, w, done = population(seed, size, share)
    budget = per_page * size
    solved = solve_observed(lam, w, done, budget, "freshness")
    _, optimum = generic_optimum(
        negative_freshness, negative_freshness_gradient, lam, w, done, budget
    )
    ours = negative_freshness(solved.rates_per_day, lam, w, done)
    assert solved.total_per_day == pytest.approx(budget, rel=1e-6)
    assert ours == pytest.approx(optimum, rel=0.01)
    assert ours <= optimum + 1e-6 * abs(optimum)
    # Freshness is linear in a complete page's spending: all or nothing (the least is one fetch
    # a year), but for a page the budget splits.
    probabilities = solved.fetch_probabilities[done]
    floor = np.minimum(LOW, lam[done]) / lam[done]
    between = (probabilities > floor * (1 + 1e-6)) & (probabilities < 1 - 1e-6)
    assert between.sum() <= 1


def test_host_caps_count_both_kinds_of_pages() -> None:
    lam, w, done = population(7, 40, 0.5)
    hosts = np.arange(40) % 4
    budget = 40.0
    caps = np.array([3.0, 40.0, 6.0, 40.0])
    solved = solve_observed(lam, w, done, budget, "harmonic", host_ids=hosts,
                            host_caps_per_day=caps)
    totals = np.bincount(hosts, weights=solved.rates_per_day, minlength=4)
    assert np.all(totals <= caps * (1 + 1e-6))
    assert solved.total_per_day == pytest.approx(budget, rel=1e-6)
    assert set(solved.host_mu) == {0, 2}
    assert all(host_mu >= solved.mu for host_mu in solved.host_mu.values())
    _, optimum = generic_optimum(harmonic_cost, harmonic_gradient, lam, w, done, budget, hosts,
                                 caps)
    ours = harmonic_cost(solved.rates_per_day, lam, w, done)
    assert ours == pytest.approx(optimum, rel=0.01)
    assert ours <= optimum * (1.0 + 1e-6) + 1e-9


def test_without_complete_pages_it_is_the_planner() -> None:
    lam, w, _ = population(8, 50, 0.0)
    for objective in ("harmonic", "freshness"):
        ours = solve_observed(lam, w, np.zeros(50, dtype=bool), 25.0, objective)
        theirs = plan.solve_mu(lam, w, 25.0, objective)
        assert ours.mu == theirs.mu
        np.testing.assert_array_equal(ours.rates_per_day, theirs.rates_per_day)


def test_all_complete_harmonic_closed_form() -> None:
    # r_i = w_i / μ while p ≤ 1: μ = Σ w / B, p_i = w_i / (μ λ_i).
    lam = np.array([5.0, 8.0, 12.0, 20.0])
    w = np.array([1.0, 2.0, 1.5, 0.5])
    solved = solve_observed(lam, w, np.ones(4, dtype=bool), 2.0, "harmonic")
    assert solved.mu == pytest.approx(w.sum() / 2.0, rel=1e-8)
    np.testing.assert_allclose(solved.fetch_probabilities, w / (solved.mu * lam), rtol=1e-8)
    np.testing.assert_allclose(solved.objective_value, -np.sum(w * np.log(w / (solved.mu * lam))))


def test_complete_page_limits_and_local_rule() -> None:
    lam, w, done = population(9, 40, 0.5)
    previous = math.inf
    previous_p = np.zeros(done.sum())
    for budget in (1.0, 5.0, 20.0, 80.0, 400.0):
        solved = solve_observed(lam, w, done, budget, "harmonic")
        # More budget: lower cost, every complete page at least as likely fetched.
        assert solved.objective_value < previous
        p = solved.fetch_probabilities[done]
        assert np.all(p >= previous_p - 1e-9)
        previous, previous_p = solved.objective_value, p
        # The worker's local rule from the stored μ gives the planner's p.
        for rate, weight, planned in zip(lam[done], w[done], p, strict=True):
            assert complete_fetch_probability(rate, weight, solved.mu, "harmonic") == (
                pytest.approx(planned, rel=1e-9)
            )
    # A budget above every bound: every announced change fetched, every other page at its
    # shortest interval; one below every floor: everything at its floor.
    everything = solve_observed(lam, w, done, 1e9, "harmonic")
    assert everything.mu == 0.0
    np.testing.assert_allclose(everything.fetch_probabilities[done], 1.0)
    nothing = solve_observed(lam, w, done, 1e-6, "harmonic")
    assert nothing.mu == math.inf
    np.testing.assert_allclose(nothing.rates_per_day[~done], LOW)


def test_freshness_prefers_the_announced_copy_of_a_page() -> None:
    # The same page twice, once announced: the announced one is worth w/λ a fetch, the blind
    # one at most that, so a budget that covers one page's changes goes to the announced copy.
    lam = np.array([2.0, 2.0])
    solved = solve_observed(lam, 1.0, np.array([True, False]), 2.0 + LOW, "freshness")
    assert solved.fetch_probabilities[0] == pytest.approx(1.0)
    assert solved.rates_per_day[1] == pytest.approx(LOW, rel=1e-3)
    assert complete_fetch_probability(2.0, 1.0, solved.mu * 0.99, "freshness") == 1.0


def test_unsupported_objective_is_refused() -> None:
    with pytest.raises(ValueError, match="complete observations"):
        solve_observed([1.0], 1.0, [True], 1.0, "age")  # type: ignore[arg-type]


# Trust.


def _run_source(
    kind: str, tests: int, seed: int = 3, rates: tuple[float, float] = (0.05, 5.0)
) -> list[str]:
    """Classifications after each of ``tests`` fetch intervals of one site's pages: change
    rates spread over two orders of magnitude, fetched every day, announcements per ``kind``."""
    rng = np.random.default_rng(seed)
    counts = HintCounts()
    verdicts = []
    for _ in range(tests):
        rate = float(np.exp(rng.uniform(np.log(rates[0]), np.log(rates[1]))))
        changes = rng.poisson(rate)
        changed = changes > 0
        if kind == "truthful":
            claims = [float(x) for x in rng.random(changes)]
        elif kind == "missing-half":
            claims = [float(x) for x in rng.random(changes) if rng.random() < 0.5]
        elif kind == "random":
            claims = [float(x) for x in rng.random(rng.poisson(rate))]
        else:  # always-now: the date read after the fetch is the moment of reading
            claims = [0.01]
        for claim in claims:
            read_at = claim if kind == "always-now" else claim + 0.01
            counts = counts.dated(claim, read_at)
        counts = counts.tested(announced_in(claims, 0.0, 1.0), changed,
                               prior_changed_probability(rate, 1.0))
        verdicts.append(assess(counts).classification)
    return verdicts


def test_truthful_source_is_trusted_after_a_handful_of_confirmations() -> None:
    # Intervals that change one time in five: fifteen announced changes found (recall ≥ 0.9
    # with probability 0.8) and five confirmed silences, no error.
    counts = HintCounts()
    for _ in range(5):
        counts = counts.tested(False, False, 0.2)
    for _ in range(14):
        counts = counts.tested(True, True, 0.2)
    assert assess(counts).classification == NOISY  # informative, recall not yet shown
    counts = counts.tested(True, True, 0.2)
    trust = assess(counts)
    assert trust.classification == COMPLETE, trust.reason
    # Four silences are not enough.
    fewer = HintCounts(hits=15, quiet=4, expected_hinted=3.0, expected_silent=0.8)
    assert assess(fewer).classification == NOISY
    # A site whose pages change between once a day and once in 50 days, fetched daily: about
    # one interval in five changes, so fifteen announced changes take some 75 intervals.
    for seed in range(1, 6):
        verdicts = _run_source("truthful", 200, seed, rates=(0.02, 1.0))
        assert verdicts[-1] == COMPLETE
        assert verdicts.index(COMPLETE) < 120
    # Pages that change several times between fetches say little either way (nearly every
    # interval changes): trust takes longer, and comes.
    verdicts = _run_source("truthful", 300)
    assert verdicts.index(COMPLETE) < 100
    assert verdicts[-1] == COMPLETE


def test_always_now_and_random_sources_are_found_out() -> None:
    now = _run_source("always-now", 300)
    assert set(now[3:]) == {IGNORED}  # the fourth date read settles it
    random = _run_source("random", 2000)
    assert set(random) == {IGNORED}
    # Without dates, "changed" on every interval is uninformative too: its precision is the
    # base rate, which the model expected.
    counts = HintCounts()
    rng = np.random.default_rng(5)
    for _ in range(2000):
        rate = float(np.exp(rng.uniform(np.log(0.05), np.log(5.0))))
        prior = prior_changed_probability(rate, 1.0)
        counts = counts.tested(True, bool(rng.random() < prior), prior)
        assert assess(counts).classification == IGNORED


def test_source_missing_some_changes_is_noisy() -> None:
    # Recall 0.8 is informative, but a page fetched only after its announcements would miss a
    # fifth of its changes: noisy, not complete.
    trust = assess(HintCounts(hits=80, false_alarms=0, misses=20, quiet=300,
                              expected_hinted=16.0, expected_silent=60.0))
    assert trust.classification == NOISY


def test_source_missing_half_the_changes_is_noisy() -> None:
    verdicts = _run_source("missing-half", 400)
    assert verdicts[-1] == NOISY
    trust = assess(HintCounts(hits=100, false_alarms=0, misses=100, quiet=300,
                              expected_hinted=30.0, expected_silent=90.0))
    assert trust.classification == NOISY
    assert trust.recall == pytest.approx(0.5, abs=0.01)


def test_trust_falls_at_once_when_the_source_starts_missing() -> None:
    counts = HintCounts(hits=20, quiet=20, expected_hinted=4.0, expected_silent=4.0)
    assert assess(counts).classification == COMPLETE
    counts = counts.tested(False, True, 0.2)
    assert assess(counts).classification != COMPLETE  # one miss in 21: recall not shown ≥ 0.9


# The noisy posterior.


def test_posterior_by_bayes_and_by_simulation() -> None:
    rate, elapsed, recall, false_alarm = 0.7, 1.3, 0.8, 0.15
    prior = 1 - math.exp(-rate * elapsed)
    seen = changed_probability(rate, elapsed, recall, false_alarm, hint_seen=True)
    silent = changed_probability(rate, elapsed, recall, false_alarm, hint_seen=False)
    assert seen > prior > silent
    rng = np.random.default_rng(11)
    changed = rng.random(400_000) < prior
    hinted = np.where(changed, rng.random(changed.size) < recall,
                      rng.random(changed.size) < false_alarm)
    assert changed[hinted].mean() == pytest.approx(seen, abs=0.005)
    assert changed[~hinted].mean() == pytest.approx(silent, abs=0.005)
    # An uninformative source leaves the prior; a perfect one decides.
    assert changed_probability(rate, elapsed, 0.3, 0.3, hint_seen=True) == pytest.approx(prior)
    assert changed_probability(rate, elapsed, 1.0, 0.0, hint_seen=True) == 1.0
    assert changed_probability(rate, elapsed, 1.0, 0.0, hint_seen=False) == 0.0


def test_false_alarm_probability_inverts_precision() -> None:
    recall, false_alarm, base = 0.7, 0.1, 0.3
    precision = recall * base / (recall * base + false_alarm * (1 - base))
    assert false_alarm_probability(precision, recall, base) == pytest.approx(false_alarm)


def test_a_hint_moves_the_fetch_forward_by_the_evidence() -> None:
    last, planned, rate = 0.0, 2.0, 0.5
    strong = hinted_fetch_time(last, planned, rate, 0.5, 0.9, 0.1)
    weak = hinted_fetch_time(last, planned, rate, 0.5, 0.6, 0.4)
    assert strong == 0.5  # already likelier changed than at the planned fetch: fetch now
    assert 0.5 < weak < planned
    assert hinted_fetch_time(last, planned, rate, 0.5, 0.4, 0.4) == pytest.approx(planned)
    # At the moved time the copy is as likely stale as at the planned one.
    posterior = changed_probability(rate, 0.5, 0.6, 0.4, hint_seen=True)
    stale = 1 - (1 - posterior) * math.exp(-rate * (weak - 0.5))
    assert stale == pytest.approx(1 - math.exp(-rate * planned))
    # Silence postpones it, the more the better the source's recall.
    assert silent_fetch_time(last, planned, rate, 0.4, 0.4) == pytest.approx(planned)
    assert planned < silent_fetch_time(last, planned, rate, 0.6, 0.1) < silent_fetch_time(
        last, planned, rate, 0.9, 0.1
    )
