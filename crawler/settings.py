"""One typed settings object, read from ``CRAWLER_*`` environment variables.

Every CLI option that overrides a setting names its variable in ``--help``;
docs/CONFIGURATION.md's reference is generated from this class so that it cannot drift.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from crawler.core.links import MAX_URL_LENGTH
from crawler.core.patterns import PatternError, compile_pattern
from crawler.core.signing import secret_key

ENV_PREFIX = "CRAWLER_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Variables of the test suite and the benches, read by them and not by any command.
NOT_SETTINGS_PREFIXES = ("CRAWLER_TEST_", "CRAWLER_BENCH_")
# Time a host lease keeps free after a request's timeout, to record the fetch.
LEASE_MARGIN_SECONDS = 5.0


def split_list(value: Any) -> Any:
    """A list setting (variable or CLI option) from comma-separated text or a JSON list;
    other values pass through."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            decoded = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"not a JSON list: {error.msg}") from None
        if not isinstance(decoded, list) or not all(isinstance(v, str) for v in decoded):
            raise ValueError("a JSON value must be a list of strings")
        return [v.strip() for v in decoded if v.strip()]
    return [part.strip() for part in text.split(",") if part.strip()]


CommaList = Annotated[list[str], NoDecode, BeforeValidator(split_list)]


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("crawler", appauthor=False))


