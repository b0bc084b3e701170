"""The portable fence's value, without a coordinator: what it holds, what it
pickles, where its password comes from, bad construction."""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

from tests.unit.runtime.test_lease import FakeStore, lease
from workgroup import fence as fence_module
from workgroup.errors import ConfigError, ErrorCode, WorkgroupError
from workgroup.fence import (
    PASSWORD_ENV,
    PASSWORD_FILE_ENV,
    Fence,
    FenceTimeoutError,
    make_fence,
)
from workgroup.kafka.messages import (
    CommitPartitionResult,
    CommitTopicResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroups,
    DescribeGroupsResult,
    FetchedGroup,
    FetchedPartition,
    FetchedTopic,
    Heartbeat,
    HeartbeatResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchResult,
)
from workgroup.protocol.metadata import AssignmentData, BinaryCodec, MemberMetadata
from workgroup.runtime.errors import CheckpointError, LeaseLostError
from workgroup.runtime.lease import FenceOrigin
from workgroup.security import PLAINTEXT, Security
from workgroup.testing import FakeClock

SECRET = "unit-Secret-9"


def fence(**overrides: object) -> Fence:
    options: dict[str, object] = {
        "bootstrap": "127.0.0.1:1,[::1]:2",
        "security": PLAINTEXT,
        "group_id": "g",
        "member_id": "m-1",
        "instance_id": "i-1",
        "generation": 3,
        "topic": "workgroup-leases.g.0123",
        "partition": 0,
        "kind": "shard",
        "key": 7,
        "token": 4,
    }
    options.update(overrides)
    return make_fence(**options)  # type: ignore[arg-type]


def test_a_fence_holds_what_another_process_needs_and_pickles() -> None:
    made = fence()
    assert made.bootstrap == ("127.0.0.1:1", "[::1]:2")
    assert (made.group_id, made.member_id, made.instance_id, made.generation) == (
        "g",
        "m-1",
        "i-1",
        3,
    )
    assert (made.topic, made.partition, made.kind, made.key, made.token) == (
        "workgroup-leases.g.0123",
        0,
        "shard",
        7,
        4,
    )
    assert made.expires_at is None
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        copy = loads(dumps(made))
        assert copy == made
        assert type(copy.key) is int
    assert len(pickle.dumps(made)) < 1024
    assert "token=4" in repr(made)


def test_the_password_stays_out_unless_asked_for() -> None:
    security = Security("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", SECRET)
    plain = fence(security=security)
    assert plain.security.sasl_password is None
    assert SECRET.encode() not in pickle.dumps(plain)
    assert SECRET not in repr(plain)
    with_secret = fence(security=security, include_secrets=True)
    assert with_secret.security.sasl_password == SECRET
    assert SECRET not in repr(with_secret)


def test_the_password_comes_from_the_fence_the_environment_or_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_FILE_ENV, raising=False)
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    given = Security("SASL_SSL", "PLAIN", "alice", "given", ssl_cafile=str(ca))
    security = given.without_secrets()
    assert security.sasl_password is None
    assert security.with_password_from_environment().sasl_password is None
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(secret))
    assert security.with_password_from_environment().sasl_password == SECRET
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    assert security.with_password_from_environment().sasl_password == "from-env"  # variable first
    assert given.with_password_from_environment().sasl_password == "given"  # its own first
    assert security.with_password_from_environment().ssl_cafile == str(ca)
    # Without SASL nothing is looked up.
    assert PLAINTEXT.with_password_from_environment() is PLAINTEXT
    monkeypatch.delenv(PASSWORD_ENV)
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(tmp_path / "missing"))
    with pytest.raises(WorkgroupError, match="cannot read"):
        security.with_password_from_environment()


def test_the_old_security_name_still_works_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="FenceSecurity"):
        from workgroup.fence import FenceSecurity
    assert FenceSecurity is Security
    with pytest.warns(DeprecationWarning, match="Credentials"):
        from workgroup.member.blocking import Credentials
    assert Credentials is Security


def test_bad_construction_is_refused() -> None:
    with pytest.raises(ConfigError, match="bootstrap"):
        fence(bootstrap="no-port")
    with pytest.raises(WorkgroupError, match="ttl_s must be > 0"):
        fence(ttl_s=0)


