"""`crawler sites`, for sites read through their sitemaps and feeds: each site's
files, when each was read and is read next, and how many URLs it listed, added and dropped
at its last change, with the site's URLs no sitemap lists any more."""

from __future__ import annotations

from typing import Any

# The columns `crawler sites` prints for each file, in order.
COLUMNS = ("url", "kind", "source", "read_at", "status", "listed", "added", "dropped",
           "changed_at", "next_read_at", "problem")


def problem(sitemap: dict[str, Any]) -> str | None:
    """Why a file was not read whole, in a few words."""
    parts = []
    if sitemap["error"]:
        parts.append(str(sitemap["error"])[:60])
    if sitemap["cut"]:
        parts.append(f"cut at {sitemap['cut']}")
    if sitemap["repaired"]:
        parts.append(f"{sitemap['repaired']} bad bytes")
    return "; ".join(parts) or None


def render(sites: list[dict[str, Any]], table: Any) -> str:
    """The text of each site's files (``table``: the CLI's table printer)."""
    blocks = []
    for site in sites:
        rows = [{**s, "problem": problem(s)} for s in site["sitemaps"]]
        blocks.append(f"sitemaps of {site['origin']} ({site['unlisted']} URLs no longer "
                      f"listed)\n{table(rows, COLUMNS)}")
    return "\n\n".join(blocks)
