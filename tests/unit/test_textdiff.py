"""Visible-text lines, diffs that show every difference, bounded event line and word changes."""

from __future__ import annotations

import difflib
import itertools
import json
import time

from crawler.core.events import event_payload, simhash_hex
from crawler.core.textdiff import (
    WordChange,
    line_changes,
    text_lines,
    unified_diff,
    word_changes,
)

PAGE = b"""<html><head><title>T</title><script>var hidden = 1;</script></head><body>
<h1>Headline one</h1>
<p>First   paragraph.</p>
<p class="status">Rendered at 100 for visit 3.</p>
</body></html>"""


def test_text_lines_are_the_visible_text_one_line_per_source_line() -> None:
    lines = text_lines(PAGE, "text/html")
    assert "Headline one" in lines and "First paragraph." in lines
    assert not any("hidden" in line for line in lines)


def test_diff_shows_every_line_that_differs_numbers_included() -> None:
    """A changed number is a change to whoever reads the diff (issue 35: a price from 12.50
    to 15.99 gave an empty diff); the diff is empty only for equal texts."""
    old = ["Headline one", "First paragraph.", "Rendered at 100 for visit 3."]
    new = ["Headline two", "First paragraph.", "Rendered at 160 for visit 4."]
    diff = unified_diff(old, new, "a", "b")
    assert "-Headline one" in diff and "+Headline two" in diff
    assert "-Rendered at 100 for visit 3." in diff and "+Rendered at 160 for visit 4." in diff
    price = unified_diff(["Price: 12.50 EUR"], ["Price: 15.99 EUR"], "a", "b")
    assert price == ["--- a", "+++ b", "@@ -1,1 +1,1 @@", "-Price: 12.50 EUR",
                     "+Price: 15.99 EUR"]
    assert unified_diff(old, old, "a", "b") == []


def test_unified_diff_matches_difflib_hunks() -> None:
    """The bounded diff finds the hunks difflib finds, context included."""
    old = [f"line {i}" for i in range(40)]
    new = [*old[:5], "inserted", *old[5:20], *old[21:]]
    ours = unified_diff(old, new, "a", "b")
    theirs = list(difflib.unified_diff(old, new, "a", "b", lineterm="", n=3))
    assert [x for x in ours if x[:1] in " +-"] == [x for x in theirs if x[:1] in " +-"]
    assert sum(x.startswith("@@") for x in ours) == sum(x.startswith("@@") for x in theirs)


def test_diffs_are_bounded_in_time_and_show_every_difference() -> None:
    """A rewrite far past what difflib aligns in bounded time is one replaced block: every
    line still shown, in well under a second; its words stay aligned on the numbers each
    line keeps (they occur once in each version)."""
    old = [f"old {i} " + "x" * (i % 7) for i in range(30_000)]
    new = [f"new {i} " + "y" * (i % 5) for i in range(30_000)]
    started = time.perf_counter()
    diff = unified_diff(old, new, "a", "b")
    words, _ = word_changes(old, new)
    assert time.perf_counter() - started < 5.0
    assert sum(x.startswith("-") for x in diff) == 30_000 + 1  # the lines and "--- a"
    assert words and (words[0].removed, words[0].added) == ("old", "new")


def test_word_changes_show_both_prices_with_context() -> None:
    long_text = " ".join(f"word{i}" for i in range(400))
    old = [long_text, "Price: 12.50 EUR including tax", long_text]
    new = [long_text, "Price: 15.99 EUR including tax", long_text]
    changes, truncated = word_changes(old, new)
    assert not truncated
    assert changes == (WordChange("word396 word397 word398 word399 Price:", "12.50", "15.99",
                                  "EUR including tax word0 word1"),)
    assert changes[0].shown() == ("word396 word397 word398 word399 Price: [-12.50-]{+15.99+} "
                                  "EUR including tax word0 word1")
    assert word_changes(old, old) == ((), False)
    many, cut = word_changes([" ".join(f"keep{i} old{i}" for i in range(50))],
                             [" ".join(f"keep{i} new{i}" for i in range(50))], max_changes=3)
    assert cut and [w.removed for w in many] == ["old0", "old1", "old2"]
    short, cut = word_changes(["a " + "x" * 50], ["a " + "y" * 50], max_chars=60)
    assert cut and short[0].removed == "x" * 50 and short[0].added == "y" * 10


def test_line_changes_are_bounded() -> None:
    old = [f"old line {chr(97 + i)}" for i in range(10)]
    new = [f"new line {chr(97 + i)}" for i in range(10)]
    changes = line_changes(old, new, max_lines=5, max_chars=1000)
    assert len(changes.added) + len(changes.removed) == 5 and changes.truncated
    small = line_changes(["a"], ["b" * 50], max_lines=5, max_chars=10)
    assert small.removed == ("a",) and small.added == ("b" * 9,) and small.truncated