def test_a_ttl_sets_the_expiry_and_an_expired_fence_sends_nothing() -> None:
    before = time.time()
    made = fence(ttl_s=30)
    assert made.expires_at is not None
    assert before + 30 <= made.expires_at <= time.time() + 30
    expired = fence(ttl_s=30, bootstrap="127.0.0.1:1")
    object.__setattr__(expired, "expires_at", time.time() - 5)
    started = time.monotonic()
    with pytest.raises(LeaseLostError, match="expired"):
        expired.commit("late")  # nothing listens at port 1: no request was tried
    with pytest.raises(LeaseLostError, match="expired"):
        expired.check()
    assert time.monotonic() - started < 1.0


def test_the_expiry_follows_the_wall_time_of_the_clock_it_is_made_and_used_with(
    scripted: list[Scripted],
) -> None:
    clock = FakeClock(wall_start_s=1_000.0)
    made = fence(ttl_s=30, clock=clock)
    assert made.expires_at == 1_030.0
    conn = Scripted(beats=[ErrorCode.NONE], commits=[ErrorCode.NONE], group=described())
    scripted.append(conn)
    clock.advance(30)  # at the expiry: still good
    made.check(clock=clock)
    made.commit("v", clock=clock)
    sent = len(conn.sent)
    clock.advance(0.5)  # past it, without sleeping
    with pytest.raises(LeaseLostError, match=r"expired 0\.5 s ago"):
        made.check(clock=clock)
    with pytest.raises(LeaseLostError, match="expired"):
        made.commit("late", clock=clock)
    assert len(conn.sent) == sent  # an expired fence sends nothing


async def test_a_leases_fence_expires_on_the_leases_clock() -> None:
    class OriginStore(FakeStore):
        def fence_origin(self) -> FenceOrigin:
            return FenceOrigin(("127.0.0.1:1",), PLAINTEXT, "g", "m-1", None, 3)

    clock = FakeClock(wall_start_s=7_000.0)
    held = lease(OriginStore(), clock=clock)
    await held.acquire()
    clock.advance(2)
    made = held.fence(ttl_s=60)
    assert made.expires_at == 7_062.0
    clock.advance(60.5)
    with pytest.raises(LeaseLostError, match=r"expired 0\.5 s ago"):
        made.check(clock=clock)  # nothing listens at port 1: no request was tried


def test_setting_the_wall_time_back_revives_a_fence_and_forward_expires_it(
    scripted: list[Scripted],
) -> None:
    """The expiry reads the wall time, not the monotonic time: a fence made on one
    machine is judged by another machine's wall clock (rule 5)."""
    clock = FakeClock(wall_start_s=5_000.0)
    made = fence(ttl_s=10, clock=clock)
    clock.set_wall(5_011.0)
    with pytest.raises(LeaseLostError, match=r"expired 1\.0 s ago"):
        made.check(clock=clock)
    clock.set_wall(5_009.0)
    scripted.append(Scripted(beats=[ErrorCode.NONE], group=described()))
    made.check(clock=clock)
    assert clock.monotonic() == 0.0


def test_a_value_that_cannot_be_stored_is_refused_before_sending() -> None:
    made = fence(bootstrap="127.0.0.1:1")
    with pytest.raises(CheckpointError, match="empty"):
        made.commit("")
    with pytest.raises(CheckpointError, match="over the limit"):
        made.commit("x" * 5000)


# --- rule 2: looking again after ILLEGAL_GENERATION, with scripted answers ----------------


class Scripted:
    """A coordinator connection that answers from the test's script."""

    def __init__(
        self,
        *,
        commits: list[ErrorCode] | None = None,
        beats: list[ErrorCode] | None = None,
        group: DescribedGroup,
        slot: int = 4,
    ) -> None:
        self.commits = commits or []
        self.beats = beats or []
        self.group = group
        self.slot = slot
        self.sent: list[object] = []

    def request(self, request: object, deadline: float) -> object:
        self.sent.append(request)
        if isinstance(request, OffsetCommit):
            (topic,) = request.topics
            error = self.commits.pop(0)
            return OffsetCommitResult(
                (CommitTopicResult(topic.name, (CommitPartitionResult(0, error),)),)
            )
        if isinstance(request, Heartbeat):
            return HeartbeatResult(self.beats.pop(0))
        if isinstance(request, DescribeGroups):
            return DescribeGroupsResult((self.group,))
        assert isinstance(request, OffsetFetch)
        partition = FetchedPartition(0, self.slot, "wg-key:7\nx")
        topic = FetchedTopic("workgroup-leases.g.0123", (partition,))
        return OffsetFetchResult((FetchedGroup("g", (topic,)),))

    def close(self) -> None:
        pass


