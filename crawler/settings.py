"""One typed settings object, read from ``CRAWLER_*`` environment variables.

Every CLI option that overrides a setting names its variable in ``--help``; the README's
configuration reference is generated from this class so that it cannot drift.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "CRAWLER_"


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("crawler", appauthor=False))


class Settings(BaseSettings):
    """Runtime configuration. Durations are seconds unless the name says otherwise."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    # --- database -------------------------------------------------------------------------
    database_url: str | None = Field(
        None,
        description="PostgreSQL URL (postgresql://user@host/db). Unset: the embedded server.",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Where the embedded PostgreSQL keeps its data (survives restarts).",
    )
    db_pool_size: int = Field(10, ge=1, description="Connections in the daemon's pool.")

    # --- daemon ---------------------------------------------------------------------------
    concurrency: int = Field(32, ge=1, description="Hosts fetched concurrently per daemon.")
    claim_batch_hosts: int = Field(
        16, ge=1, description="Hosts claimed per round trip to the frontier."
    )
    claim_urls_per_host: int = Field(
        16, ge=1, description="Most due URLs of one host claimed together."
    )
    lease_seconds: float = Field(
        300.0, gt=0, description="Lease on claimed hosts and URLs; a crashed daemon's expire."
    )
    poll_interval: float = Field(
        1.0, gt=0, description="Longest sleep when nothing is due."
    )
    shutdown_grace: float = Field(
        10.0, ge=0, description="On SIGTERM, how long in-flight fetches may finish."
    )

    # --- politeness -----------------------------------------------------------------------
    politeness_delay: float = Field(
        1.0, ge=0, description="Minimum delay between two requests to one host."
    )
    max_crawl_delay: float = Field(
        30.0, ge=0, description="Highest robots.txt Crawl-delay honoured; above it, this."
    )
    robots_cache_seconds: float = Field(
        86400.0, gt=0, le=86400.0,
        description="How long a robots.txt is trusted (RFC 9309: at most 24 h).",
    )
    backoff_cap_seconds: float = Field(
        86400.0, gt=0, description="Cap on Retry-After and on a host's backoff."
    )
    breaker_failure_threshold: int = Field(
        5, ge=1, description="Consecutive host failures (5xx, timeouts) that open its breaker."
    )
    breaker_open_seconds: float = Field(
        300.0, gt=0, description="First open period of a host's circuit breaker (doubles)."
    )
    user_agent: str = Field(
        "crawler/0.1 (+https://github.com/crawler-project/crawler)",
        description="User-Agent header sent with every request.",
    )

    # --- fetching -------------------------------------------------------------------------
    connect_timeout: float = Field(10.0, gt=0, description="TCP/TLS connect timeout.")
    total_timeout: float = Field(30.0, gt=0, description="Whole-request timeout.")
    first_byte_timeout: float = Field(
        15.0, gt=0, description="Longest wait for the first byte, and any silence in a body."
    )
    max_body_bytes: int = Field(
        10 * 1024 * 1024, gt=0, description="Body size cap; longer pages are truncated."
    )
    max_redirects: int = Field(5, ge=0, le=20, description="Redirect hops followed per fetch.")
    max_url_length: int = Field(
        2083, ge=16, description="Longer URLs are refused (outcome blocked, url_too_long)."
    )
    max_outlinks: int = Field(
        1000, ge=0, description="Out-links read per page of a windowed site (trap bound)."
    )
    max_depth: int = Field(
        16, ge=1, description="Deepest BFS level a page window discovers."
    )
    allow_networks: list[str] = Field(
        default_factory=list,
        description="CIDRs the crawler may connect to despite SSRF protection (JSON list).",
    )

    # --- change detection and scheduling --------------------------------------------------
    simhash_threshold: int = Field(
        6, ge=1, le=64, description="Simhash bits that must differ for a change."
    )
    default_interval: float = Field(
        86400.0, gt=0, description="Revisit interval of the uniform policy, seconds."
    )
    min_interval: float = Field(60.0, gt=0, description="Shortest revisit interval, seconds.")
    max_interval: float = Field(
        30 * 86400.0, gt=0, description="Longest revisit interval, seconds."
    )
    schedule: Literal["optimal", "uniform"] = Field(
        "optimal",
        description="Revisit policy: the Lagrange optimum for the budget, or one fixed interval.",
    )
    planner_interval: float = Field(
        300.0, gt=0, description="How often the planner re-solves μ and the prior, seconds."
    )
    gone_checks: int = Field(
        3, ge=1, description="Consecutive 404/410 answers after which a page is checked only "
        "at the maximum interval."
    )
    budget_per_day: float | None = Field(
        None, gt=0, description="Fetches per day the planner spends. Unset: from politeness."
    )
    objective: Literal["freshness", "beta_currency", "harmonic", "age"] = Field(
        "freshness", description="What the planner maximises."
    )
    beta_seconds: float = Field(
        86400.0, ge=0, description="Grace period β of (α, β)-currency, seconds."
    )

    # --- metrics --------------------------------------------------------------------------
    metrics_host: str = Field("127.0.0.1", description="Address of the /metrics server.")
    metrics_port: int = Field(
        9310, ge=0, le=65535, description="Port of the /metrics server (0: any free port)."
    )

    # --- logging --------------------------------------------------------------------------
    log_level: str = Field("INFO", description="Python log level.")
    log_json: bool = Field(False, description="JSON-lines logs instead of readable text.")


def env_name(field: str) -> str:
    """The environment variable behind a settings field."""
    return ENV_PREFIX + field.upper()
