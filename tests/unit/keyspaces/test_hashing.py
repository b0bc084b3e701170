"""The keyspace hash: stable across processes, str and int apart, spread evenly."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workgroup.keyspaces import HASH_SPACE, key_hash

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ["user-1", "", "é", "\U0001f600", 0, 1, -1, 2**63 - 1, -(2**63), 2**63, -(2**70)]


def _digest(person: bytes, data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=person).digest(), "big")


def test_the_documented_scheme() -> None:
    """The points follow the scheme in the module's docstring (the keyspace's contract)."""
    golden = 0x9E3779B97F4A7C15
    assert key_hash("user-1") == _digest(b"wg-key-str", b"user-1")
    assert key_hash("") == _digest(b"wg-key-str", b"")
    assert key_hash(0) == 0
    assert key_hash(1) == golden
    assert key_hash(-1) == (-golden) % HASH_SPACE
    assert key_hash(2**63) == _digest(b"wg-key-int", (2**63).to_bytes(9, "big", signed=True))
    assert key_hash(-(2**70)) == _digest(b"wg-key-int", (-(2**70)).to_bytes(9, "big", signed=True))


def test_pinned_points() -> None:
    """Points fixed once: if this changes, every key of every keyspace moves."""
    assert [key_hash(k) for k in ("user-1", 1, 2**64)] == [
        0x90B882FF252B7AF0,
        0x9E3779B97F4A7C15,
        0x4A49859F7D3E3BCC,
    ]


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_the_same_in_another_process(seed: str) -> None:
    code = f"from workgroup.keyspaces import key_hash;print([key_hash(k) for k in {SAMPLE!r}])"
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == str([key_hash(k) for k in SAMPLE])


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1))
def test_distinct_64_bit_ints_never_collide(a: int, b: int) -> None:
    assert (key_hash(a) == key_hash(b)) == (a == b)


@given(st.one_of(st.text(), st.integers()))
def test_points_are_in_the_hash_space(key: str | int) -> None:
    assert 0 <= key_hash(key) < HASH_SPACE


def test_str_and_int_keys_are_hashed_apart() -> None:
    assert all(key_hash(str(n)) != key_hash(n) for n in range(1000))


@pytest.mark.parametrize("keys", [range(100_000), [f"user-{n}" for n in range(100_000)]])
def test_consecutive_keys_spread_evenly(keys: range | list[str]) -> None:
    buckets = [0] * 64
    for key in keys:
        buckets[key_hash(key) >> 58] += 1
    mean = len(keys) / 64
    # A uniform hash leaves each of 64 buckets within about 3 standard deviations (~40).
    assert max(abs(count - mean) for count in buckets) < 0.1 * mean


@pytest.mark.parametrize("key", [True, 1.5, b"x", None])
def test_other_types_are_refused(key: object) -> None:
    with pytest.raises(TypeError, match="keyspace keys are str or int"):
        key_hash(key)  # type: ignore[arg-type]
