"""Page fingerprints: a 64-bit Charikar simhash of text features, plus an exact content hash.

A page **changed** when the simhash of its new version is at Hamming distance >= k (k = 6)
from the stored one (Grimes & O'Brien 2008; docs/MODEL.md section 1). Bytes that changed while
the simhash moved by fewer than k bits are a *cosmetic* change (a timestamp, a counter):
recorded, not counted. A page watched exactly (``crawler watch --exact``) changed when the
hash of its visible text (``text_hash``) did, however few bits the simhash moved.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import numpy as np
import numpy.typing as npt

HashFunc = Callable[[bytes], bytes | int]
"""Feature hash: UTF-8 bytes -> digest (the last 8 bytes are used) or int (masked to 64 bits)."""

CHANGE_THRESHOLD_BITS: Final = 6  # Grimes & O'Brien 2008: "6 or more bits different"

_MASK64: Final = (1 << 64) - 1
_SIGN_BIT: Final = 1 << 63
# MurmurHash3 fmix64 finaliser constants (Appleby, MurmurHash3.cpp).
_FMIX_C1: Final = 0xFF51AFD7ED558CCD
_FMIX_C2: Final = 0xC4CEB9FE1A85EC53


def crc32_fmix64(data: bytes) -> bytes:
    """Default feature hash: 8 big-endian bytes of MurmurHash3's fmix64 applied to crc32(data).

    Not md5/blake2b: a hashlib object per token dominated the per-page cost, while zlib.crc32
    creates none and `simhash64` mixes all features at once in numpy. fmix64 is a bijection
    with full avalanche, so it spreads the checksum over all 64 bits for Charikar's per-bit
    vote; two tokens sharing a crc32 (~n²/2**33) only merge their votes. Stable across
    processes, versions and platforms, unlike `hash()`. Never change it: stored fingerprints
    depend on it.
    """
    key = zlib.crc32(data)
    key ^= key >> 33
    key = (key * _FMIX_C1) & _MASK64
    key ^= key >> 33
    key = (key * _FMIX_C2) & _MASK64
    key ^= key >> 33
    return key.to_bytes(8, "big")


DEFAULT_HASH: Final[HashFunc] = crc32_fmix64


def md5_hash(data: bytes) -> bytes:
    """The `simhash` package's default feature hash (its `_hashfunc`)."""
    return hashlib.md5(data).digest()


