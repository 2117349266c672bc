"""Visible text as lines, and the differences between two versions of it.

Pure: ``crawler get --text``, ``crawler diff`` and the change events all call these on text
recomputed from the stored body by the same parser that computed the fingerprint
(``crawler.core.extract.parse_page``), so what a user diffs is what the simhash saw.

Every diff here is bounded in time: the common head and tail are skipped in linear time (a
price changed on a long page leaves a middle of a few words), and a middle too long for
``difflib`` to align within bounds is shown as one replaced block. Either way every line and
word that differs is shown; only the alignment inside a huge rewrite is coarser.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from crawler.core.extract import parse_page
from crawler.core.observe import is_html
from crawler.core.region import Region

# Bounds on the lines an event carries: a rewritten page must not make a megabyte event.
MAX_EVENT_LINES: Final = 50
MAX_EVENT_CHARS: Final = 8000
# Bounds on the word changes an event carries, and the words of context around each.
MAX_EVENT_WORD_CHANGES: Final = 20
MAX_EVENT_WORD_CHARS: Final = 4000
WORD_CONTEXT: Final = 5
# The longest middle (items of both versions after the common head and tail) that difflib
# aligns: past it, its cost (quadratic at worst) would be seconds.
MAX_ALIGNED_ITEMS: Final = 20_000
# difflib's own threshold for its popular-element heuristic; below it autojunk does nothing.
_AUTOJUNK_FROM: Final = 200

Opcode = tuple[str, int, int, int, int]


def text_lines(
    body: bytes, content_type: str | None, region: Region | None = None
) -> list[str]:
    """The visible text of a stored body, one line per source line, whitespace collapsed.

    The fingerprint's features ignore whitespace, so these lines carry exactly its words; the
    line breaks only make a diff readable. Non-HTML bodies are decoded as UTF-8 text. With the
    URL's watched ``region``, only its text, as the fingerprint saw it.
    """
    return page_text(body, content_type, region)[0]


def page_text(
    body: bytes, content_type: str | None, region: Region | None = None
) -> tuple[list[str], int | None]:
    """``text_lines`` and the simhash of the same text (None for a body that is not HTML),
    from one parse: what ``crawler diff`` shows and the distance it states."""
    if is_html(content_type, body):
        page = parse_page(body, content_type, region=region)
        raw, simhash = page.raw_text, page.simhash
    else:
        raw, simhash = body.decode("utf-8", errors="replace"), None
    lines = (" ".join(line.split()) for line in raw.splitlines())
    return [line for line in lines if line], simhash


_DIGITS = re.compile(r"\d+")


def cosmetic_key(line: str) -> str:
    """What a line is compared by in a simhash-rule event: its digits masked, so that a line
    whose only edit is a number (a "rendered at" time, a visit counter) counts as unchanged."""
    return _DIGITS.sub("#", line)


def bounded_opcodes(old: Sequence[Hashable], new: Sequence[Hashable]) -> list[Opcode]:
    """``difflib.SequenceMatcher(a=old, b=new).get_opcodes()``, within bounds: the common
    head and tail are found in linear time, and only the middle between them is aligned (as
    one replaced block when longer than ``MAX_ALIGNED_ITEMS``). Blocks tagged equal are
    equal, and every differing item is in a block that is not."""
    n, m = len(old), len(new)
    head = 0
    while head < n and head < m and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and old[n - 1 - tail] == new[m - 1 - tail]:
        tail += 1
    codes: list[Opcode] = []
    if head:
        codes.append(("equal", 0, head, 0, head))
    a, b = old[head : n - tail], new[head : m - tail]
    if a or b:
        if len(a) + len(b) > MAX_ALIGNED_ITEMS:
            codes.append(("replace" if a and b else "delete" if a else "insert",
                          head, n - tail, head, m - tail))
        else:
            matcher = difflib.SequenceMatcher(
                a=a, b=b, autojunk=len(a) + len(b) >= _AUTOJUNK_FROM
            )
            codes += [(tag, i1 + head, i2 + head, j1 + head, j2 + head)
                      for tag, i1, i2, j1, j2 in matcher.get_opcodes()]
    if tail:
        codes.append(("equal", n - tail, n, m - tail, m))
    return codes


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
    a = [word for line in old for word in line.split()]
    b = [word for line in new for word in line.split()]
    changes: list[WordChange] = []
    budget = max_chars
    truncated = False
    differing = [code for code in bounded_opcodes(a, b) if code[0] != "equal"]
    for n, (_, i1, i2, j1, j2) in enumerate(differing):
        if (max_changes is not None and n >= max_changes) or (budget is not None
                                                               and budget <= 0):
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
    the word-level changes (``word_changes``, every word that differs, numbers included,
    within their own bounds).

    Unless ``numbers`` (a URL watched exactly, for which a number is the change), lines that
    differ only in digits count as equal, unless nothing else differs: an event is written
    for a change the fingerprint saw, and on a small page a changed number alone can move it
    past the threshold, so then the numbers are the change, and shown (an event that says
    "changed" with no line added or removed tells its reader nothing)."""
    added: list[str] = []
    removed: list[str] = []
    budget = max_chars
    truncated = False
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
                cut = line[:budget]
                truncated |= len(cut) < len(line)
                budget -= len(cut)
                target.append(cut)
    words, words_truncated = word_changes(
        old, new, max_changes=max_word_changes, max_chars=max_word_chars
    )
    return LineChanges(tuple(added), tuple(removed), truncated or words_truncated, words)
