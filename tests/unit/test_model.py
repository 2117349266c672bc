"""UrlRecord mechanics: the fast copy and the fast constructor build exactly what
dataclasses.replace and the dataclass's own __init__ build."""

from __future__ import annotations

import dataclasses

import pytest

from crawler.core.estimate import ChangeHistory, LastModifiedHistory
from crawler.core.model import UrlRecord, UrlState, new_record, replace_record
from crawler.core.periodic import PeriodicModel


def _every_field_set() -> UrlRecord:
    """A record whose every field differs from its default, so a dropped field shows."""
    record = UrlRecord(
        url_id=7,
        url="https://example.test/a",
        host_id=3,
        state=UrlState.ACTIVE,
        importance=2.5,
        last_fetched_at=1000.0,
        last_status=200,
        last_simhash=12345,
        last_content_hash=b"\x01\x02",
        etag='"e"',
        last_modified=900.0,
        fetch_count=4,
        change_count=2,
        consecutive_failures=1,
        history=ChangeHistory((1.0, 2.0), 3.0, 4),
        change_rate_per_day=0.25,
        change_brackets_days=(1.0, 2.0),
        periodic=PeriodicModel(period_days=1.0, phase_days=0.25, jitter_days=0.01, strength=9.0),
        site_id=9,
        depth=2,
        last_modified_history=LastModifiedHistory(2, 1, 5.0),
        last_modified_evidence_days=(0.5, 1.0),
        fingerprint_region="r",
        out_links_read=True,
        exact=True,
        last_text_hash=b"\x03",
        own_min_interval_seconds=600.0,
        own_max_interval_seconds=3600.0,
        fetch_windows="Mon-Fri 08:00-18:00",
    )
    defaults = UrlRecord(url_id=0, url="")
    for f in dataclasses.fields(UrlRecord):
        if f.name == "region":
            continue
        assert getattr(record, f.name) != getattr(defaults, f.name), f.name
    return record


def test_replace_record_matches_dataclasses_replace_on_every_field() -> None:
    record = _every_field_set()
    assert replace_record(record) == record
    assert replace_record(record) is not record
    changes = {
        "state": UrlState.GONE,
        "change_rate_per_day": 1.5,
        "history": ChangeHistory((4.0,), 1.0, 2),
        "fetch_count": 5,
        "periodic": None,
    }
    copy = replace_record(record, **changes)
    expected = dataclasses.replace(record, **changes)  # type: ignore[arg-type]
    assert copy == expected
    assert hash(copy) == hash(expected)
    for f in dataclasses.fields(UrlRecord):
        assert getattr(copy, f.name) == getattr(expected, f.name), f.name
    assert record.state == UrlState.ACTIVE  # the original is untouched


def test_replace_record_keeps_the_record_frozen_and_rejects_unknown_fields() -> None:
    copy = replace_record(_every_field_set(), change_rate_per_day=None)
    assert copy.change_rate_per_day is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.fetch_count = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        replace_record(copy, no_such_field=1)


def test_url_record_has_no_post_init_for_the_fast_copy_to_skip() -> None:
    """replace_record fills the slots without calling __init__: were UrlRecord to gain a
    __post_init__ (validation, derived fields), the copy would silently skip it."""
    assert not hasattr(UrlRecord, "__post_init__")


def test_the_transitions_rate_copy_gives_the_value_dataclasses_would() -> None:
    """The transition's last copy (the rate filled in) gives the value the copy would have."""
    record = _every_field_set()
    fresh = replace_record(record)
    filled = replace_record(fresh, change_rate_per_day=2.25)
    assert filled is not fresh
    assert filled == dataclasses.replace(record, change_rate_per_day=2.25)
    assert record.change_rate_per_day != 2.25  # the original is untouched


def test_new_record_matches_the_dataclass_constructor_on_every_field() -> None:
    record = _every_field_set()
    values = [getattr(record, f.name) for f in dataclasses.fields(UrlRecord)]
    built = new_record(*values)
    assert type(built) is UrlRecord
    assert built == UrlRecord(*values)
    assert hash(built) == hash(record)
    for f in dataclasses.fields(UrlRecord):
        assert getattr(built, f.name) is getattr(record, f.name), f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.url = "https://example.test/b"  # type: ignore[misc]
    with pytest.raises(TypeError):  # every field, no more, no fewer
        new_record(*values[:-1])
    with pytest.raises(TypeError):
        new_record(*values, None)
