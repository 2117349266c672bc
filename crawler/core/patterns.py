"""URL patterns: which URLs may be seeded or discovered.

A pattern is a Python regular expression matched with ``re.search`` against the whole,
normalised URL (scheme, host, port, path and query), as Nutch's regex-urlfilter and
StormCrawler's RegexURLFilter do: ``\\.pdf$`` drops PDFs, ``^https://example\\.org/blog/``
keeps one section, ``[?&]sessionid=`` drops session URLs.

A filter has include and exclude patterns. A URL passes when it matches at least one include
pattern (or there are none) and no exclude pattern. Filters are layered: the global one
(``CRAWLER_INCLUDE`` / ``CRAWLER_EXCLUDE``) first, then a windowed site's own
(``crawler seed --window N --include P --exclude P``); the first that rejects a URL is named.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class PatternError(ValueError):
    """A pattern that is not a regular expression; the message names it, in one line."""


def compile_pattern(pattern: str, source: str = "") -> re.Pattern[str]:
    """``pattern`` compiled, or a PatternError naming ``source`` (e.g. ``--exclude``)."""
    try:
        return re.compile(pattern)
    except re.error as error:
        prefix = f"{source} pattern" if source else "pattern"
        raise PatternError(
            f"{prefix} {pattern!r} is not a regular expression: {error}"
        ) from None


@dataclass(frozen=True, slots=True)
class UrlFilter:
    """Include and exclude patterns from one source, each labelled for messages."""

    include: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...]
    include_label: str
    exclude_label: str

    def rejection(self, url: str) -> str | None:
        """None when ``url`` passes; else the label of what rejected it."""
        if self.include and not any(p.search(url) for p in self.include):
            return self.include_label
        if any(p.search(url) for p in self.exclude):
            return self.exclude_label
        return None

    @property
    def empty(self) -> bool:
        return not self.include and not self.exclude


def url_filter(
    include: Sequence[str],
    exclude: Sequence[str],
    *,
    include_label: str,
    exclude_label: str,
) -> UrlFilter:
    """A filter from pattern texts; a PatternError names the first bad one."""
    return UrlFilter(
        include=tuple(compile_pattern(p, include_label) for p in include),
        exclude=tuple(compile_pattern(p, exclude_label) for p in exclude),
        include_label=include_label,
        exclude_label=exclude_label,
    )


def global_filter(include: Sequence[str], exclude: Sequence[str]) -> UrlFilter:
    """The filter of the CRAWLER_INCLUDE / CRAWLER_EXCLUDE settings."""
    return url_filter(include, exclude, include_label="CRAWLER_INCLUDE",
                      exclude_label="CRAWLER_EXCLUDE")


# No patterns: every URL passes (the simulator's, whose pages link nowhere).
EVERY_URL = global_filter((), ())


def site_filter(include: Sequence[str], exclude: Sequence[str]) -> UrlFilter:
    """The filter of a windowed site's ``--include`` / ``--exclude`` patterns."""
    return url_filter(include, exclude, include_label="--include", exclude_label="--exclude")


def rejection(filters: Iterable[UrlFilter], url: str) -> str | None:
    """The label of the first filter (in order) that rejects ``url``, or None."""
    for f in filters:
        reason = f.rejection(url)
        if reason is not None:
            return reason
    return None


def partition(
    filters: Sequence[UrlFilter], urls: Iterable[str]
) -> tuple[list[str], dict[str, int]]:
    """The URLs every filter passes (in order), and how many each label rejected."""
    filters = [f for f in filters if not f.empty]
    if not filters:  # no patterns, the default: nothing to ask of each URL
        return list(urls), {}
    kept: list[str] = []
    rejected: dict[str, int] = {}
    for url in urls:
        reason = rejection(filters, url)
        if reason is None:
            kept.append(url)
        else:
            rejected[reason] = rejected.get(reason, 0) + 1
    return kept, rejected


def describe(include: Sequence[str], exclude: Sequence[str]) -> str:
    """Patterns in one line: ``+INCLUDE … -EXCLUDE …``, or '' when there are none."""
    return " ".join([f"+{p}" for p in include] + [f"-{p}" for p in exclude])
