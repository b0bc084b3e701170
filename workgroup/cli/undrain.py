"""``workgroup undrain GROUP``: let a drained member take work again (see
:mod:`workgroup.cli.drain`)."""

from __future__ import annotations

from workgroup.cli.drain import undrain_command as command

__all__ = ["command"]
