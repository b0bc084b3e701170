"""Application-defined protocols: type, name, version, codec and assignor.

A member advertises an ordered list of protocols in JoinGroup; the coordinator
picks one every member supports.  The wire name carries the protocol version
(``cooperative-sticky.v2``) so that a rolling upgrade advertises
``[name.v2, name.v1]`` and the group moves to v2 only once every member has it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from workgroup.assignors.base import Assignor
from workgroup.errors import ConfigError
from workgroup.protocol.metadata import BinaryCodec

DEFAULT_PROTOCOL_TYPE = "workgroup"

RebalanceMode = Literal["eager", "cooperative"]

_WIRE_NAME = re.compile(r"^(?P<name>.+)\.v(?P<version>\d+)$")


@dataclass(frozen=True)
class Protocol:
    """One protocol a member supports.

    ``rebalance`` defaults to cooperative when the assignor supports it.
    """

    name: str
    assignor: Assignor
    version: int = 1
    type: str = DEFAULT_PROTOCOL_TYPE
    codec: BinaryCodec = field(default_factory=BinaryCodec)
    rebalance: RebalanceMode | None = None

    def __post_init__(self) -> None:
        if not self.name or "\x00" in self.name:
            raise ConfigError(f"invalid protocol name {self.name!r}")
        if self.version < 0:
            raise ConfigError(f"protocol version must be >= 0, got {self.version}")
        if self.rebalance == "cooperative" and not self.assignor.supports_cooperative:
            raise ConfigError(
                f"assignor {self.assignor.name!r} is not sticky enough for cooperative rebalancing"
            )

    @classmethod
    def of(
        cls,
        assignor: str,
        *,
        version: int = 1,
        name: str | None = None,
        type: str = DEFAULT_PROTOCOL_TYPE,
        codec: BinaryCodec | None = None,
        rebalance: RebalanceMode | None = None,
        **options: object,
    ) -> Protocol:
        """A protocol using the assignor registered as ``assignor`` (entry points
        ``workgroup.assignors``); the protocol is named after it unless ``name``."""
        from workgroup.assignors.registry import get_assignor

        return cls(
            name=name or assignor,
            assignor=get_assignor(assignor, **options),
            version=version,
            type=type,
            codec=codec or BinaryCodec(),
            rebalance=rebalance,
        )

    @property
    def wire_name(self) -> str:
        return f"{self.name}.v{self.version}"

    @property
    def mode(self) -> RebalanceMode:
        if self.rebalance is not None:
            return self.rebalance
        return "cooperative" if self.assignor.supports_cooperative else "eager"


def parse_wire_name(wire_name: str) -> tuple[str, int | None]:
    """``"sticky.v2" -> ("sticky", 2)``; names without a version give ``None``."""
    match = _WIRE_NAME.match(wire_name)
    if match is None:
        return wire_name, None
    return match["name"], int(match["version"])
