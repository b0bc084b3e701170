"""The package's public surface."""

from __future__ import annotations

import subprocess
import sys

import pytest

import workgroup
from workgroup.errors import CoordinatorError, ErrorCode, WorkgroupError


def test_sans_io_modules_load_no_network_library() -> None:
    code = (
        "import sys, workgroup, workgroup.member.state, workgroup.coordinator.coordinator;"
        "loaded = [m for m in ('aiokafka', 'asyncio') if m in sys.modules];"
        "print(','.join(loaded))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "aiokafka" not in out.stdout


def test_public_names_resolve() -> None:
    assert workgroup.GroupMember.__name__ == "GroupMember"
    assert workgroup.Protocol.__name__ == "Protocol"
    with pytest.raises(AttributeError):
        _ = workgroup.NoSuchThing  # type: ignore[attr-defined]


def test_coordinator_errors_say_whether_they_are_retriable() -> None:
    assert CoordinatorError(ErrorCode.REBALANCE_IN_PROGRESS).retriable
    assert not CoordinatorError(ErrorCode.FENCED_INSTANCE_ID).retriable
    assert isinstance(CoordinatorError(ErrorCode.NONE), WorkgroupError)
