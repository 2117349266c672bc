"""Settings are the one source of every default: each config object built from the default
settings holds exactly the settings' defaults, and declares no defaults of its own."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from crawler.config import circuit_breaker, default_settings, schedule_policy, transition_config
from crawler.core.backoff import CircuitBreaker
from crawler.core.planning import PlannerInputs
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import TransitionConfig
from crawler.daemon.config import fetch_limits, planner_inputs, worker_config
from crawler.daemon.worker import WorkerConfig
from crawler.net.fetch import FetchLimits
from crawler.settings import Settings

# Each config field and the setting it comes from.
SOURCES: dict[type[Any], dict[str, str]] = {
    SchedulePolicy: {
        "mode": "schedule",
        "default_interval_seconds": "default_interval",
        "min_interval_seconds": "min_interval",
        "max_interval_seconds": "max_interval",
        "gone_checks_before_max_interval": "gone_checks",
        "objective": "objective",
        "beta_seconds": "beta_seconds",
        "detect_periods": "detect_periods",
    },
    CircuitBreaker: {
        "base_seconds": "backoff_base_seconds",
        "cap_seconds": "backoff_cap_seconds",
        "failure_threshold": "breaker_failure_threshold",
        "open_seconds": "breaker_open_seconds",
    },
    FetchLimits: {
        "connect_timeout": "connect_timeout",
        "total_timeout": "total_timeout",
        "first_byte_timeout": "first_byte_timeout",
        "max_body_bytes": "max_body_bytes",
        "max_redirects": "max_redirects",
        "max_url_length": "max_url_length",
    },
    TransitionConfig: {
        "simhash_threshold": "simhash_threshold",
        "max_outlinks": "max_outlinks",
        "max_depth": "max_depth",
    },
    PlannerInputs: {
        "budget_per_day": "budget_per_day",
        "concurrency": "concurrency",
        "politeness_delay": "politeness_delay",
        "default_interval_seconds": "default_interval",
        "sample_urls": "planner_sample_urls",
    },
    WorkerConfig: {
        "concurrency": "concurrency",
        "claim_batch_hosts": "claim_batch_hosts",
        "claim_urls_per_host": "claim_urls_per_host",
        "lease_seconds": "lease_seconds",
        "poll_interval": "poll_interval",
        "politeness_delay": "politeness_delay",
        "simhash_threshold": "simhash_threshold",
        "max_crawl_delay": "max_crawl_delay",
        "robots_cache_seconds": "robots_cache_seconds",
        "max_outlinks": "max_outlinks",
        "max_depth": "max_depth",
    },
}
# Fields that are not settings: the planner's state, the daemon's identity, nested configs
# (checked on their own), and values derived from settings (url_filter: CRAWLER_INCLUDE and
# CRAWLER_EXCLUDE, compiled).
NOT_SETTINGS: dict[type[Any], set[str]] = {
    SchedulePolicy: {"mu", "prior", "host_priors"},
    CircuitBreaker: set(),
    FetchLimits: set(),
    TransitionConfig: {"breaker", "schedule", "url_filter"},
    PlannerInputs: {"heartbeat_seconds"},
    WorkerConfig: {"owner", "robots_token", "breaker", "limits", "schedule", "url_filter"},
}


def built() -> dict[type[Any], object]:
    settings = default_settings()
    worker = worker_config(settings, "owner")
    return {
        SchedulePolicy: schedule_policy(settings),
        CircuitBreaker: circuit_breaker(settings),
        FetchLimits: fetch_limits(settings),
        TransitionConfig: transition_config(settings),
        PlannerInputs: planner_inputs(settings),
        WorkerConfig: worker,
    }


def setting_default(name: str) -> object:
    return Settings.model_fields[name].get_default(call_default_factory=True)


@pytest.mark.parametrize("config_type", list(SOURCES), ids=lambda t: t.__name__)
def test_built_config_holds_the_settings_defaults(config_type: type[Any]) -> None:
    config = built()[config_type]
    for field, setting in SOURCES[config_type].items():
        assert getattr(config, field) == setting_default(setting), (field, setting)


@pytest.mark.parametrize("config_type", list(SOURCES), ids=lambda t: t.__name__)
def test_every_field_is_a_setting_or_named_as_not_one(config_type: type[Any]) -> None:
    names = {f.name for f in dataclasses.fields(config_type)}
    assert names == set(SOURCES[config_type]) | NOT_SETTINGS[config_type]


@pytest.mark.parametrize("config_type", list(SOURCES), ids=lambda t: t.__name__)
def test_no_setting_has_a_second_default(config_type: type[Any]) -> None:
    with_default = {
        f.name
        for f in dataclasses.fields(config_type)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    assert with_default <= NOT_SETTINGS[config_type]


def test_nested_configs_come_from_the_same_settings() -> None:
    configs = built()
    worker = configs[WorkerConfig]
    assert isinstance(worker, WorkerConfig)
    assert worker.breaker == configs[CircuitBreaker]
    assert worker.limits == configs[FetchLimits]
    assert worker.schedule == configs[SchedulePolicy]
    assert worker.transition_config() == configs[TransitionConfig]


def test_defaults_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLER_MIN_INTERVAL", "7")
    assert schedule_policy(default_settings()).min_interval_seconds == setting_default(
        "min_interval"
    )
