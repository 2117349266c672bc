"""The crawl log's last word names what the fetch was: `first` only for a page's first
content, never for a 404 or an error on a page fetched before (issue 35)."""

from __future__ import annotations

import pytest

from crawler.daemon.logstats import Figures, stats_line
from crawler.logs import fetch_verdict


@pytest.mark.parametrize(("outcome", "changed", "had_version", "word"), [
    ("ok", True, True, "changed"),
    ("ok", False, True, "unchanged"),
    ("ok", None, False, "first"),
    ("ok", None, True, "new baseline"),
    ("not_modified", None, True, "unchanged (304)"),
    ("gone", None, True, "gone"),
    ("gone", None, False, "gone"),
    ("http_error", None, True, "http error"),
    ("network_error", None, True, "network error"),
    ("timeout", None, False, "timeout"),
    ("redirect", None, True, "redirect"),
])
def test_fetch_verdict(outcome: str, changed: bool | None, had_version: bool,
                       word: str) -> None:
    assert fetch_verdict(outcome, changed, had_version) == word


def test_stats_line_counts_since_the_last_line() -> None:
    before = Figures(fetches=10, errors=1, changes=2)
    after = Figures(fetches=11, errors=3, changes=3, due=40, most_overdue_seconds=125)
    assert stats_line(before, after, 30.0) == (
        "crawled 1 page (2/min), 1 change, 2 errors in the last 30 s; 40 URLs due, most "
        "overdue 2.1 min")
    assert stats_line(Figures(), Figures(), 60.0).endswith("; - URLs due, most overdue -")