def _fmix64_array(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Vectorised fmix64 (MurmurHash3); uint64 array arithmetic wraps modulo 2**64."""
    keys = keys ^ (keys >> np.uint64(33))
    keys = keys * np.uint64(_FMIX_C1)
    keys = keys ^ (keys >> np.uint64(33))
    keys = keys * np.uint64(_FMIX_C2)
    return keys ^ (keys >> np.uint64(33))


def _digest_bytes(encoded: list[bytes], hashfunc: HashFunc) -> npt.NDArray[np.uint8]:
    """The (n, 8) uint8 matrix of each feature's last 8 digest bytes, big-endian as in `simhash`."""
    count = len(encoded)
    if hashfunc is crc32_fmix64:
        mixed = _fmix64_array(np.fromiter(map(zlib.crc32, encoded), dtype=np.uint64, count=count))
        return mixed.astype(">u8").view(np.uint8).reshape(count, 8)
    digests = list(map(hashfunc, encoded))
    if isinstance(digests[0], int):
        # simhash.Simhash masks integer digests to f bits and writes them big-endian.
        as_u64 = np.fromiter((int(d) & _MASK64 for d in digests), dtype=np.uint64, count=count)
        return as_u64.astype(">u8").view(np.uint8).reshape(count, 8)
    lengths = set(map(len, digests))  # type: ignore[arg-type]
    if min(lengths) < 8:
        raise ValueError("hashfunc must return at least 8 bytes")
    if len(lengths) == 1:
        (length,) = lengths
        joined = b"".join(digests)  # type: ignore[arg-type]
        return np.frombuffer(joined, dtype=np.uint8).reshape(count, length)[:, length - 8 :]
    tails = b"".join(digest[-8:] for digest in digests)  # type: ignore[index]
    return np.frombuffer(tails, dtype=np.uint8).reshape(count, 8)


def _keys_and_weights(
    features: Mapping[str, float] | Iterable[str] | Iterable[tuple[str, float]],
) -> tuple[list[str], npt.NDArray[np.float64] | None]:
    """Split features into keys and float64 weights (None: every weight is 1); float64 holds
    integer weights exactly up to 2**53, so integer totals compare exactly."""
    if isinstance(features, Mapping):
        keys = list(features.keys())
        weights = np.fromiter(features.values(), dtype=np.float64, count=len(keys))
    else:
        items = list(features)
        if all(isinstance(item, str) for item in items):
            return items, None  # type: ignore[return-value]
        pairs = [(item, 1.0) if isinstance(item, str) else (item[0], float(item[1]))
                 for item in items]
        keys = [key for key, _ in pairs]
        weights = np.array([weight for _, weight in pairs], dtype=np.float64)
    if weights.size and float(weights.min()) < 0:
        raise ValueError("feature weights must be non-negative")
    return keys, weights


def simhash64(
    features: Mapping[str, float] | Iterable[str] | Iterable[tuple[str, float]],
    hashfunc: HashFunc = DEFAULT_HASH,
) -> int:
    """Charikar's simhash of weighted features, as an unsigned 64-bit int (0 for none).

    Each feature's 64-bit hash votes its weight for every bit it has set; bit b of the result is
    1 when its votes exceed half the total weight (Charikar 2002; docs/MODEL.md section 1).
    Equal to `simhash.Simhash(features, f=64, hashfunc=hashfunc).value` (simhash 2.1.2) for
    non-negative weights, but voted at once in numpy, and without that package's overflow on
    integer weights > 255 under numpy 2. Bare strings weigh 1.
    """
    keys, weights = _keys_and_weights(features)
    if not keys:
        return 0
    return simhash64_encoded(list(map(str.encode, keys)), weights, hashfunc)


def simhash64_encoded(
    encoded: list[bytes],
    weights: npt.NDArray[np.float64] | None,
    hashfunc: HashFunc = DEFAULT_HASH,
) -> int:
    """`simhash64` of features already UTF-8 encoded, with their weights (None: all 1)."""
    if not encoded:
        return 0
    digest_bytes = _digest_bytes(encoded, hashfunc)
    bits = np.unpackbits(digest_bytes, axis=1)  # (n, 64), bit 0 = most significant
    if weights is None:
        votes = bits.sum(axis=0, dtype=np.float64)
        total_weight = float(len(encoded))
    else:
        votes = weights @ bits.astype(np.float64)  # one BLAS matrix-vector product
        total_weight = float(weights.sum())
    is_set = votes * 2.0 > total_weight  # simhash package: combined_sums > count / 2
    return int.from_bytes(np.packbits(is_set).tobytes(), "big")


def hamming_distance(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints (signed or unsigned form)."""
    return ((a ^ b) & _MASK64).bit_count()


CONTENT_HASH_BYTES: Final = 20  # SHA-1
LEGACY_CONTENT_HASH_BYTES: Final = 16  # BLAKE2b-128, what rows written before SHA-1 hold


def content_hash(body: bytes) -> bytes:
    """Exact hash of the body (SHA-1, 20 bytes), to tell cosmetic changes from identical
    fetches.

    SHA-1 because it is the WARC payload digest's hash, so a page stored whole is hashed once
    (``crawler.store.base.Capture.payload_sha1``). No collision resistance is needed: a page
    that forged a collision with its previous version would only have its change counted as
    none, which serving the same bytes achieves anyway.
    """
    return hashlib.sha1(body).digest()


def same_content(stored: bytes | None, exact: bytes, body: bytes) -> bool:
    """Whether ``body`` (whose ``content_hash`` is ``exact``) is the version ``stored`` hashed.
    A 16-byte stored hash is the legacy BLAKE2b-128 and compared as such, so that an upgrade
    does not take every unchanged page for a changed one."""
    if stored is None:
        return False
    if len(stored) == LEGACY_CONTENT_HASH_BYTES:
        return hashlib.blake2b(body, digest_size=LEGACY_CONTENT_HASH_BYTES).digest() == stored
    return stored == exact


def text_hash(raw_text: str) -> bytes:
    """SHA-1 of the visible text's words joined by single spaces: what ``crawler watch
    --exact`` compares, so new markup or scripts are no change but any edited word is."""
    return hashlib.sha1(" ".join(raw_text.split()).encode("utf-8", "surrogatepass")).digest()


def to_signed64(value: int) -> int:
    """Unsigned 64-bit fingerprint -> the signed value a PostgreSQL BIGINT can store."""
    value &= _MASK64
    return value - (1 << 64) if value & _SIGN_BIT else value


def from_signed64(value: int) -> int:
    """Signed BIGINT from the database -> the unsigned 64-bit fingerprint."""
    return value & _MASK64
