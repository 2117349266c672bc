"""Capacity model (Brewington & Cybenko section 6) and the `crawler plan` command."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.commands import plan
from crawler.core import capacity

SHAPE, SCALE_DAYS = 1.4, 152.2  # Brewington & Cybenko's lifetime-based fit


# --- the paper's figures -----------------------------------------------------------------


def test_one_day_grace_needs_about_eight_and_a_half_days() -> None:
    period = capacity.required_period(0.95, 1.0, SHAPE, SCALE_DAYS)
    assert period == pytest.approx(8.5, abs=0.2)


def test_one_week_grace_needs_about_eighteen_days() -> None:
    period = capacity.required_period(0.95, 7.0, SHAPE, SCALE_DAYS)
    assert period == pytest.approx(18.0, abs=0.5)


def test_whole_web_bandwidth_is_about_104_mbit() -> None:
    period = capacity.required_period(0.95, 1.0, SHAPE, SCALE_DAYS)
    bits = capacity.bandwidth_bits_per_second(
        capacity.parse_count("800e6"), capacity.parse_size_bytes("12KB"), period
    )
    assert bits / 1e6 == pytest.approx(104.0, abs=5.0)


def test_paper_bandwidth_arithmetic_uses_decimal_kilobytes() -> None:
    # 800e6 pages / 8.5 days × 12 kB = 104 Mbit/s holds with kB = 1000 bytes.
    bits = capacity.bandwidth_bits_per_second(800e6, capacity.parse_size_bytes("12KB"), 8.5)
    assert bits == pytest.approx(800e6 * 12_000 * 8 / (8.5 * 86_400))
    assert bits / 1e6 == pytest.approx(104.0, abs=1.0)
    binary = capacity.bandwidth_bits_per_second(800e6, capacity.parse_size_bytes("12KiB"), 8.5)
    assert binary / bits == pytest.approx(1.024)


# --- α(T, β) -------------------------------------------------------------------------------


def test_alpha_matches_monte_carlo_over_the_weibull() -> None:
    rng = np.random.default_rng(7)
    lifetimes = SCALE_DAYS * rng.weibull(SHAPE, size=200_000)
    for period, beta in [(8.5, 1.0), (30.0, 7.0), (3.0, 0.0)]:
        sampled = float(np.mean(capacity.page_beta_currency(lifetimes, period, beta)))
        assert capacity.alpha_for_period(period, beta, SHAPE, SCALE_DAYS) == pytest.approx(
            sampled, abs=0.003
        )


def test_zero_grace_is_freshness_of_model_table() -> None:
    # docs/MODEL.md section 5 reference values (β = 0 makes β-currency plain freshness).
    assert capacity.alpha_for_period(30.0, 0.0, SHAPE, SCALE_DAYS) == pytest.approx(0.828, abs=2e-3)
    assert capacity.alpha_for_period(7.0, 0.0, SHAPE, SCALE_DAYS) == pytest.approx(0.947, abs=2e-3)


def test_period_within_grace_is_always_current() -> None:
    assert capacity.alpha_for_period(0.5, 1.0, SHAPE, SCALE_DAYS) == 1.0
    assert np.all(capacity.page_beta_currency(np.array([0.01, 5.0]), 1.0, 1.0) == 1.0)


@settings(max_examples=25, deadline=None)
@given(
    alpha=st.floats(0.5, 0.99),
    beta_days=st.floats(0.0, 10.0),
    shape=st.floats(0.5, 3.0),
    scale_days=st.floats(5.0, 500.0),
)
def test_required_period_inverts_alpha(
    alpha: float, beta_days: float, shape: float, scale_days: float
) -> None:
    period = capacity.required_period(alpha, beta_days, shape, scale_days)
    assert period >= beta_days
    assert capacity.alpha_for_period(period, beta_days, shape, scale_days) == pytest.approx(
        alpha, abs=1e-6
    )
    # α falls as the period grows.
    assert capacity.alpha_for_period(period * 1.2, beta_days, shape, scale_days) < alpha


# --- the optimal variable-frequency schedule ---------------------------------------------


def test_optimal_schedule_reproduces_model_table() -> None:
    # docs/MODEL.md section 5, Lagrange-optimal column (β = 0): 0.842 at 30 days, 0.957 at 7 days.
    assert capacity.optimal_alpha(30.0, 0.0, SHAPE, SCALE_DAYS).alpha == pytest.approx(
        0.842, abs=2e-3
    )
    assert capacity.optimal_alpha(7.0, 0.0, SHAPE, SCALE_DAYS).alpha == pytest.approx(
        0.957, abs=2e-3
    )


@settings(max_examples=10, deadline=None)
@given(period_days=st.floats(2.0, 60.0), beta_days=st.floats(0.0, 7.0))
def test_optimal_spends_the_same_budget_and_beats_uniform(
    period_days: float, beta_days: float
) -> None:
    optimal = capacity.optimal_alpha(period_days, beta_days, SHAPE, SCALE_DAYS)
    uniform = capacity.alpha_for_period(period_days, beta_days, SHAPE, SCALE_DAYS)
    if period_days > beta_days:
        assert optimal.mean_fetch_rate_per_day == pytest.approx(1.0 / period_days, rel=1e-6)
    assert optimal.alpha >= uniform - 1e-4


def test_optimal_interval_satisfies_lagrange_condition() -> None:
    # Independent check: the numerical ∂P/∂f at the chosen interval equals μ.
    lifetimes = np.array([0.7, 3.0, 20.0, 150.0, 900.0])
    beta_days, multiplier = 1.0, 2.5
    intervals = capacity.optimal_interval_days(lifetimes, beta_days, multiplier)
    for lifetime, interval in zip(lifetimes, intervals, strict=True):
        if beta_days + lifetime <= multiplier:
            assert np.isinf(interval)
            continue

        def currency(rate: float, lifetime: float = lifetime) -> float:
            return float(capacity.page_beta_currency(lifetime, 1.0 / rate, beta_days))

        rate, step = 1.0 / interval, 1e-6 / interval
        slope = (currency(rate + step) - currency(rate - step)) / (2 * step)
        assert slope == pytest.approx(multiplier, rel=1e-4)


def test_optimal_needs_a_smaller_budget_for_the_same_alpha() -> None:
    uniform = capacity.required_period(0.95, 1.0, SHAPE, SCALE_DAYS)
    optimal = capacity.optimal_required_period(0.95, 1.0, SHAPE, SCALE_DAYS)
    assert optimal > uniform
    assert capacity.optimal_alpha(optimal, 1.0, SHAPE, SCALE_DAYS).alpha == pytest.approx(
        0.95, abs=1e-4
    )


# --- units ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "days"),
    [("1d", 1.0), ("1w", 7.0), ("6h", 0.25), ("30m", 30 / 1440), ("152.2d", 152.2),
     ("90s", 90 / 86400), ("2.5", 2.5)],
)
def test_parse_duration(text: str, days: float) -> None:
    assert capacity.parse_duration_days(text) == pytest.approx(days)


@pytest.mark.parametrize(
    ("text", "size"), [("12KB", 12_000), ("12kb", 12_000), ("16KiB", 16_384), ("1.5MB", 1.5e6),
                       ("512", 512)]
)
def test_parse_size(text: str, size: float) -> None:
    assert capacity.parse_size_bytes(text) == pytest.approx(size)


def test_parse_count_and_bad_input() -> None:
    assert capacity.parse_count("800e6") == 800e6
    assert capacity.parse_count("800_000_000") == 800e6
    for bad, parse in [("1x", capacity.parse_duration_days), ("d", capacity.parse_duration_days),
                       ("12XB", capacity.parse_size_bytes), ("-5", capacity.parse_count)]:
        with pytest.raises(ValueError):
            parse(bad)


# --- `crawler plan` ------------------------------------------------------------------------


def _run_plan(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="crawler")
    plan.register(parser.add_subparsers())
    args = parser.parse_args(["plan", *argv])
    code = args.func(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_plan_command_reports_paper_figures(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run_plan(
        ["--weibull-shape", "1.4", "--weibull-scale", "152.2d", "--alpha", "0.95",
         "--beta", "1d", "--pages", "800e6", "--page-size", "12KB", "--json"],
        capsys,
    )
    assert code == 0
    result = json.loads(out)
    assert result["uniform_period_days"] == pytest.approx(8.5, abs=0.2)
    assert result["alpha_at_period"] == pytest.approx(0.95, abs=1e-6)
    assert result["bandwidth_mbit_per_second"] == pytest.approx(104.0, abs=5.0)
    assert result["fetches_per_second"] == pytest.approx(
        800e6 / result["uniform_period_days"] / 86_400
    )
    assert result["optimal_alpha_at_period"] > result["alpha_at_period"]
    assert result["optimal_bandwidth_mbit_per_second"] < result["bandwidth_mbit_per_second"]


def test_plan_command_one_week_and_given_period(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run_plan(
        ["--weibull-shape", "1.4", "--weibull-scale", "152.2d", "--beta", "1w", "--json"], capsys
    )
    assert code == 0
    assert json.loads(out)["uniform_period_days"] == pytest.approx(18.0, abs=0.5)
    code, out, _ = _run_plan(
        ["--weibull-shape", "1.4", "--weibull-scale", "21.74w", "--beta", "0d",
         "--period", "30d", "--json"],
        capsys,
    )
    result = json.loads(out)
    assert result["period_days"] == 30.0
    assert result["alpha_at_period"] == pytest.approx(0.828, abs=2e-3)
    assert result["optimal_alpha_at_period"] == pytest.approx(0.842, abs=2e-3)


def test_plan_command_text_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run_plan(["--weibull-shape", "1.4", "--weibull-scale", "152.2"], capsys)
    assert code == 0 and "Mbit/s" not in out and "8.58 days" in out
    code, _, err = _run_plan(["--weibull-shape", "1.4"], capsys)
    assert code == 2 and "--weibull-scale" in err


@pytest.mark.parametrize(("shape", "scale_days"), [(1.5, 1e-4), (3.0, 1e-3), (0.5, 0.01)])
def test_a_lifetime_of_minutes_has_a_level_set_from_beta_zero(
    shape: float, scale_days: float
) -> None:
    # A demo crawl fits lifetimes of minutes. Integrated over t, the tail beyond such a
    # scale fell between quad's samples: alpha(1e-9 days) came out 0.63 and the report died.
    assert capacity.alpha_for_period(1e-9, 0.0, shape, scale_days) > 0.999
    period = capacity.required_period(0.95, 0.0, shape, scale_days)
    assert 0.0 < period < scale_days
    assert capacity.alpha_for_period(period, 0.0, shape, scale_days) == pytest.approx(0.95)


def test_an_alpha_out_of_reach_is_a_clear_error() -> None:
    # Shape 0.2: a sixth of the lifetimes are under a millisecond.
    with pytest.raises(ValueError, match="out of reach"):
        capacity.required_period(0.95, 0.0, 0.2, 0.01)