def test_line_changes_show_numbers_when_only_numbers_changed() -> None:
    """On a small page a changed number alone can make a change (QA: "topic 4." edited to
    "topic 5." gave an event with no line added or removed); its event shows that line."""
    old = ["Headline", "About topic 4."]
    changes = line_changes(old, ["Headline", "About topic 5."])
    assert changes.removed == ("About topic 4.",) and changes.added == ("About topic 5.",)
    # Beside a real edit, a digit-only edit is still left out.
    mixed = line_changes([*old, "Rendered at 100"], ["Headline two", "About topic 4.",
                                                     "Rendered at 160"])
    assert mixed.removed == ("Headline",) and mixed.added == ("Headline two",)
    assert line_changes(old, old) == line_changes([], [])
    # Watched exactly, the numbers are the change, beside any other.
    exact = line_changes([*old, "Rendered at 100"], ["Headline two", "About topic 4.",
                                                     "Rendered at 160"], numbers=True)
    assert exact.removed == ("Headline", "Rendered at 100")
    assert exact.added == ("Headline two", "Rendered at 160")
    # The word changes show every word either way.
    assert [(w.removed, w.added) for w in mixed.words] == [("", "two"), ("100", "160")]


def test_event_payload_carries_simhashes_as_hex() -> None:
    payload = event_payload(
        kind="changed", url="http://x/", fetched_at_iso="2026-01-01T00:00:00+00:00",
        status=200, previous_simhash=2**64 - 1, simhash=1, distance=7, lines=None,
        warc_file="f.warc.gz", warc_offset=10,
    )
    assert payload["previous_simhash"] == "ffffffffffffffff"
    assert payload["simhash"] == simhash_hex(1) == "0000000000000001"
    assert payload["added"] == [] and payload["warc_offset"] == 10
    assert payload["words"] == []
    changes = line_changes(["Price: 12.50 EUR"], ["Price: 15.99 EUR"])
    with_words = event_payload(
        kind="changed", url="http://x/", fetched_at_iso="2026-01-01T00:00:00+00:00",
        status=200, previous_simhash=1, simhash=2, distance=2, lines=changes,
        warc_file=None, warc_offset=None,
    )
    assert with_words["words"] == [
        {"before": "Price:", "removed": "12.50", "added": "15.99", "after": "EUR"}
    ]
    assert json.loads(json.dumps(with_words)) == with_words


def test_alternating_changes_are_aligned_in_linear_time() -> None:
    """Every other line of 20,000 changed: difflib alone is quadratic here (10,000 lines took
    14 s); anchored on the unchanged lines, which occur once each, it is a few milliseconds,
    and it finds the same hunks difflib does."""
    old = [f"row {i}" if i % 2 else f"row {i} old" for i in range(20_000)]
    new = [f"row {i}" if i % 2 else f"row {i} new" for i in range(20_000)]
    started = time.perf_counter()
    diff = unified_diff(old, new, "a", "b")
    changes = line_changes(old, new, max_lines=10_000_000, max_chars=10_000_000)
    assert time.perf_counter() - started < 2.0
    assert sum(x.startswith("+") for x in diff) == 10_000 + 1
    assert len(changes.added) == len(changes.removed) == 10_000
    small_old, small_new = old[:300], new[:300]
    theirs = list(difflib.unified_diff(small_old, small_new, "a", "b", lineterm="", n=3))
    assert unified_diff(small_old, small_new, "a", "b") == theirs


def test_bounded_opcodes_cover_both_versions_in_order() -> None:
    """Past the difflib budget, the anchored opcodes still tile both versions, equal blocks
    equal: what every diff and event is built from."""
    from crawler.core.textdiff import bounded_opcodes

    old = [f"l{i % 97}" if i % 5 else f"u{i}" for i in range(3_000)]
    new = [f"l{i % 89}" if i % 7 else f"u{i}" for i in range(3_000)]
    codes = bounded_opcodes(old, new, budget=1_000)
    assert codes[0][1] == codes[0][3] == 0
    assert (codes[-1][2], codes[-1][4]) == (len(old), len(new))
    for (_, _, i2, _, j2), (_, i1, _, j1, _) in itertools.pairwise(codes):
        assert (i2, j2) == (i1, j1)
    for tag, i1, i2, j1, j2 in codes:
        assert (old[i1:i2] == new[j1:j2]) == (tag == "equal")


def test_huge_inputs_are_cut_and_say_so() -> None:
    """Past the items a diff compares, the change is marked cut rather than costing more."""
    from crawler.core.textdiff import MAX_DIFF_ITEMS

    old = [f"a {i}" for i in range(MAX_DIFF_ITEMS + 10)]
    new = [*old[:-1], "changed past the bound"]
    changes = line_changes(old, new)
    assert changes.truncated and not changes.added
