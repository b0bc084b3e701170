"""Names that moved keep working from their old place for one release, each use
warning with the place to import them from now."""

from __future__ import annotations

import importlib

import pytest

import workgroup.testing.coordinator as harness


@pytest.mark.parametrize(
    "name",
    [
        "CoordinatorHarness",
        "DEFAULT_PROTOCOLS",
        "DEFAULT_PROTOCOL_TYPE",
        "FormedGroup",
        "Token",
        "join_request",
        "sequential_member_ids",
    ],
)
def test_the_coordinator_harness_moved_to_workgroup_testing(name: str) -> None:
    old = importlib.import_module("workgroup.coordinator.testing")
    with pytest.warns(DeprecationWarning, match=r"import it from workgroup\.testing\.coordinator"):
        value = getattr(old, name)
    assert value is getattr(harness, name)


def test_the_coordinators_own_fake_clock_is_gone_with_a_pointer_to_the_one_fake_clock() -> None:
    old = importlib.import_module("workgroup.coordinator.testing")
    with pytest.raises(AttributeError, match=r"workgroup\.testing\.FakeClock"):
        _ = old.FakeClock
