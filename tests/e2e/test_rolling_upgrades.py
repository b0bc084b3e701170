"""Rolling upgrades with real ``workgroup member`` processes.

(a) Protocol version upgrade, phase by phase as in the client-side assignment
    proposal: A, B and C speak v0; each is restarted advertising [v1, v0]; the
    group stays on v0 until the last one is upgraded, then moves to v1; then
    each is restarted advertising [v1] only.
(b) Eager to cooperative while running: [range] -> [cooperative-sticky, range]
    -> [cooperative-sticky].
(c) Version probing: a leader that only reads metadata v1 receives v2 metadata,
    assigns with v1 and tells the others, who rejoin speaking v1; once the old
    member is upgraded the group goes back up to v2.

After every step the chosen protocol is checked on every member's events, and
the ownership checker verifies over all logs so far that no resource was ever
owned twice and that every resource is owned exactly once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from members import Event, MemberProcess, Members, backend, shards, wait_converged

from workgroup.admin import describe_group
from workgroup.protocol import LATEST_VERSION
from workgroup.testing.ownership import check_ownership

pytestmark = pytest.mark.slow

RESOURCES = 12
EXPECTED = shards(RESOURCES)
#: Tansu holds every JoinGroup for about half the session timeout: keep it short.
SESSION_MS = {"embedded": 3000, "tansu": 2000}
STEP_TIMEOUT_S = 20.0

TANSU_NO_VOTE = (
    "Tansu has no preference vote: a group keeps the first protocol of the first "
    "JoinGroup, so it never moves to the upgraded protocol and a member advertising "
    "only the new one is refused with INCONSISTENT_GROUP_PROTOCOL"
)


@pytest.fixture
def members(request: pytest.FixtureRequest) -> Iterator[Members]:
    backend_name = request.param
    with (
        backend(backend_name) as address,
        Members(
            address,
            f"{request.node.originalname}-{uuid.uuid4().hex[:8]}",
            resources=(f"shard={RESOURCES}",),
            session_timeout_ms=SESSION_MS[backend_name],
            heartbeat_interval_ms=300,
        ) as running,
    ):
        running.backend = backend_name
        yield running


def protocol_args(*specs: str) -> list[str]:
    return [arg for spec in specs for arg in ("--protocol", spec)]


class Rollout:
    """Restarts members one at a time and checks the group after each step."""

    def __init__(self, members: Members, *, static: bool = False) -> None:
        self.members = members
        self.static = static
        self.current: dict[str, MemberProcess] = {}
        self.timings: list[tuple[str, float]] = []

    def _launch(self, name: str, args: tuple[str, ...]) -> MemberProcess:
        instance_id = f"instance-{name}" if self.static else None
        process = self.members.start(name, *args, instance_id=instance_id)
        self.current[name] = process
        return process

    def start(self, name: str, *args: str, expect: str) -> dict[str, Event]:
        began = time.monotonic()
        self._launch(name, args)
        return self.settle(f"start {name}", began, expect)

    def restart(self, name: str, *args: str, expect: str) -> dict[str, Event]:
        """Stop ``name`` cleanly and start it again (static members keep their id)."""
        began = time.monotonic()
        assert self.current[name].terminate() == 0
        self._launch(name, args)
        return self.settle(f"restart {name} with {args}", began, expect)

    def stop(self, name: str, *, expect: str) -> dict[str, Event]:
        began = time.monotonic()
        assert self.current.pop(name).terminate() == 0
        return self.settle(f"stop {name}", began, expect)

    def settle(self, step: str, began: float, expect: str) -> dict[str, Event]:
        running = list(self.current.values())
        converged = wait_converged(running, EXPECTED, STEP_TIMEOUT_S, protocol=expect)
        self.timings.append((step, time.monotonic() - began))
        assert all(p.alive for p in running), step
        check_ownership(self.members.logs(), EXPECTED).raise_for_violations()
        return converged


TANSU_STATIC = (
    "Tansu's static membership does not settle: it answers two JoinGroup rounds with "
    "the same generation, moves the leadership and answers heartbeats with "
    "UNKNOWN_MEMBER_ID, so a third static member never completes its join (librdkafka "
    "static groups fail on Tansu the same way)"
)


@pytest.mark.parametrize(
    "members", ["embedded", pytest.param("tansu", marks=pytest.mark.tansu)], indirect=True
)
@pytest.mark.parametrize(
    ("assignor", "membership"),
    [
        ("round-robin", "dynamic"),
        ("cooperative-sticky", "dynamic"),
        ("cooperative-sticky", "static"),
    ],
)
def test_protocol_version_upgrade(
    members: Members, assignor: str, membership: str, request: pytest.FixtureRequest
) -> None:
    """Static members restart under their instance id: the coordinator replaces
    them without waiting for a session, and must still notice the new protocols."""
    if members.backend == "tansu":
        reason = TANSU_STATIC if membership == "static" else TANSU_NO_VOTE
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    v0, v1 = f"{assignor}:0", f"{assignor}:1"
    old, new = f"{assignor}.v0", f"{assignor}.v1"
    rollout = Rollout(members, static=membership == "static")
    # Phase 1: A, B and C speak v0.
    for name in "abc":
        rollout.start(name, *protocol_args(v0), expect=old)
    # Phases 2 and 3: the group stays on v0 while anyone lacks v1.
    rollout.restart("a", *protocol_args(v1, v0), expect=old)
    rollout.restart("b", *protocol_args(v1, v0), expect=old)
    # Phase 4: the last upgrade lets the coordinator choose v1.
    rollout.restart("c", *protocol_args(v1, v0), expect=new)
    # Dropping v0 keeps the group on v1 throughout.
    for name in "abc":
        rollout.restart(name, *protocol_args(v1), expect=new)
    print(rollout.timings)


BACKENDS_B = [
    "embedded",
    pytest.param(
        "tansu", marks=[pytest.mark.tansu, pytest.mark.xfail(strict=True, reason=TANSU_NO_VOTE)]
    ),
]


def revocations(process: MemberProcess, since: float) -> int:
    return sum(1 for e in process.snapshot() if e["event"] == "revoked" and e["t"] >= since)


@pytest.mark.parametrize("members", BACKENDS_B, indirect=True)
def test_eager_to_cooperative_migration(members: Members) -> None:
    eager = protocol_args("range:1")
    both = protocol_args("cooperative-sticky:1", "range:1")
    cooperative = protocol_args("cooperative-sticky:1")
    rollout = Rollout(members)
    for name in "abc":
        rollout.start(name, *eager, expect="range.v1")
    # Eager: a member joining makes everyone give up everything first.
    joined_at = time.time()
    rollout.start("d", *eager, expect="range.v1")
    assert all(revocations(rollout.current[n], joined_at) >= 1 for n in "abc")
    rollout.stop("d", expect="range.v1")

    rollout.restart("a", *both, expect="range.v1")
    rollout.restart("b", *both, expect="range.v1")
    rollout.restart("c", *both, expect="cooperative-sticky.v1")
    for name in "abc":
        rollout.restart(name, *cooperative, expect="cooperative-sticky.v1")

    # Cooperative now: a joining member takes resources without anyone giving
    # up what they keep, so each old member revokes only what moves.
    before = {n: rollout.current[n].owned() for n in "abc"}
    joined_at = time.time()
    rollout.start("d", *cooperative, expect="cooperative-sticky.v1")
    for name in "abc":
        after = rollout.current[name].owned()
        assert after <= before[name], name  # sticky: nothing new, only moves away
        revoked = {
            (k, v)
            for e in rollout.current[name].snapshot()
            if e["event"] == "revoked" and e["t"] >= joined_at
            for k, v in e["resources"]
        }
        assert revoked == before[name] - after, name
    print(rollout.timings)


#: The sessions of a test that pauses the leader (see :class:`PausedLeader`): the
#: pause spans a member's stop and a process's start, which took 4.5 s on a loaded
#: 2-core machine, over half of a 6 s session.
PAUSABLE_SESSION_MS = 10_000


def wait_rebalancing(members: Members, timeout_s: float = STEP_TIMEOUT_S) -> str:
    """Wait until DescribeGroups no longer answers Stable (the embedded coordinator
    says PreparingRebalance, Tansu Unknown) and return the state it answers."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = asyncio.run(describe_group(members.bootstrap, members.group, timeout_s=5)).state
        if state != "Stable":
            return state
        if time.monotonic() > deadline:
            pytest.fail(f"the group never left Stable in {timeout_s} s")
        time.sleep(0.02)