def described(
    *,
    state: str = "Stable",
    member: str = "m-1",
    assigned: tuple[tuple[str, object], ...] = (("shard", 7),),
    owned: tuple[tuple[str, object], ...] = (("shard", 7),),
    generation: int = 5,
    others: tuple[tuple[str, bytes | tuple[tuple[str, object], ...]], ...] = (),
) -> DescribedGroup:
    """The group as DescribeGroups gives it; ``others``: other members and their
    assignments (raw bytes: as sent, undecodable ones too)."""
    codec = BinaryCodec()

    def assignment_of(resources: tuple[tuple[str, object], ...]) -> bytes:
        return codec.encode_assignment(
            AssignmentData(assigned=resources, generation=generation)  # type: ignore[arg-type]
        )

    def metadata_of(owned: tuple[tuple[str, object], ...]) -> bytes:
        return codec.encode_metadata(
            MemberMetadata(kinds=("shard",), owned=owned, owned_generation=generation - 1)  # type: ignore[arg-type]
        )

    members = [
        DescribedMember(member, "i-1", "c", "h", metadata_of(owned), assignment_of(assigned))
    ]
    for other, theirs in others:
        raw = theirs if isinstance(theirs, bytes) else assignment_of(theirs)
        members.append(DescribedMember(other, None, "c", "h", metadata_of(()), raw))
    return DescribedGroup(ErrorCode.NONE, "g", state, "workgroup", "sticky", tuple(members))


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Scripted]]:
    """Replaces the fence's pooled connection with the script in ``scripted[0]``."""
    holder: list[Scripted] = []

    @contextlib.contextmanager
    def connection(_fence: Fence) -> Iterator[Scripted]:
        yield holder[0]

    monkeypatch.setattr(fence_module, "_connection", connection)
    fence_module._generations.clear()
    yield holder
    fence_module._generations.clear()


def test_a_stale_generation_carries_on_when_the_member_still_holds_the_resource(
    scripted: list[Scripted],
) -> None:
    conn = Scripted(commits=[ErrorCode.ILLEGAL_GENERATION, ErrorCode.NONE], group=described())
    scripted.append(conn)
    made = fence()
    made.commit("v")
    commits = [r for r in conn.sent if isinstance(r, OffsetCommit)]
    assert [c.generation_id for c in commits] == [3, 5]
    # Remembered in this process: the next commit goes under 5 at once.
    conn.commits.append(ErrorCode.NONE)
    made.commit("w")
    assert [r.generation_id for r in conn.sent if isinstance(r, OffsetCommit)][-1] == 5


def test_a_stale_generation_carries_on_while_the_resource_is_being_revoked(
    scripted: list[Scripted],
) -> None:
    """Revoked in generation 5 (not in the member's assignment) but still claimed
    (its handler finishes its work) and nobody else's: the commit goes on."""
    group = described(assigned=(("shard", 8),), others=(("m-2", (("shard", 9),)),))
    conn = Scripted(commits=[ErrorCode.ILLEGAL_GENERATION, ErrorCode.NONE], group=group)
    scripted.append(conn)
    fence().commit("v")
    assert [r.generation_id for r in conn.sent if isinstance(r, OffsetCommit)] == [3, 5]


@pytest.mark.parametrize(
    ("group", "slot", "why"),
    [
        (described(member="someone-else"), 4, "not in group"),
        # Revoked, and the next owner already has it.
        (
            described(assigned=(("shard", 8),), others=(("m-2", (("shard", 7),)),)),
            4,
            "now assigned to member 'm-2'",
        ),
        # It came back in this generation: the member did not own it when it joined.
        (described(owned=()), 4, "no longer assigned"),
        (  # "7" is not 7
            described(assigned=(("shard", "7"),), others=(("m-2", (("shard", 7),)),)),
            4,
            "now assigned",
        ),
        # Revoked, and who has it cannot be read.
        (
            described(assigned=(("shard", 8),), others=(("m-2", b"\xff"),)),
            4,
            "cannot show nobody else has it",
        ),
        (described(), 5, "slot is at token 5"),
    ],
)
def test_a_stale_generation_ends_the_fence_unless_everything_holds(
    scripted: list[Scripted], group: DescribedGroup, slot: int, why: str
) -> None:
    conn = Scripted(commits=[ErrorCode.ILLEGAL_GENERATION], group=group, slot=slot)
    scripted.append(conn)
    with pytest.raises(LeaseLostError, match=why):
        fence().commit("v")
    assert len([r for r in conn.sent if isinstance(r, OffsetCommit)]) == 1


