"""Visible text as lines, and the differences between two versions of it.

Pure: ``crawler get --text``, ``crawler diff`` and the change events all take text from the
same bounded parse that computed the fingerprint (``crawler.core.bounds.parse_bounded``), so
what a user diffs is what the simhash saw.

Every diff here is bounded in time and input (``difflib`` alone is quadratic). Past
``MAX_DIFF_ITEMS`` lines (or words) a side, the rest is not compared (the change says it was
cut). The common head and tail are skipped in linear time; a middle small enough is aligned by
``difflib`` exactly; a larger one is anchored on the items that occur once in each version
(patience diff, O(n log n)), and only the gaps between anchors go to ``difflib``, within a
total budget of comparisons, past which a gap is shown as one replaced block. Either way every
line and word that differs is shown; only the alignment inside a huge rewrite is coarser.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections import Counter
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from crawler.core.bounds import parse_bounded
from crawler.core.model import OK, FetchResult
from crawler.core.observe import is_html
from crawler.core.region import Region

# Bounds on the lines an event carries: a rewritten page must not make a megabyte event.
MAX_EVENT_LINES: Final = 50
MAX_EVENT_CHARS: Final = 8000
# Bounds on the word changes an event carries, and the words of context around each.
MAX_EVENT_WORD_CHANGES: Final = 20
MAX_EVENT_WORD_CHARS: Final = 4000
WORD_CONTEXT: Final = 5
# The most lines (or words) of a version that are compared: past them a change is cut, so that
# no page, however long, costs a diff more than this many items' work.
MAX_DIFF_ITEMS: Final = 100_000
# Comparisons difflib may make in one diff (the product of the lengths of each span it aligns,
# its worst case): about 0.2 s of CPU. An alignment past it anchors on unique items instead.
DIFFLIB_BUDGET: Final = 1_000_000
# How many times a gap between anchors is anchored again on its own unique items; deeper gaps
# are one replaced block (each level is linear, so this bounds the whole to O(n log n)).
MAX_ANCHOR_DEPTH: Final = 4
# difflib's own threshold for its popular-element heuristic; below it autojunk does nothing.
_AUTOJUNK_FROM: Final = 200

Opcode = tuple[str, int, int, int, int]


def text_lines(body: bytes, content_type: str | None, region: Region | None = None) -> list[str]:
    """The visible text of a stored body (only the watched ``region``'s, with one), one line
    per source line, whitespace collapsed: exactly the words the fingerprint saw. Non-HTML
    bodies are decoded as UTF-8 text."""
    return page_text(body, content_type, region)[0]


def page_text(
    body: bytes, content_type: str | None, region: Region | None = None
) -> tuple[list[str], int | None]:
    """``text_lines`` and the simhash of the same text (None for a body that is not HTML),
    from one bounded parse: what ``crawler diff`` shows and the distance it states."""
    raw, simhash = body_text(body, content_type, region)
    return split_lines(raw), simhash


def body_text(
    body: bytes, content_type: str | None, region: Region | None = None
) -> tuple[str, int | None]:
    """The visible text of a body as the fetch path's bounded parse extracts it (the region's
    only, with one), and its simhash (None when not HTML). A body the bounded parse refuses
    (binary, or a parser failure) has no text, as it had no fingerprint."""
    if not is_html(content_type, body):
        return body.decode("utf-8", errors="replace"), None
    _, page = parse_bounded(
        FetchResult(fetched_at=0.0, duration_seconds=0.0, outcome=OK, status=200, body=body,
                    content_type=content_type),
        region=region,
    )
    return ("", None) if page is None else (page.raw_text, page.simhash)


def split_lines(raw: str) -> list[str]:
    """Extracted text as diff lines: one per source line, whitespace collapsed, none empty."""
    lines = (" ".join(line.split()) for line in raw.splitlines())
    return [line for line in lines if line]


_DIGITS = re.compile(r"\d+")


def cosmetic_key(line: str) -> str:
    """What a line is compared by in a simhash-rule event: its digits masked, so that a line
    whose only edit is a number (a "rendered at" time, a visit counter) counts as unchanged."""
    return _DIGITS.sub("#", line)


def bounded_opcodes(
    old: Sequence[Hashable], new: Sequence[Hashable], budget: int = DIFFLIB_BUDGET
) -> list[Opcode]:
    """``difflib.SequenceMatcher(a=old, b=new).get_opcodes()``, within bounds: the common
    head and tail are found in linear time, a middle within ``budget`` comparisons is aligned
    by difflib, a longer one is anchored on unique items first (see the module). Blocks tagged
    equal are equal, and every differing item is in a block that is not."""
    return _merged(_trimmed(old, new, 0, len(old), 0, len(new), [budget], 0))


def _changed(i1: int, i2: int, j1: int, j2: int) -> list[Opcode]:
    """The block for spans that differ throughout (none when both are empty)."""
    if i1 == i2 and j1 == j2:
        return []
    tag = "replace" if i1 < i2 and j1 < j2 else "delete" if i1 < i2 else "insert"
    return [(tag, i1, i2, j1, j2)]


def _trimmed(
    old: Sequence[Hashable], new: Sequence[Hashable], i1: int, i2: int, j1: int, j2: int,
    budget: list[int], depth: int,
) -> list[Opcode]:
    """Opcodes for ``old[i1:i2]`` against ``new[j1:j2]``: the common head and tail, found in
    linear time, are equal blocks (maybe empty: ``_merged`` drops those), and ``_align``
    aligns the middle."""
    x1, y1, x2, y2 = i1, j1, i2, j2
    while x1 < x2 and y1 < y2 and old[x1] == new[y1]:
        x1, y1 = x1 + 1, y1 + 1
    while x2 > x1 and y2 > y1 and old[x2 - 1] == new[y2 - 1]:
        x2, y2 = x2 - 1, y2 - 1
    return [("equal", i1, x1, j1, y1), *_align(old, new, x1, x2, y1, y2, budget, depth),
            ("equal", x2, i2, y2, j2)]


def _align(
    old: Sequence[Hashable], new: Sequence[Hashable], i1: int, i2: int, j1: int, j2: int,
    budget: list[int], depth: int,
) -> list[Opcode]:
    """Opcodes for ``old[i1:i2]`` against ``new[j1:j2]``, whose ends differ. ``budget`` is
    the difflib comparisons left, shared by every gap of one diff."""
    if i1 == i2 or j1 == j2:
        return _changed(i1, i2, j1, j2)
    cost = (i2 - i1) * (j2 - j1)
    if cost <= budget[0]:
        budget[0] -= cost
        a, b = old[i1:i2], new[j1:j2]
        matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=len(a) + len(b) >= _AUTOJUNK_FROM)
        return [(tag, x1 + i1, x2 + i1, y1 + j1, y2 + j1)
                for tag, x1, x2, y1, y2 in matcher.get_opcodes()]
    anchors = _unique_anchors(old, new, i1, i2, j1, j2) if depth < MAX_ANCHOR_DEPTH else []
    if not anchors:
        return _in_place(old, new, i1, i2, j1, j2)
    codes: list[Opcode] = []
    p, q = i1, j1
    for i, j in [*anchors, (i2, j2)]:
        codes += _trimmed(old, new, p, i, q, j, budget, depth + 1)  # the gap before the anchor
        if i < i2:
            codes.append(("equal", i, i + 1, j, j + 1))
        p, q = i + 1, j + 1
    return codes


def _in_place(
    old: Sequence[Hashable], new: Sequence[Hashable], i1: int, i2: int, j1: int, j2: int
) -> list[Opcode]:
    """Spans with nothing to anchor on: compared item by item when they are as long (a table
    whose cells changed in place, rows repeating), else one replaced block."""
    if i2 - i1 != j2 - j1:
        return _changed(i1, i2, j1, j2)
    codes: list[Opcode] = []
    for k in range(i2 - i1):
        same = old[i1 + k] == new[j1 + k]
        codes.append(("equal" if same else "replace", i1 + k, i1 + k + 1, j1 + k, j1 + k + 1))
    return _merged(codes)


def _unique_anchors(
    old: Sequence[Hashable], new: Sequence[Hashable], i1: int, i2: int, j1: int, j2: int
) -> list[tuple[int, int]]:
    """Patience diff's anchors: the items that occur exactly once in ``old[i1:i2]`` and once
    in ``new[j1:j2]``, the longest run of them in the same order in both (as index pairs)."""
    in_old = Counter(old[i1:i2])
    in_new = Counter(new[j1:j2])
    where = {new[j]: j for j in range(j1, j2) if in_new[new[j]] == 1}
    pairs = [(i, where[old[i]]) for i in range(i1, i2)
             if in_old[old[i]] == 1 and old[i] in where]
    # Longest increasing subsequence of the new positions, in the old order (patience sort).
    tops: list[int] = []  # the new position ending the best run of each length
    ends: list[int] = []  # the pair index of that run's end
    back: list[int] = []
    for k, (_, j) in enumerate(pairs):
        at = bisect.bisect_left(tops, j)
        back.append(ends[at - 1] if at else -1)
        if at == len(tops):
            tops.append(j)
            ends.append(k)
        else:
            tops[at], ends[at] = j, k
    run: list[tuple[int, int]] = []
    k = ends[-1] if ends else -1
    while k >= 0:
        run.append(pairs[k])
        k = back[k]
    run.reverse()
    return run


def _merged(codes: list[Opcode]) -> list[Opcode]:
    """Adjacent blocks of the same kind (equal, or not) as one, as difflib never splits them."""
    out: list[Opcode] = []
    for code in codes:
        if code[1] == code[2] and code[3] == code[4]:
            continue
        if out and (out[-1][0] == "equal") == (code[0] == "equal"):
            _, i1, _, j1, _ = out[-1]
            if code[0] == "equal":
                out[-1] = ("equal", i1, code[2], j1, code[4])
            else:
                out[-1] = _changed(i1, code[2], j1, code[4])[0]
            continue
        out.append(code)
    return out


def _grouped(codes: list[Opcode], context: int) -> Iterator[list[Opcode]]:
    """The hunks of a unified diff: ``SequenceMatcher.get_grouped_opcodes`` on ``codes``."""
    if not codes:
        return
    codes = list(codes)
    if codes[0][0] == "equal":
        _, i1, i2, j1, j2 = codes[0]
        codes[0] = ("equal", max(i1, i2 - context), i2, max(j1, j2 - context), j2)
    if codes[-1][0] == "equal":
        _, i1, i2, j1, j2 = codes[-1]
        codes[-1] = ("equal", i1, min(i2, i1 + context), j1, min(j2, j1 + context))
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def unified_diff(
    old: Sequence[str], new: Sequence[str], old_label: str, new_label: str, context: int = 3
) -> list[str]:
    """A unified diff of two versions' text lines, three lines of context: every line that
    differs, numbers included (a changed price is a change to whoever reads the diff); empty
    only when the lines are equal."""
    out: list[str] = []
    for group in _grouped(bounded_opcodes(old, new), context):
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


def _first_words(lines: Sequence[str], limit: int) -> list[str]:
    """The first ``limit`` words of ``lines`` (a page of one huge line is cut, not split whole)."""
    words: list[str] = []
    for line in lines:
        words += line.split(maxsplit=limit - len(words))[: limit - len(words)]
        if len(words) >= limit:
            break
    return words


@dataclass(frozen=True, slots=True)
class WordChange:
    """Words removed and added at one place, with a few words of context either side."""

    before: str
    removed: str
    added: str
    after: str

    def shown(self) -> str:
        """As ``git diff --word-diff`` marks it: ``before [-removed-]{+added+} after``."""
        marked = (f"[-{self.removed}-]" if self.removed else "") + (
            f"{{+{self.added}+}}" if self.added else "")
        return " ".join(part for part in (self.before, marked, self.after) if part)


def _cut(text: str, budget: int) -> tuple[str, int, bool]:
    """``text`` within ``budget`` characters: (the text kept, the budget left, whether cut)."""
    kept = text[: max(budget, 0)]
    return kept, budget - len(kept), len(kept) < len(text)


def word_changes(
    old: Sequence[str],
    new: Sequence[str],
    *,
    max_changes: int | None = None,
    max_chars: int | None = None,
    context: int = WORD_CONTEXT,
) -> tuple[tuple[WordChange, ...], bool]:
    """Every place where the words of two versions' lines differ, numbers included, in order,
    each with ``context`` words either side; and whether the bounds (at most ``max_changes``
    places and ``max_chars`` characters of removed and added words) cut any."""
    a = _first_words(old, MAX_DIFF_ITEMS + 1)
    b = _first_words(new, MAX_DIFF_ITEMS + 1)
    # Past the bound the words are not compared, and the change says it was cut.
    truncated = len(a) > MAX_DIFF_ITEMS or len(b) > MAX_DIFF_ITEMS
    a, b = a[:MAX_DIFF_ITEMS], b[:MAX_DIFF_ITEMS]
    changes: list[WordChange] = []
    budget = max_chars
    differing = [code for code in bounded_opcodes(a, b) if code[0] != "equal"]
    for n, (_, i1, i2, j1, j2) in enumerate(differing):
        if (max_changes is not None and n >= max_changes) or (budget is not None and budget <= 0):
            truncated = True
            break
        removed, added = " ".join(a[i1:i2]), " ".join(b[j1:j2])
        if budget is not None:
            removed, budget, cut_removed = _cut(removed, budget)
            added, budget, cut_added = _cut(added, budget)
            truncated |= cut_removed or cut_added
        changes.append(WordChange(
            " ".join(b[max(0, j1 - context) : j1]), removed, added,
            " ".join(b[j2 : j2 + context]),
        ))
    return tuple(changes), truncated


@dataclass(frozen=True, slots=True)
class LineChanges:
    """The lines a change added and removed, and its word-level changes, bounded for an
    event."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    truncated: bool
    words: tuple[WordChange, ...] = ()


