"""The daemon's configuration objects, built from ``Settings`` (no defaults of their own).

The core's objects (schedule policy, circuit breaker, transition) are built in
``crawler.config``, which the simulator may import; these need the network layer.
"""

from __future__ import annotations

from typing import Any

from crawler.config import circuit_breaker, overridden, schedule_policy
from crawler.core.patterns import global_filter
from crawler.core.planning import PlannerInputs
from crawler.core.robots import product_token
from crawler.daemon.worker import WorkerConfig
from crawler.net.fetch import FetchLimits
from crawler.settings import Settings

# How often a daemon refreshes its row in ``daemons`` (the planner counts live daemons).
HEARTBEAT_SECONDS = 10.0


def fetch_limits(settings: Settings, **overrides: Any) -> FetchLimits:
    """Per-request limits of the settings; ``overrides`` name FetchLimits fields."""
    limits = FetchLimits(
        connect_timeout=settings.connect_timeout,
        total_timeout=settings.total_timeout,
        first_byte_timeout=settings.first_byte_timeout,
        max_body_bytes=settings.max_body_bytes,
        max_redirects=settings.max_redirects,
        max_url_length=settings.max_url_length,
    )
    return overridden(limits, overrides)


def worker_config(settings: Settings, owner: str) -> WorkerConfig:
    return WorkerConfig(
        owner=owner,
        concurrency=settings.concurrency,
        claim_batch_hosts=settings.claim_batch_hosts,
        claim_urls_per_host=settings.claim_urls_per_host,
        lease_seconds=settings.lease_seconds,
        poll_interval=settings.poll_interval,
        politeness_delay=settings.politeness_delay,
        simhash_threshold=settings.simhash_threshold,
        robots_token=product_token(settings.user_agent),
        max_crawl_delay=settings.max_crawl_delay,
        robots_cache_seconds=settings.robots_cache_seconds,
        breaker=circuit_breaker(settings),
        max_outlinks=settings.max_outlinks,
        max_depth=settings.max_depth,
        limits=fetch_limits(settings),
        schedule=schedule_policy(settings),
        url_filter=global_filter(settings.include, settings.exclude),
    )


def planner_inputs(settings: Settings, **overrides: Any) -> PlannerInputs:
    """What the planner reads from the settings; ``overrides`` name PlannerInputs fields."""
    inputs = PlannerInputs(
        budget_per_day=settings.budget_per_day,
        concurrency=settings.concurrency,
        politeness_delay=settings.politeness_delay,
        default_interval_seconds=settings.default_interval,
        sample_urls=settings.planner_sample_urls,
        heartbeat_seconds=HEARTBEAT_SECONDS,
    )
    return overridden(inputs, overrides)
