"""Webhook signatures as the Standard Webhooks specification defines them.

Each delivery carries ``webhook-id`` (the event's id, the same on every retry, so that a
receiver dedupes on it), ``webhook-timestamp`` (Unix seconds when it was sent, which a receiver
compares with its clock to refuse replays) and ``webhook-signature``: ``v1,`` followed by the
base64 HMAC-SHA256, under the secret's key, of ``{id}.{timestamp}.{body}``. The secret is
``whsec_`` followed by the key in base64, as the specification's libraries take it; a secret
without the prefix is read as the base64 key itself, as they read it too.

Pure: the caller gives the time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

SECRET_PREFIX = "whsec_"
MIN_KEY_BYTES = 24  # the specification's secrets are 24 to 64 bytes


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_...`` secret; ValueError naming the expected form."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(
            f"a webhook secret is {SECRET_PREFIX} followed by at least {MIN_KEY_BYTES} random "
            f"bytes in base64, e.g. {SECRET_PREFIX}$(head -c 32 /dev/urandom | base64)"
        )
    return key


def signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header's value for one delivery."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signed_headers(key: bytes | None, message_id: str, timestamp: int,
                   body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of one delivery; the id and time alone without a key."""
    headers = {"webhook-id": message_id, "webhook-timestamp": str(timestamp)}
    if key is not None:
        headers["webhook-signature"] = signature(key, message_id, timestamp, body)
    return headers
