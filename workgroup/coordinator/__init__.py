"""The embedded group coordinator: Kafka's classic group protocol on loopback.

:class:`CoordinatorServer` serves it (e.g. in a test, on the test's own event
loop) with a :class:`CoordinatorConfig`; both load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# The wire modules import kio: it is loaded first the package's way (without
# hypothesis, see workgroup.kafka.kio_loading).
import workgroup.kafka  # noqa: F401
from workgroup.lazy import lazy_attributes

if TYPE_CHECKING:
    from workgroup.coordinator.config import CoordinatorConfig
    from workgroup.coordinator.server import CoordinatorServer

#: Public name -> the module that defines it, imported on first access.
_LAZY: dict[str, str] = {
    "CoordinatorConfig": "workgroup.coordinator.config",
    "CoordinatorServer": "workgroup.coordinator.server",
}

__all__ = ["CoordinatorConfig", "CoordinatorServer"]


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
