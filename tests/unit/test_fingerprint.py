"""simhash64 must equal the reference `simhash` package bit for bit, and the helpers round-trip."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simhash import Simhash

from crawler.core.fingerprint import (
    DEFAULT_HASH,
    content_hash,
    crc32_fmix64,
    from_signed64,
    hamming_distance,
    md5_hash,
    same_content,
    simhash64,
    to_signed64,
)

UINT64 = st.integers(min_value=0, max_value=2**64 - 1)
FEATURE = st.text(max_size=12)
# simhash 2.1.2 multiplies a uint8 bit array by weights > 50, which overflows past 255 under
# numpy 2, so the package is only a valid reference up to 255.
PACKAGE_WEIGHT = st.integers(min_value=0, max_value=255)


def blake2b_8(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=8).digest()


def md5_as_int(data: bytes) -> int:
    """A hash returning a 128-bit int: the package masks it to 64 bits."""
    return int.from_bytes(hashlib.md5(data).digest(), "big")


HASHES: list[Callable[[bytes], bytes | int]] = [DEFAULT_HASH, md5_hash, blake2b_8, md5_as_int]


def reference_simhash(features: dict[str, int], hashfunc: Callable[[bytes], bytes]) -> int:
    """Charikar's simhash written out bit by bit: +w when the bit is set, -w when not."""
    sums = [0] * 64
    for feature, weight in features.items():
        value = int.from_bytes(hashfunc(feature.encode("utf-8"))[-8:], "big")
        for bit in range(64):
            sums[bit] += weight if value >> (63 - bit) & 1 else -weight
    return sum(1 << (63 - bit) for bit in range(64) if sums[bit] > 0)


@pytest.mark.parametrize("hashfunc", HASHES)
@given(features=st.dictionaries(FEATURE, PACKAGE_WEIGHT, max_size=300))
@settings(max_examples=60, deadline=None)
def test_weighted_dict_matches_package(
    hashfunc: Callable[[bytes], bytes | int], features: dict[str, int]
) -> None:
    expected = Simhash(features, f=64, hashfunc=hashfunc).value
    assert simhash64(features, hashfunc) == expected


@pytest.mark.parametrize("hashfunc", [DEFAULT_HASH, md5_hash])
@given(tokens=st.lists(FEATURE, max_size=300))
@settings(max_examples=60, deadline=None)
def test_token_list_with_repeats_matches_package(
    hashfunc: Callable[[bytes], bytes | int], tokens: list[str]
) -> None:
    assert simhash64(tokens, hashfunc) == Simhash(tokens, f=64, hashfunc=hashfunc).value


@pytest.mark.parametrize("hashfunc", [DEFAULT_HASH, md5_hash])
@given(pairs=st.lists(st.tuples(FEATURE, PACKAGE_WEIGHT), max_size=300))
@settings(max_examples=60, deadline=None)
def test_pair_list_matches_package(
    hashfunc: Callable[[bytes], bytes | int], pairs: list[tuple[str, int]]
) -> None:
    assert simhash64(pairs, hashfunc) == Simhash(pairs, f=64, hashfunc=hashfunc).value


@given(features=st.dictionaries(FEATURE, st.integers(0, 10**9), max_size=80))
@settings(max_examples=60, deadline=None)
def test_large_weights_match_bitwise_definition(features: dict[str, int]) -> None:
    for hashfunc in (DEFAULT_HASH, md5_hash):
        assert simhash64(features, hashfunc) == reference_simhash(features, hashfunc)  # type: ignore[arg-type]


def test_unicode_and_newline_features_match_package() -> None:
    features = {"日本語": 3, "café": 70, "a\nb": 2, "": 1, "\U0001f600": 200, "x" * 500: 1}
    for hashfunc in HASHES:
        assert simhash64(features, hashfunc) == Simhash(features, f=64, hashfunc=hashfunc).value


def test_empty_features_give_zero() -> None:
    assert simhash64({}) == 0
    assert simhash64([]) == 0


def test_negative_weight_is_rejected() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        simhash64({"a": 2, "b": -1})


def test_default_hash_is_pinned() -> None:
    # Stored fingerprints depend on this function: a change here invalidates every database.
    assert crc32_fmix64(b"") == bytes(8)  # crc32(b"") == 0 and fmix64(0) == 0
    assert crc32_fmix64(b"hello").hex() == "66c25ee7d13b57dc"


def test_default_hash_bits_are_balanced_and_uncorrelated() -> None:
    digests = b"".join(crc32_fmix64(f"token{i}".encode()) for i in range(20_000))
    bits = np.unpackbits(np.frombuffer(digests, dtype=np.uint8)).reshape(-1, 64).astype(float)
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.02)
    correlation = np.corrcoef(bits.T)
    off_diagonal = correlation[~np.eye(64, dtype=bool)]
    assert np.max(np.abs(off_diagonal)) < 0.05


@given(a=UINT64, b=UINT64)
def test_hamming_distance(a: int, b: int) -> None:
    distance = hamming_distance(a, b)
    assert distance == bin(a ^ b).count("1")
    assert distance == hamming_distance(b, a)
    assert hamming_distance(a, a) == 0
    assert hamming_distance(to_signed64(a), to_signed64(b)) == distance


@given(value=UINT64)
def test_signed_round_trip(value: int) -> None:
    signed = to_signed64(value)
    assert -(2**63) <= signed < 2**63
    assert from_signed64(signed) == value
    assert (signed < 0) == (value >= 2**63)


def test_content_hash() -> None:
    """SHA-1, so that a body stored whole gets its WARC payload digest from it."""
    assert content_hash(b"abc") == hashlib.sha1(b"abc").digest()
    assert content_hash(b"abc") != content_hash(b"abd")


def test_a_hash_stored_before_sha1_still_recognises_the_same_bytes() -> None:
    """Rows written before the content hash became SHA-1 hold BLAKE2b-128: the same body must
    still match it (or every unchanged page would count as edited once after an upgrade),
    and another body must not."""
    legacy = hashlib.blake2b(b"abc", digest_size=16).digest()
    assert same_content(legacy, content_hash(b"abc"), b"abc")
    assert not same_content(legacy, content_hash(b"abd"), b"abd")
    assert same_content(content_hash(b"abc"), content_hash(b"abc"), b"abc")
    assert not same_content(content_hash(b"abc"), content_hash(b"abd"), b"abd")
    assert not same_content(None, content_hash(b"abc"), b"abc")
