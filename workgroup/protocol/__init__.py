"""Application-defined protocols and their versioned metadata."""

from workgroup.protocol.catalog import Catalog, ResourceSpec, catalog_hash
from workgroup.protocol.metadata import (
    LATEST_VERSION,
    AssignmentData,
    BinaryCodec,
    Decoded,
    Header,
    MemberMetadata,
)
from workgroup.protocol.protocol import DEFAULT_PROTOCOL_TYPE, Protocol, parse_wire_name

__all__ = [
    "DEFAULT_PROTOCOL_TYPE",
    "LATEST_VERSION",
    "AssignmentData",
    "BinaryCodec",
    "Catalog",
    "Decoded",
    "Header",
    "MemberMetadata",
    "Protocol",
    "ResourceSpec",
    "catalog_hash",
    "parse_wire_name",
]
