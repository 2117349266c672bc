"""The polite default budget (issue 15): uniform revisits at the default interval."""

from __future__ import annotations

import pytest

from crawler.core.budget import (
    BUDGET_CONFIGURED,
    BUDGET_DEFAULT,
    budget_in_force,
    default_budget_per_day,
)


def test_default_is_one_fetch_per_url_per_interval() -> None:
    assert default_budget_per_day(30, 86400.0) == pytest.approx(30.0)
    assert default_budget_per_day(30, 3600.0) == pytest.approx(720.0)
    assert default_budget_per_day(0, 86400.0) == 0.0


def test_explicit_budget_replaces_the_default() -> None:
    assert budget_in_force(500.0, 30, 86400.0, 1e6) == (500.0, BUDGET_CONFIGURED)


def test_default_applies_without_a_budget_and_stays_within_politeness() -> None:
    # A static 30-page site: 30 fetches a day, not the 1440 a minute apiece the cap allows.
    assert budget_in_force(None, 30, 86400.0, 30 * 1440.0) == (pytest.approx(30.0),
                                                                BUDGET_DEFAULT)
    assert budget_in_force(None, 10_000, 1.0, 500.0) == (500.0, BUDGET_DEFAULT)