def line_changes(
    old: Sequence[str],
    new: Sequence[str],
    *,
    numbers: bool = False,
    max_lines: int = MAX_EVENT_LINES,
    max_chars: int = MAX_EVENT_CHARS,
    max_word_changes: int = MAX_EVENT_WORD_CHANGES,
    max_word_chars: int = MAX_EVENT_WORD_CHARS,
) -> LineChanges:
    """Added and removed lines (in order), at most ``max_lines`` and ``max_chars`` in all, and
    the word-level changes (``word_changes``, within their own bounds).

    Unless ``numbers`` (a URL watched exactly, for which a number is the change), lines that
    differ only in digits count as equal, unless nothing else differs: on a small page a
    changed number alone can move the fingerprint past the threshold, and an event that says
    "changed" with no line added or removed tells its reader nothing."""
    added: list[str] = []
    removed: list[str] = []
    budget = max_chars
    # Past the bound the lines are not compared, and the change says it was cut.
    truncated = len(old) > MAX_DIFF_ITEMS or len(new) > MAX_DIFF_ITEMS
    old, new = old[:MAX_DIFF_ITEMS], new[:MAX_DIFF_ITEMS]
    opcodes = bounded_opcodes(old, new)
    if not numbers:
        masked = bounded_opcodes([cosmetic_key(x) for x in old], [cosmetic_key(x) for x in new])
        if any(tag != "equal" for tag, *_ in masked):
            opcodes = masked
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        for target, lines in ((removed, old[i1:i2]), (added, new[j1:j2])):
            for line in lines:
                if len(added) + len(removed) >= max_lines or budget <= 0:
                    truncated = True
                    break
                kept, budget, cut = _cut(line, budget)
                truncated |= cut
                target.append(kept)
    words, words_truncated = word_changes(
        old, new, max_changes=max_word_changes, max_chars=max_word_chars
    )
    return LineChanges(tuple(added), tuple(removed), truncated or words_truncated, words)
