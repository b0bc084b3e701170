"""Hypothesis fuzzing of every decoder through :mod:`tests.fuzz.targets`, and of a
hostile leader's assignments: no crash, no hang, nothing outside the catalog
handed to the application.  ``make fuzz`` runs the same targets coverage-guided
(atheris)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workgroup.errors import ErrorCode
from workgroup.kafka.messages import SyncGroupResult
from workgroup.protocol import AssignmentData

from .targets import CODEC, KNOWN, TARGETS, hostile_sync, stable_follower

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", sorted(TARGETS))
@FUZZ
@given(data=st.binary(max_size=2048))
def test_random_bytes_are_rejected_cleanly(name: str, data: bytes) -> None:
    TARGETS[name](data)


def _valid_assignment() -> bytes:
    m, _ = stable_follower()
    return CODEC.encode_assignment(
        AssignmentData(
            assigned=(("shard", 1), ("table", "a")), generation=5, catalog_hash=m.catalog_hash
        )
    )


@pytest.mark.parametrize("name", ["assignment", "hostile_sync"])
@FUZZ
@given(data=st.data())
def test_mutated_assignments_are_rejected_cleanly(name: str, data: st.DataObject) -> None:
    blob = bytearray(_valid_assignment())
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(blob) - 1))
        blob[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    TARGETS[name](bytes(blob[:cut] if data.draw(st.booleans()) else blob))


resources = st.tuples(
    st.sampled_from(["shard", "table", "ghost", ""]),
    st.one_of(st.integers(-(2**31), 2**31 - 1), st.text(max_size=20)),
)


@FUZZ
@given(
    assigned=st.lists(resources, max_size=50),
    revoked=st.lists(resources, max_size=10),
    generation=st.integers(-(2**31), 2**31 - 1),
    common_version=st.integers(-5, 50),
    pending=st.booleans(),
    rejoin=st.booleans(),
)
def test_a_hostile_leader_hands_nothing_outside_the_catalog(
    assigned: list[tuple[str, object]],
    revoked: list[tuple[str, object]],
    generation: int,
    common_version: int,
    pending: bool,
    rejoin: bool,
) -> None:
    m, sync = stable_follower()
    blob = CODEC.encode_assignment(
        AssignmentData(
            assigned=tuple(assigned),  # type: ignore[arg-type]
            revoked=tuple(revoked),  # type: ignore[arg-type]
            generation=generation,
            catalog_hash=m.catalog_hash,
            common_version=max(1, min(common_version, CODEC.latest_version)),
            pending=pending,
            rejoin=rejoin,
        )
    )
    actions = m.response(3, sync, SyncGroupResult(ErrorCode.NONE, blob))
    assert m.owned <= KNOWN
    handed = {r for a in actions if getattr(a, "kind", None) == "on_assigned" for r in a.resources}  # type: ignore[attr-defined]
    assert handed <= KNOWN
    assert handed == {r for r in assigned if r in KNOWN}
    hostile_sync(blob)


def test_a_huge_declared_count_is_refused_without_allocating() -> None:
    import struct

    blob = bytearray(_valid_assignment())
    # The first resources count follows the header: claim 2**31 - 1 entries.
    from workgroup.protocol.metadata import HEADER_SIZE

    blob[HEADER_SIZE : HEADER_SIZE + 4] = struct.pack(">i", 2**31 - 1)
    for name in ("assignment", "hostile_sync"):
        TARGETS[name](bytes(blob))
