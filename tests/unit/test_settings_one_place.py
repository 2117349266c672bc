"""Each setting in one place: components read ``Settings`` itself, never a copy of its fields,
so a setting is declared in crawler/settings.py and read where it is used."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import crawler
from crawler.core.schedule import SchedulePolicy
from crawler.daemon.follow import PlanFollower
from crawler.daemon.worker import Worker
from crawler.settings import Settings, default_settings


def setting_default(name: str) -> object:
    return Settings.model_fields[name].get_default(call_default_factory=True)


def test_the_schedule_policy_is_the_settings_and_the_plan() -> None:
    """The settings by reference; beside them only what the planner changes at run time."""
    names = {f.name for f in dataclasses.fields(SchedulePolicy)}
    assert names == {"settings", "mu", "prior", "host_priors"}


def test_the_worker_and_the_plan_follower_hold_the_settings_themselves() -> None:
    settings = default_settings(concurrency=3)
    worker = Worker(settings, "me", None, None, None)
    assert worker.settings is settings
    assert worker.schedule().settings is settings
    follower = PlanFollower(None, settings, "me")  # type: ignore[arg-type]
    assert follower.schedule.settings is settings


def test_no_dataclass_copies_settings_field_by_field() -> None:
    """A class holding three or more fields named as settings is a copy of them: the next
    setting would have to be added to it too."""
    import importlib
    import pkgutil

    copies = []
    for info in pkgutil.walk_packages(crawler.__path__, "crawler."):
        if info.name.startswith(("crawler.demo", "crawler.__main__")):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, dataclasses.is_dataclass):
            if cls.__module__ != info.name:
                continue
            shared = {f.name for f in dataclasses.fields(cls)} & set(Settings.model_fields)
            if len(shared) >= 3:
                copies.append((cls.__qualname__, sorted(shared)))
    assert copies == []


def test_settings_are_frozen() -> None:
    """Every component sees the values it was started with."""
    with pytest.raises(ValueError, match="frozen"):
        default_settings().concurrency = 1


def test_defaults_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLER_MIN_INTERVAL", "7")
    assert default_settings().min_interval == setting_default("min_interval")
    assert default_settings(min_interval=9.0).min_interval == 9.0
