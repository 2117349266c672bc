"""Settings that cannot work together are refused with the reason."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from crawler.settings import Settings


def test_a_lease_shorter_than_a_request_is_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="CRAWLER_LEASE_SECONDS=10 is too short"):
        Settings(lease_seconds=10)  # default request timeout: 30 s


def test_a_short_lease_with_short_requests_is_accepted() -> None:
    assert Settings(lease_seconds=15, total_timeout=5).lease_seconds == 15
