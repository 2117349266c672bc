"""Visible-text lines, diffs that ignore digit-only edits, bounded event line changes."""

from __future__ import annotations

from crawler.core.events import event_payload, simhash_hex
from crawler.core.textdiff import line_changes, text_lines, unified_diff

PAGE = b"""<html><head><title>T</title><script>var hidden = 1;</script></head><body>
<h1>Headline one</h1>
<p>First   paragraph.</p>
<p class="status">Rendered at 100 for visit 3.</p>
</body></html>"""


def test_text_lines_are_the_visible_text_one_line_per_source_line() -> None:
    lines = text_lines(PAGE, "text/html")
    assert "Headline one" in lines and "First paragraph." in lines
    assert not any("hidden" in line for line in lines)


def test_diff_shows_rewrites_and_not_a_changed_timestamp() -> None:
    old = ["Headline one", "First paragraph.", "Rendered at 100 for visit 3."]
    new = ["Headline two", "First paragraph.", "Rendered at 160 for visit 4."]
    diff = unified_diff(old, new, "a", "b")
    assert "-Headline one" in diff and "+Headline two" in diff
    assert not any(line.startswith(("+", "-")) and "Rendered" in line for line in diff)
    assert unified_diff(old, [*old[:2], "Rendered at 7 for visit 9."], "a", "b") == []


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


def test_event_payload_carries_simhashes_as_hex() -> None:
    payload = event_payload(
        kind="changed", url="http://x/", fetched_at_iso="2026-01-01T00:00:00+00:00",
        status=200, previous_simhash=2**64 - 1, simhash=1, distance=7, lines=None,
        warc_file="f.warc.gz", warc_offset=10,
    )
    assert payload["previous_simhash"] == "ffffffffffffffff"
    assert payload["simhash"] == simhash_hex(1) == "0000000000000001"
    assert payload["added"] == [] and payload["warc_offset"] == 10