def wait_joining(process: MemberProcess, timeout_s: float = STEP_TIMEOUT_S) -> None:
    """Wait until ``process`` (started with ``log_level="debug"``) has its member id
    from the coordinator: its JoinGroup with that id goes at once."""
    deadline = time.monotonic() + timeout_s
    while "reason='member id required'" not in process.log_path.read_text(errors="replace"):
        if time.monotonic() > deadline or not process.alive:
            pytest.fail(f"{process.name} never reached the coordinator:\n{process.stderr_tail()}")
        time.sleep(0.02)


class PausedLeader:
    """The group's leader stopped (SIGSTOP): a rebalance cannot end without it
    (the embedded coordinator waits for its JoinGroup, Tansu for its SyncGroup), so
    what the test does meanwhile happens during that rebalance.  The pause must stay
    well within the leader's session, or the coordinator drops it instead: it may
    last half of it."""

    def __init__(self, rollout: Rollout, converged: dict[str, Event]) -> None:
        name = next(n for n, e in converged.items() if e["leader"])
        self.name = name
        self.process = rollout.current[name]
        self.session_s = rollout.members.defaults["session_timeout_ms"] / 1000

    def __enter__(self) -> PausedLeader:
        self.began = time.monotonic()
        self.process.pause()
        return self

    def __exit__(self, *exc: object) -> None:
        self.paused_s = time.monotonic() - self.began
        self.process.resume()
        if exc[0] is None and self.paused_s > self.session_s / 2:
            pytest.fail(
                f"the leader was paused {self.paused_s:.2f} s, over half its session "
                f"({self.session_s:.1f} s)"
            )


