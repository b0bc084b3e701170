"""One round of the live leader's pipeline, without I/O, for tests: the stages run
as the driver runs them, then the pipeline records the result."""

from __future__ import annotations

from collections.abc import Mapping

from workgroup.assignors.sticky import CooperativeStickyAssignor
from workgroup.kafka.messages import JoinedMember
from workgroup.member.pipeline import LeaderPipeline, RoundOutcome
from workgroup.member.round_plan import MembersRead
from workgroup.member.round_stages import RoundStages, run_round_stages
from workgroup.protocol import MemberMetadata, Protocol
from workgroup.protocol.catalog import catalog_hash, freeze_catalog


def play_leader_round(
    pipeline: LeaderPipeline,
    members: Mapping[str, MemberMetadata],
    catalog: Mapping[str, list[int]],
    *,
    run_id: int,
    now: int = 0,
) -> tuple[RoundStages, RoundOutcome]:
    """Round ``run_id`` (generation ``run_id + 1``) of a cooperative-sticky group
    whose members joined with ``members``."""
    assignor = CooperativeStickyAssignor()
    protocol = Protocol(name=assignor.name, assignor=assignor, rebalance="cooperative")
    codec = protocol.codec
    version = codec.latest_version
    joined = tuple(JoinedMember(mid, None, codec.encode_metadata(m)) for mid, m in members.items())
    read = MembersRead(dict(members), dict.fromkeys(members, version), version, {}, {})
    frozen = freeze_catalog(catalog)
    run, _ = pipeline.start(
        now,
        run_id,
        protocol,
        joined,
        read,
        generation=run_id + 1,
        catalog=frozen,
        catalog_hash=catalog_hash(frozen),
    )
    round_ = pipeline.take(run.run_id)
    assert round_ is not None
    return run.stages, pipeline.conclude(now, round_, run_round_stages(run.stages))
