"""How many bytes a rebalance moves: JoinGroup metadata the leader receives.

For N members owning M resources each (cooperative protocols report what they
own), prints the size of one member's metadata and of the JoinGroup response
the leader receives (kio-encoded JoinGroup v9 response, all members'
metadata), with and without compression, plus the leader's SyncGroup request.

Run: .venv/bin/python benchmarks/join_payload.py
"""

from __future__ import annotations

import io
import sys

from kio.schema.join_group.v9.response import JoinGroupResponse, JoinGroupResponseMember
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.serial import entity_writer
from kio.static.primitive import i32, i32Timedelta

from workgroup.errors import ErrorCode
from workgroup.protocol import AssignmentData, BinaryCodec, MemberMetadata, catalog_hash

MEMBERS = (10, 100, 1000)
OWNED = (1, 10, 100, 1000)


def _size(entity: object) -> int:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return len(out.getvalue())


def measure(n: int, m: int, codec: BinaryCodec, string_keys: bool) -> tuple[int, int, int]:
    catalog_digest = catalog_hash({"shard": list(range(n * m))})
    metas = []
    assignments = []
    for i in range(n):
        keys = [f"connector-{i}/task-{j}" if string_keys else i * m + j for j in range(m)]
        owned = tuple(("shard", k) for k in keys)
        meta = MemberMetadata(
            kinds=("shard",),
            owned=owned,
            owned_generation=7,
            rack=f"rack-{i % 3}",
            instance_id=f"worker-{i}",
            catalog_hash=catalog_digest,
        )
        metas.append(codec.encode_metadata(meta))
        assignments.append(
            codec.encode_assignment(
                AssignmentData(assigned=owned, generation=8, catalog_hash=catalog_digest)
            )
        )
    response = JoinGroupResponse(
        throttle_time=i32Timedelta.parse(__import__("datetime").timedelta(0)),
        error_code=ErrorCode.NONE,  # type: ignore[arg-type]
        generation_id=i32(8),
        protocol_type="workgroup",
        protocol_name="sticky.v1",
        leader="worker-0-id",
        skip_assignment=False,
        member_id="worker-0-id",
        members=tuple(
            JoinGroupResponseMember(
                member_id=f"worker-{i}-{'x' * 36}", group_instance_id=f"worker-{i}", metadata=meta
            )
            for i, meta in enumerate(metas)
        ),
    )
    sync = SyncGroupRequest(
        group_id="bench",
        generation_id=i32(8),
        member_id="worker-0-id",
        group_instance_id="worker-0",
        protocol_type="workgroup",
        protocol_name="sticky.v1",
        assignments=tuple(
            SyncGroupRequestAssignment(member_id=f"worker-{i}-{'x' * 36}", assignment=a)
            for i, a in enumerate(assignments)
        ),
    )
    return len(metas[0]), _size(response), _size(sync)


def human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError


def main() -> None:
    string_keys = "--string-keys" in sys.argv
    plain = BinaryCodec(compress_above=None, max_bytes=1 << 30)
    packed = BinaryCodec(max_bytes=1 << 30)
    print(f"keys: {'strings like connector-12/task-3' if string_keys else 'int64'}")
    print(
        "| members N | owned M each | metadata/member | leader's JoinGroup response "
        "| compressed | leader's SyncGroup request | compressed |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in MEMBERS:
        for m in OWNED:
            if n * m > 1_000_000:
                continue
            meta, join, sync = measure(n, m, plain, string_keys)
            _, cjoin, csync = measure(n, m, packed, string_keys)
            print(
                f"| {n} | {m} | {human(meta)} | {human(join)} | {human(cjoin)} "
                f"| {human(sync)} | {human(csync)} |"
            )


if __name__ == "__main__":
    main()