class Settings(BaseSettings):
    """Runtime configuration. Durations are seconds unless the name says otherwise.

    Components take this object (never copies of its fields); frozen, so that every holder
    sees the same values.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

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
    pgbouncer: bool = Field(
        False,
        description="The database URL points at PgBouncer in transaction pooling mode: no "
        "named prepared statements, no session state across transactions. Run migrations on a "
        "direct URL.",
    )

    # --- daemon ---------------------------------------------------------------------------
    processes: int | None = Field(
        None, ge=1,
        description="Fetch processes `crawler run` starts, sharing the frontier, one /metrics "
        "and one planner (unset: one per CPU, at most the container's CPU limit).",
    )
    concurrency: int = Field(
        32, ge=1, description="Hosts fetched concurrently per daemon (per fetch process)."
    )
    claim_batch_hosts: int = Field(
        16, ge=1, description="Hosts claimed per round trip to the frontier."
    )
    claim_urls_per_host: int = Field(
        16, ge=1, description="Most due URLs of one host claimed together."
    )
    lease_seconds: float = Field(
        300.0, gt=0, description="Lease on claimed hosts and URLs; a crashed daemon's expire."
    )
    poll_interval: float = Field(1.0, gt=0, description="Longest sleep when nothing is due.")
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
    backoff_base_seconds: float = Field(
        2.0, gt=0, description="First delay of a failing host's exponential backoff (doubles)."
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
        MAX_URL_LENGTH, ge=16,
        description="Longer URLs are refused (outcome blocked, url_too_long).",
    )
    max_outlinks: int = Field(
        1000, ge=0, description="Out-links read per page of a windowed site (trap bound)."
    )
    max_depth: int = Field(16, ge=1, description="Deepest BFS level a page window discovers.")
    allow_networks: CommaList = Field(
        default_factory=list,
        description="CIDRs the crawler may connect to despite SSRF protection, "
        "comma-separated (e.g. 127.0.0.0/8,10.1.0.0/16; a JSON list also works).",
    )
    include: CommaList = Field(
        default_factory=list,
        description="URL patterns (Python regular expressions, re.search on the whole URL) a "
        "URL must match one of to be seeded or discovered; empty: every URL. Comma-separated, "
        "or a JSON list when a pattern holds a comma.",
    )
    exclude: CommaList = Field(
        default_factory=list,
        description="URL patterns (Python regular expressions, re.search on the whole URL) "
        "that keep a URL from being seeded or discovered (e.g. \\.pdf$). Comma-separated, or "
        "a JSON list.",
    )
    keep_alive: bool = Field(
        True,
        description="Reuse one connection for a host's URLs within a lease (closed on any "
        "anomaly).",
    )
    ca_bundle: Path | None = Field(
        None,
        description="PEM file of extra trusted CA certificates for https, besides the system's.",
    )
    accept_language: str | None = Field(
        None, pattern=r"^[\x20-\x7e]+$",
        description="Accept-Language header sent with every request (e.g. en-US,en;q=0.8), so "
        "that a site that picks its language by the header serves the same one on every "
        "fetch. Unset: none is sent.",
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
    sitemap_max_interval: float = Field(
        86400.0, gt=0, description="Longest interval between two reads of a sitemap or feed, "
        "seconds: a file that never changes is still read this often for the URLs it adds "
        "(docs/SITEMAPS.md)."
    )
    hints: bool = Field(
        True, description="Take the dates sitemaps and feeds claim for their pages as evidence "
        "of changes, trusted per site as far as the fetches confirm them (docs/MODEL.md "
        "section 9). Off: the dates are not recorded; the files still add and unlist URLs. "
        "Pings follow CRAWLER_INDEXNOW."
    )
    schedule: Literal["optimal", "uniform"] = Field(
        "optimal",
        description="Revisit policy: the Lagrange optimum for the budget, or one fixed interval.",
    )
    detect_periods: bool = Field(
        True,
        description="Time fetches of pages found to change on a clock just after their tick.",
    )
    planner_interval: float = Field(
        300.0, gt=0, description="How often the planner re-solves μ and the prior, seconds."
    )
    planner_sample_urls: int = Field(
        100_000, ge=100, description="Live URLs the planner samples to solve μ and the prior "
        "(bounds a round's time and memory at any collection size)."
    )
    gone_checks: int = Field(
        3, ge=1, description="Consecutive 404/410 answers after which a page is checked only "
        "at the maximum interval."
    )
    budget_per_day: float | None = Field(
        None, gt=0,
        description="Fetches per day the planner spends. Unset: what uniform revisits at "
        "CRAWLER_DEFAULT_INTERVAL would spend (URLs × 86400 / interval), within politeness.",
    )
    objective: Literal["freshness", "beta_currency", "harmonic", "age"] = Field(
        "freshness", description="What the planner maximises."
    )
    beta_seconds: float = Field(
        86400.0, ge=0, description="Grace period β of (α, β)-currency, seconds."
    )

    # --- the collection (WARC storage and change events) ------------------------------------
    store_versions: bool = Field(
        True, description="Keep every fetched version as WARC records (off: fingerprints and "
        "change events only)."
    )
    warc_dir: Path | None = Field(
        None, description="Where WARC files are written. Unset: CRAWLER_DATA_DIR/warc."
    )
    warc_max_bytes: int = Field(
        1_000_000_000, ge=1, description="A WARC file is closed (and immutable) once it holds "
        "this many bytes; writing goes on in a new one."
    )
    warc_gzip_level: int = Field(
        6, ge=1, le=12, description="Compression level of each WARC record's gzip member "
        "(libdeflate, 1 to 12). On HTML, level 1 takes under half of level 6's CPU for files "
        "a tenth larger; above 6, files shrink a little for up to twice the CPU."
    )
    warc_fsync: bool = Field(
        True, description="fsync WARC records (one fsync shared by the fetches recorded "
        "together) before their index rows commit, so that a power loss never leaves an index "
        "row without its record. Off: records reach the disk when the OS writes them back."
    )
    webhook_url: str | None = Field(
        None, description="POST each change event as JSON here (at least once, in order per "
        "URL). Subject to the same SSRF policy as fetches. Unset: no webhook."
    )
    webhook_timeout: float = Field(10.0, gt=0, description="Timeout of one webhook POST.")
    webhook_max_backoff: float = Field(
        3600.0, gt=0, description="Longest wait between two attempts to deliver an event."
    )
    webhook_secret: str | None = Field(
        None, description="Sign each delivery with HMAC-SHA256 as Standard Webhooks do "
        "(webhook-id, webhook-timestamp and webhook-signature headers): whsec_ followed by the "
        "key in base64. Unset: deliveries are not signed."
    )
    webhook_lease: float = Field(
        15.0, gt=0, description="Lease of the one daemon delivering events; a daemon that "
        "stops renewing it (crashed, frozen) is taken over after this many seconds."
    )
    alert_after_failures: int = Field(
        3, ge=1, description="Raise a `failing` event after this many consecutive failed "
        "requests of a URL or of a host (DNS, TLS, timeouts, HTTP errors, robots.txt)."
    )

    # --- retention ------------------------------------------------------------------------
    observation_retention_days: float = Field(
        0.0, ge=0, description="Drop whole months of observations and change events older "
        "than this many days (monthly partitions; the WARC index is kept). 0: keep forever."
    )

    # --- metrics --------------------------------------------------------------------------
    metrics_host: str = Field("127.0.0.1", description="Address of the /metrics server.")
    metrics_port: int = Field(
        9310, ge=0, le=65535, description="Port of the /metrics server (0: any free port)."
    )
    indexnow: bool = Field(
        True, description="Accept IndexNow pings (GET and POST /indexnow) on the /metrics "
        "server: a ping whose key the site's key file confirms makes its URLs of a host of "
        "the collection due now (docs/PINGS.md). Off: /indexnow answers 404."
    )
    indexnow_pings_per_minute: float = Field(
        30.0, gt=0, description="IndexNow pings accepted per minute from one host, on "
        "average; more are answered 429."
    )
    indexnow_burst: int = Field(
        10, ge=1, description="IndexNow pings one host may send at once before "
        "CRAWLER_INDEXNOW_PINGS_PER_MINUTE applies."
    )

    # --- logging --------------------------------------------------------------------------
    log_level: str = Field(
        "INFO", description="Log level: DEBUG, INFO, WARNING, ERROR or CRITICAL."
    )
    log_json: bool = Field(False, description="JSON-lines logs instead of readable text.")
    log_fetches: bool = Field(
        False, description="Log one 'Crawled (200) <GET url> bytes seconds changed' line per "
        "fetch at INFO (otherwise at DEBUG).",
    )
    log_stats_interval: float = Field(
        60.0, ge=0, description="`crawler run` logs a line of figures (pages/min, changes, "
        "errors, URLs due, most overdue) this often, seconds; 0: never.",
    )

    @model_validator(mode="after")
    def _lease_fits_a_request(self) -> Settings:
        """A lease too short for one request and its recording would claim hosts and fetch
        nothing, silently: refuse it at start-up, with the reason."""
        needed = self.total_timeout + LEASE_MARGIN_SECONDS
        if self.lease_seconds <= needed:
            raise ValueError(
                f"CRAWLER_LEASE_SECONDS={self.lease_seconds:g} is too short: a host task "
                f"needs the request timeout (CRAWLER_TOTAL_TIMEOUT={self.total_timeout:g}) "
                f"plus {LEASE_MARGIN_SECONDS:g} s to record it, so more than {needed:g} s; "
                "raise the lease or lower the timeout"
            )
        return self

    @model_validator(mode="after")
    def _webhook_lease_fits_a_delivery(self) -> Settings:
        """The deliverer sends an event only while its lease outlasts the request: a lease
        shorter than that would deliver nothing, silently."""
        needed = self.webhook_timeout + 1.0  # crawler.daemon.webhook.LEASE_MARGIN_SECONDS
        if self.webhook_lease <= needed:
            raise ValueError(
                f"CRAWLER_WEBHOOK_LEASE={self.webhook_lease:g} is too short: a delivery needs "
                f"CRAWLER_WEBHOOK_TIMEOUT={self.webhook_timeout:g} plus 1 s to mark the event, "
                f"so more than {needed:g} s"
            )
        return self

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Settings:
        """A lower bound above its upper bound has no meaning the daemon could pick for it."""
        for low, high in (("min_interval", "max_interval"),
                          ("backoff_base_seconds", "backoff_cap_seconds")):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(
                    f"{env_name(low)}={getattr(self, low):g} is above "
                    f"{env_name(high)}={getattr(self, high):g}; lower the first or raise the "
                    "second"
                )
        return self

    @field_validator("webhook_secret")
    @classmethod
    def _valid_webhook_secret(cls, secret: str | None) -> str | None:
        if secret is not None:
            secret_key(secret)  # raises, saying what a secret looks like
        return secret

    @field_validator("log_level", mode="before")
    @classmethod
    def _known_log_level(cls, level: Any) -> Any:
        if not isinstance(level, str):
            return level
        name = level.strip().upper()
        if name not in LOG_LEVELS:
            raise ValueError(f"{level!r} is not a log level; levels: {', '.join(LOG_LEVELS)}")
        return name

    @field_validator("include", "exclude")
    @classmethod
    def _valid_patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                compile_pattern(pattern)
            except PatternError as error:
                raise ValueError(str(error)) from None
        return patterns

    @field_validator("allow_networks")
    @classmethod
    def _valid_networks(cls, networks: list[str]) -> list[str]:
        for cidr in networks:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not a CIDR network such as 127.0.0.0/8") from None
        return networks


def default_settings(**overrides: Any) -> Settings:
    """Settings at their defaults but for ``overrides``, whatever ``CRAWLER_*`` variables are
    set (for the simulator, tests and benches). Not validated: an override is trusted."""
    return Settings.model_construct(**overrides)


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def warc_dir(settings: Settings) -> Path:
    """The WARC directory in force (CRAWLER_WARC_DIR, else CRAWLER_DATA_DIR/warc)."""
    return settings.warc_dir if settings.warc_dir is not None else settings.data_dir / "warc"


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``CRAWLER_*`` variable that is no setting, naming the closest setting:
    pydantic-settings silently ignores a misspelled one."""
    import difflib

    known = [field.upper() for field in Settings.model_fields]
    warnings = []
    for name in sorted(environ):
        if (not name.startswith(ENV_PREFIX) or name.removeprefix(ENV_PREFIX) in known
                or name.startswith(NOT_SETTINGS_PREFIXES)):
            continue
        # Compared without the prefix every name shares, which would make any two look alike.
        close = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), known, n=1)
        hint = (f"did you mean {ENV_PREFIX}{close[0]}?" if close
                else "the settings are listed by crawler run --help")
        warnings.append(f"{name} is not a setting and is ignored ({hint})")
    return warnings