@pytest.mark.parametrize(
    "members", ["embedded", pytest.param("tansu", marks=pytest.mark.tansu)], indirect=True
)
def test_upgraded_member_joins_during_a_rebalance(members: Members) -> None:
    """The first upgraded member comes back while the group rebalances after another
    departure: a follower stops for its upgrade, then the leader is paused from
    before d's departure until the follower's upgraded process has reached the
    coordinator, so that rebalance is under way when it joins."""
    # The pause spans a member's stop and a process's start: sessions long enough
    # for it on a busy machine.
    members.defaults["session_timeout_ms"] = PAUSABLE_SESSION_MS
    eager = protocol_args("range:1")
    rollout = Rollout(members)
    for name in "abcd":
        converged = rollout.start(name, *eager, expect="range.v1")
    leader = PausedLeader(rollout, converged)
    follower = next(n for n in "abc" if n != leader.name)
    rollout.stop(follower, expect="range.v1")
    with leader:
        assert rollout.current.pop("d").terminate() == 0
        state = wait_rebalancing(members)
        upgraded = members.start(
            follower, *protocol_args("cooperative-sticky:1", "range:1"), log_level="debug"
        )
        rollout.current[follower] = upgraded
        wait_joining(upgraded)
    rollout.settle(f"upgraded {follower} joins during a rebalance", leader.began, "range.v1")
    print(f"{state} after the departure; the leader paused {leader.paused_s:.2f} s")
    print(rollout.timings)


