"""Visible text as lines, and the differences between two versions of it.

Pure: ``crawler get --text``, ``crawler diff`` and the change events all call these on text
recomputed from the stored body by the same parser that computed the fingerprint
(``crawler.core.extract.parse_page``), so what a user diffs is what the simhash saw.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from crawler.core.extract import parse_page
from crawler.core.observe import is_html
from crawler.core.region import Region

# Bounds on the lines an event carries: a rewritten page must not make a megabyte event.
MAX_EVENT_LINES = 50
MAX_EVENT_CHARS = 8000


def text_lines(
    body: bytes, content_type: str | None, region: Region | None = None
) -> list[str]:
    """The visible text of a stored body, one line per source line, whitespace collapsed.

    The fingerprint's features ignore whitespace, so these lines carry exactly its words; the
    line breaks only make a diff readable. Non-HTML bodies are decoded as UTF-8 text. With the
    URL's watched ``region``, only its text, as the fingerprint saw it.
    """
    if is_html(content_type, body):
        raw = parse_page(body, content_type, region=region).raw_text
    else:
        raw = body.decode("utf-8", errors="replace")
    lines = (" ".join(line.split()) for line in raw.splitlines())
    return [line for line in lines if line]


_DIGITS = re.compile(r"\d+")


def cosmetic_key(line: str) -> str:
    """What a line is compared by: its digits masked, so that a line whose only edit is a
    number (a "rendered at" time, a visit counter, a build number) counts as unchanged."""
    return _DIGITS.sub("#", line)


def _opcodes(old: Sequence[str], new: Sequence[str]) -> Sequence[tuple[str, int, int, int, int]]:
    matcher = difflib.SequenceMatcher(
        a=[cosmetic_key(x) for x in old], b=[cosmetic_key(x) for x in new], autojunk=False
    )
    return matcher.get_opcodes()


def unified_diff(
    old: Sequence[str], new: Sequence[str], old_label: str, new_label: str, context: int = 3
) -> list[str]:
    """A unified diff of two versions' text lines, three lines of context, lines that differ
    only in digits treated as equal (``cosmetic_key``); empty when nothing else changed."""
    out: list[str] = []
    matcher = difflib.SequenceMatcher(
        a=[cosmetic_key(x) for x in old], b=[cosmetic_key(x) for x in new], autojunk=False
    )
    for group in matcher.get_grouped_opcodes(context):
        if not out:
            out += [f"--- {old_label}", f"+++ {new_label}"]
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out += [" " + line for line in new[b1:b2]]
                continue
            out += ["-" + line for line in old[a1:a2]]
            out += ["+" + line for line in new[b1:b2]]
    return out


@dataclass(frozen=True, slots=True)
class LineChanges:
    """The lines a change added and removed, bounded for an event."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    truncated: bool


def line_changes(
    old: Sequence[str],
    new: Sequence[str],
    *,
    max_lines: int = MAX_EVENT_LINES,
    max_chars: int = MAX_EVENT_CHARS,
) -> LineChanges:
    """Added and removed lines (in order), at most ``max_lines`` and ``max_chars`` in all.

    Lines that differ only in digits count as equal, unless nothing else differs: an event is
    written for a change the fingerprint saw, and on a small page a changed number alone can
    move it past the threshold, so then the numbers are the change, and shown (an event that
    says "changed" with no line added or removed tells its reader nothing)."""
    added: list[str] = []
    removed: list[str] = []
    budget = max_chars
    truncated = False
    opcodes = _opcodes(old, new)
    if all(tag == "equal" for tag, *_ in opcodes) and list(old) != list(new):
        opcodes = difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        for target, lines in ((removed, old[i1:i2]), (added, new[j1:j2])):
            for line in lines:
                if len(added) + len(removed) >= max_lines or budget <= 0:
                    truncated = True
                    break
                cut = line[:budget]
                truncated |= len(cut) < len(line)
                budget -= len(cut)
                target.append(cut)
    return LineChanges(tuple(added), tuple(removed), truncated)
