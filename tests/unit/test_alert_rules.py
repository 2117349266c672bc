"""Which failures raise ``failing`` / ``recovered`` (crawler.core.alerts), and the signature of
a delivery (crawler.core.signing) against the Standard Webhooks specification's example."""

from __future__ import annotations

import pytest

from crawler.core.alerts import HOST, AlertRow, to_raise, to_recover
from crawler.core.signing import secret_key, signature


def row(url_id: int, failures: int, raised: bool = False) -> AlertRow:
    return AlertRow(url_id, failures, 0.0, raised, "http://a.example/x", "http_500")


def test_the_host_alone_is_raised_when_both_reach_the_threshold() -> None:
    assert to_raise([row(HOST, 3), row(7, 3)], 3) == [row(HOST, 3)]


def test_a_url_waits_while_its_host_is_raised_and_not_after() -> None:
    assert to_raise([row(HOST, 9, raised=True), row(7, 3)], 3) == []
    assert to_raise([row(HOST, 1), row(7, 4)], 3) == [row(7, 4)]
    assert to_raise([row(HOST, 1), row(7, 2)], 3) == []
    assert to_raise([row(HOST, 4, raised=True)], 3) == []


def test_recovered_once_per_fetch_and_only_for_raised_runs() -> None:
    assert to_recover([row(HOST, 5, raised=True), row(7, 5, raised=True)]) == [
        row(HOST, 5, raised=True)]
    assert to_recover([row(HOST, 2), row(7, 5, raised=True)]) == [row(7, 5, raised=True)]
    assert to_recover([row(HOST, 2), row(7, 2)]) == []


def test_signature_matches_the_specifications_example() -> None:
    # The example of the Standard Webhooks specification (spec/standard-webhooks.md).
    key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    body = b'{"test": 2432232314}'
    assert signature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == (
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_not base64!", "whsec_c2hvcnQ="])
def test_a_malformed_or_short_secret_is_refused(secret: str) -> None:
    with pytest.raises(ValueError, match="whsec_"):
        secret_key(secret)
