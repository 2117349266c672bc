"""The core's configuration objects, built from ``Settings``: the one source of every default.

The config dataclasses (``SchedulePolicy``, ``CircuitBreaker``, ``TransitionConfig``) hold no
defaults of their own, so that a default cannot drift from the setting that documents it.
The daemon, the simulator, the tests and the benches build them here; a caller that needs a
different value names it as an override. The pure core cannot import settings, so this lives
at the edge (the fetch limits and the worker's config are in ``crawler.daemon.config``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from crawler.core.backoff import CircuitBreaker
from crawler.core.patterns import global_filter
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import TransitionConfig
from crawler.settings import Settings

C = TypeVar("C")


def overridden(config: C, overrides: dict[str, Any]) -> C:
    """``config`` with the fields ``overrides`` names replaced (a dataclass instance)."""
    return replace(config, **overrides) if overrides else config  # type: ignore[type-var]


def default_settings() -> Settings:
    """Settings at their defaults, whatever ``CRAWLER_*`` variables are set (for the
    simulator, tests and benches, which must not depend on the caller's environment)."""
    return Settings.model_construct()


def circuit_breaker(settings: Settings) -> CircuitBreaker:
    return CircuitBreaker(
        base_seconds=settings.backoff_base_seconds,
        cap_seconds=settings.backoff_cap_seconds,
        failure_threshold=settings.breaker_failure_threshold,
        open_seconds=settings.breaker_open_seconds,
    )


def schedule_policy(settings: Settings, **overrides: Any) -> SchedulePolicy:
    """The revisit policy of the settings; ``overrides`` name SchedulePolicy fields."""
    policy = SchedulePolicy(
        mode=settings.schedule,
        default_interval_seconds=settings.default_interval,
        min_interval_seconds=settings.min_interval,
        max_interval_seconds=settings.max_interval,
        gone_checks_before_max_interval=settings.gone_checks,
        objective=settings.objective,
        beta_seconds=settings.beta_seconds,
        detect_periods=settings.detect_periods,
    )
    return overridden(policy, overrides)


def transition_config(
    settings: Settings, schedule: SchedulePolicy | None = None, **overrides: Any
) -> TransitionConfig:
    """One fetch's transition policy; ``schedule`` defaults to the settings' policy."""
    config = TransitionConfig(
        simhash_threshold=settings.simhash_threshold,
        max_outlinks=settings.max_outlinks,
        max_depth=settings.max_depth,
        breaker=circuit_breaker(settings),
        schedule=schedule if schedule is not None else schedule_policy(settings),
        url_filter=global_filter(settings.include, settings.exclude),
    )
    return overridden(config, overrides)
