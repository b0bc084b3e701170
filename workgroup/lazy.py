"""Names a package loads on first use (PEP 562), so that importing the package
stays light: ``__getattr__ = lazy_attributes(__name__, {"Name": "pkg.module"}, globals())``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, where: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each name of ``where`` (name -> the
    module that defines it) on first access and keeps it in ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    return __getattr__


__all__ = ["lazy_attributes"]
