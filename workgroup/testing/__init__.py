"""Tools for testing applications built on workgroup."""

from workgroup.testing.ownership import (
    MemberLog,
    OwnershipReport,
    OwnershipViolation,
    check_ownership,
    read_log,
)

__all__ = ["MemberLog", "OwnershipReport", "OwnershipViolation", "check_ownership", "read_log"]