# Not on Tansu, where neither success nor failure is certain: Tansu 0.6 keeps a
# leader that leaves (LeaveGroup) while the group rebalances as the leader named
# in every later JoinGroup answer, so no SyncGroup completes; it forgets that
# leader only when two overlapping requests make it reload the group from its
# store, which happens after some seconds or not within the test's wait. With
# one request at a time the deviation is certain: on the wire it is
# test_leader_leaving_during_a_rebalance_is_not_the_next_leader in
# tests/interop/test_protocol_rules.py, a strict expected failure on Tansu.
@pytest.mark.parametrize("members", ["embedded"], indirect=True)
def test_upgraded_leader_leaves_during_a_rebalance(members: Members) -> None:
    """The leader is stopped for its upgrade while the group rebalances after a
    departure (it is paused until the coordinator is seen rebalancing, so it cannot
    end that rebalance first), and its upgraded process joins."""
    eager = protocol_args("range:1")
    rollout = Rollout(members)
    for name in "abcd":
        converged = rollout.start(name, *eager, expect="range.v1")
    leader = PausedLeader(rollout, converged)
    with leader:
        assert rollout.current.pop("d").terminate() == 0
        state = wait_rebalancing(members)
    rollout.restart(
        leader.name, *protocol_args("cooperative-sticky:1", "range:1"), expect="range.v1"
    )
    print(f"{state} after the departure; the leader paused {leader.paused_s:.2f} s")
    print(rollout.timings)


@pytest.mark.parametrize(
    "members", ["embedded", pytest.param("tansu", marks=pytest.mark.tansu)], indirect=True
)
def test_version_probing(members: Members) -> None:
    rollout = Rollout(members)
    old = ("--metadata-version", "1")
    # A is an older release and leads the group (the first member stays leader).
    converged = rollout.start("a", *old, expect="cooperative-sticky.v1")
    assert converged["a"]["leader"]
    assert converged["a"]["metadata_version"] == 1
    # B and C send the latest metadata; A reads what it knows, assigns with v1
    # and has them rejoin speaking v1.
    for name in "bc":
        converged = rollout.start(name, expect="cooperative-sticky.v1")
        assert converged["a"]["leader"]
        assert {e["metadata_version"] for e in converged.values()} == {1}
    assert_quiet(rollout)
    # A is upgraded; the new leader finds that everyone reads the latest and says so.
    converged = rollout.restart("a", expect="cooperative-sticky.v1")
    assert_eventually_version(rollout, LATEST_VERSION)
    assert_quiet(rollout)
    # A new leader that is older than a member: C is downgraded while B leads.
    leader = next(n for n, e in converged.items() if e["leader"])
    follower = next(n for n in "abc" if n != leader)
    rollout.restart(follower, *old, expect="cooperative-sticky.v1")
    assert_eventually_version(rollout, 1)
    assert_quiet(rollout)
    print(rollout.timings)


def assert_eventually_version(rollout: Rollout, version: int) -> None:
    running = list(rollout.current.values())
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while True:
        converged = wait_converged(running, EXPECTED, STEP_TIMEOUT_S)
        if {e["metadata_version"] for e in converged.values()} == {version}:
            return
        assert time.monotonic() < deadline, {n: e["metadata_version"] for n, e in converged.items()}
        time.sleep(0.1)


def assert_quiet(rollout: Rollout, seconds: float = 1.5) -> None:
    """Never a stuck or looping group: nothing happens once it has converged."""
    counts = {n: len(p.snapshot()) for n, p in rollout.current.items()}
    time.sleep(seconds)
    assert {n: len(p.snapshot()) for n, p in rollout.current.items()} == counts
    assert all(p.alive for p in rollout.current.values())
    check_ownership(rollout.members.logs(), EXPECTED).raise_for_violations()