def test_no_member_details_end_the_fence_as_on_tansu(scripted: list[Scripted]) -> None:
    group = dataclasses.replace(
        described(),
        members=(DescribedMember("m-1", None, "", "", b"", b""),),
    )
    scripted.append(Scripted(commits=[ErrorCode.ILLEGAL_GENERATION], group=group))
    with pytest.raises(LeaseLostError, match="does not describe member assignments"):
        fence().commit("v")


def test_while_the_group_rebalances_the_fence_waits_then_times_out(
    scripted: list[Scripted],
) -> None:
    conn = Scripted(
        commits=[ErrorCode.ILLEGAL_GENERATION] * 100, group=described(state="CompletingRebalance")
    )
    scripted.append(conn)
    with pytest.raises(FenceTimeoutError, match="rebalancing"):
        fence().commit("v", timeout_s=0.3)
    # A described generation no newer than the fence's proves nothing either.
    conn2 = Scripted(commits=[ErrorCode.ILLEGAL_GENERATION] * 100, group=described(generation=3))
    scripted[0] = conn2
    with pytest.raises(FenceTimeoutError):
        fence().commit("v", timeout_s=0.3)


def pauses_of(
    scripted: list[Scripted], monkeypatch: pytest.MonkeyPatch, conn: Scripted
) -> list[float]:
    """The fence's pauses (not slept) while it commits through ``conn``."""
    pauses: list[float] = []
    monkeypatch.setattr(fence_module.time, "sleep", pauses.append)
    scripted[:] = [conn]
    fence().commit("v", timeout_s=30)
    return pauses


def test_while_the_group_rebalances_the_fence_looks_again_often_not_later_and_later(
    scripted: list[Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A moved shard's last batch is written during the cut-over's rounds: the fence
    looks again every REBALANCE_POLL_S, so the batch goes on once the round ends."""
    in_round = [ErrorCode.REBALANCE_IN_PROGRESS] * 8
    conn = Scripted(commits=[*in_round, ErrorCode.NONE], group=described())
    pauses = pauses_of(scripted, monkeypatch, conn)
    assert len(pauses) == 8
    assert all(pause <= fence_module.REBALANCE_POLL_S for pause in pauses)
    # A stale generation while the group is described mid-round: the same.
    stale = [ErrorCode.ILLEGAL_GENERATION] * 8
    conn = Scripted(commits=[*stale, ErrorCode.NONE], group=described(state="CompletingRebalance"))
    pauses = pauses_of(scripted, monkeypatch, conn)
    assert len(pauses) == 8
    assert all(pause <= fence_module.REBALANCE_POLL_S for pause in pauses)


def test_an_unreachable_coordinator_is_tried_again_later_and_later(
    scripted: list[Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    errors = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 6
    conn = Scripted(commits=[*errors, ErrorCode.NONE], group=described())
    pauses = pauses_of(scripted, monkeypatch, conn)
    assert len(pauses) == 6
    assert pauses[-1] > 4 * fence_module.REBALANCE_POLL_S  # it backs off


@pytest.mark.parametrize(
    "error",
    [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID, ErrorCode.GROUP_ID_NOT_FOUND],
)
def test_a_gone_member_ends_the_fence_at_once(scripted: list[Scripted], error: ErrorCode) -> None:
    conn = Scripted(commits=[error], group=described())
    scripted.append(conn)
    with pytest.raises(LeaseLostError, match=error.name):
        fence().commit("v")
    assert not any(isinstance(r, DescribeGroups) for r in conn.sent)


def test_check_writes_nothing_and_looks_again_on_a_rebalance(scripted: list[Scripted]) -> None:
    conn = Scripted(
        beats=[ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.NONE], group=described(generation=6)
    )
    scripted.append(conn)
    fence().check()
    assert not any(isinstance(r, OffsetCommit) for r in conn.sent)
    beats = [r for r in conn.sent if isinstance(r, Heartbeat)]
    assert [b.generation_id for b in beats] == [3, 6]
    assert sum(isinstance(r, OffsetFetch) for r in conn.sent) == 3  # each answer, and the look


def test_check_of_a_slot_with_a_newer_token_ends_the_fence(scripted: list[Scripted]) -> None:
    scripted.append(Scripted(beats=[ErrorCode.NONE], group=described(), slot=9))
    with pytest.raises(LeaseLostError, match="slot is at token 9"):
        fence().check()
