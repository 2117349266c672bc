"""The watched region of a page: the part whose visible text counts (changedetection.io's
"CSS/JSONPath filter" and "remove elements").

``watch`` keeps only the elements a CSS selector matches; ``ignore`` removes the elements it
matches (a navigation bar, an advertisement, a clock). The fingerprint, the change decision and
the diff all read the same restricted text. Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from selectolax.lexbor import LexborHTMLParser, SelectolaxError

MAX_SELECTOR_CHARS: Final = 1000


class SelectorError(ValueError):
    """A CSS selector the parser cannot use; the message names it."""


@dataclass(frozen=True, slots=True)
class Region:
    """Which elements of a page count: only ``watch``'s matches, minus ``ignore``'s."""

    watch: str | None = None
    ignore: str | None = None

    @property
    def whole_page(self) -> bool:
        return self.watch is None and self.ignore is None

    @property
    def key(self) -> str:
        """A stable text form, stored beside the fingerprint computed under it: when the key
        stored with a URL's fingerprint differs from its region's, the fingerprint is stale.
        The whole page is ``""``, the value every fingerprint taken before regions existed has."""
        return "" if self.whole_page else json.dumps([self.watch, self.ignore])

    def describe(self) -> str:
        """One line for ``crawler show``."""
        if self.whole_page:
            return "whole page"
        parts = (("watch", self.watch), ("ignore", self.ignore))
        return ", ".join(f"{name} {value}" for name, value in parts if value is not None)


WHOLE_PAGE: Final = Region()


def effective_region(
    watch: str | None, ignore: str | None, site_watch: str | None, site_ignore: str | None
) -> Region:
    """A URL's own region when it has one, else its window's (the site's), else the page."""
    if watch is not None or ignore is not None:
        return Region(watch, ignore)
    if site_watch is None and site_ignore is None:
        return WHOLE_PAGE  # nearly every URL: no new object per claimed row
    return Region(site_watch, site_ignore)


def checked_selector(selector: str | None, option: str) -> str | None:
    """``selector`` stripped, or None when empty; raises ``SelectorError`` naming ``option``
    when the CSS parser refuses it."""
    if selector is None or not selector.strip():
        return None
    selector = selector.strip()
    if len(selector) > MAX_SELECTOR_CHARS:
        raise SelectorError(f"{option}: selector longer than {MAX_SELECTOR_CHARS} characters")
    try:
        LexborHTMLParser("<p></p>").css(selector)
    except SelectolaxError:
        raise SelectorError(f"{option}: not a valid CSS selector: {selector!r}") from None
    return selector
