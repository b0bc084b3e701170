"""Tools for testing applications built on workgroup."""

from workgroup.testing.assignors import RotatingAssignor
from workgroup.testing.clock import FakeClock
from workgroup.testing.logs import capture_logs
from workgroup.testing.ownership import (
    MemberLog,
    OwnershipReport,
    OwnershipViolation,
    check_ownership,
    read_log,
)
from workgroup.testing.proxy import FaultProxy, random_schedule
from workgroup.testing.servers import (
    ServerExited,
    ServerProcess,
    ServerStartError,
    free_port,
    run_coordinator,
    run_tansu,
    tansu_binary,
)
from workgroup.testing.signals import interrupt_on_termination, interrupts_deferred

__all__ = [
    "FakeClock",
    "FaultProxy",
    "MemberLog",
    "OwnershipReport",
    "OwnershipViolation",
    "RotatingAssignor",
    "ServerExited",
    "ServerProcess",
    "ServerStartError",
    "capture_logs",
    "check_ownership",
    "free_port",
    "interrupt_on_termination",
    "interrupts_deferred",
    "random_schedule",
    "read_log",
    "run_coordinator",
    "run_tansu",
    "tansu_binary",
]
