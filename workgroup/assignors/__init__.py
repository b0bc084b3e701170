"""Assignors: who gets which resource.

To write one, implement :class:`Assignor` (it maps an :class:`AssignmentInput`,
the members as :class:`MemberInfo`, to an :data:`Assignment`); to find one by
name (built-in or a plugin's entry point), :func:`get_assignor`.  See
``docs/assignors.md``.  The names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workgroup.lazy import lazy_attributes

if TYPE_CHECKING:
    from workgroup.assignors.base import Assignment, AssignmentInput, Assignor, MemberInfo
    from workgroup.assignors.registry import get_assignor

#: Public name -> the module that defines it, imported on first access.
_LAZY: dict[str, str] = {
    "Assignment": "workgroup.assignors.base",
    "AssignmentInput": "workgroup.assignors.base",
    "Assignor": "workgroup.assignors.base",
    "MemberInfo": "workgroup.assignors.base",
    "get_assignor": "workgroup.assignors.registry",
}

__all__ = ["Assignment", "AssignmentInput", "Assignor", "MemberInfo", "get_assignor"]


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
