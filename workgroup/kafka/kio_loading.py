"""Loading kio without hypothesis, so that no process leaves a ``.hypothesis``
directory behind in the directory it runs in.

kio registers hypothesis strategies for its types when hypothesis is installed
(the dev extra installs it), and building them writes a cache to
``./.hypothesis`` of the current directory: ``workgroup --help`` run in a
project would leave one there.  :func:`load_kio` imports kio's types while
``import hypothesis`` fails, so kio registers nothing and hypothesis is not
loaded at all.  A process that imported hypothesis before (the test suite, a
user's tests) keeps kio's strategies.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType

#: The kio module that imports hypothesis (through its ``_phantom`` helper).
_KIO_TYPES = "kio.static.primitive"


class _RefuseHypothesis(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> None:
        if name == "hypothesis" or name.startswith("hypothesis."):
            raise ModuleNotFoundError(f"{name} is not loaded with kio", name=name)


def load_kio() -> None:
    """Import kio's types without hypothesis, unless either is loaded already."""
    if "hypothesis" in sys.modules or _KIO_TYPES in sys.modules:
        return
    refuse = _RefuseHypothesis()
    sys.meta_path.insert(0, refuse)
    try:
        importlib.import_module(_KIO_TYPES)
    finally:
        sys.meta_path.remove(refuse)


__all__ = ["load_kio"]
