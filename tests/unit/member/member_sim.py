"""A deterministic simulation of members and a coordinator on a fake clock.

Messages take ``latency_ms``; callbacks take ``callback_ms`` (per member);
nothing sleeps.  Every ownership change is written to an event log so that
tests can check that no resource was ever owned by two members at once.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from workgroup.assignors.base import Assignment, AssignmentInput
from workgroup.coordinator.actions import Reply
from workgroup.errors import WorkgroupError
from workgroup.kafka.messages import GroupRequest, GroupResult
from workgroup.member.actions import (
    Action,
    Closed,
    Failed,
    FindCoordinator,
    InvokeCallback,
    RunAssignor,
    SendRequest,
)
from workgroup.member.config import MemberConfig
from workgroup.member.errors import CoordinatorUnavailableError
from workgroup.member.round_stages import RoundResult, run_round_stages
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.types import Resource


class Coordinator(Protocol):
    def handle(self, now: int, token: Any, request: GroupRequest) -> list[Reply]: ...
    def tick(self, now: int) -> list[Reply]: ...
    def next_deadline(self) -> int | None: ...


# --- assignors used by the tests --------------------------------------------


class StickyTestAssignor:
    """Keeps valid owned resources, then balances (max - min <= 1) by moving the fewest."""

    name = "sticky-test"
    supports_cooperative = True

    def assign(self, data: AssignmentInput) -> Assignment:
        members = sorted(data.members)
        all_resources = [
            (kind, key) for kind in sorted(data.resources) for key in data.resources[kind]
        ]
        out: dict[str, list[Resource]] = {m: [] for m in members}
        if not members:
            return out
        taken: set[Resource] = set()
        valid = set(all_resources)
        by_generation = sorted(members, key=lambda m: -data.members[m].generation)
        for m in by_generation:
            for r in data.members[m].owned:
                if r in valid and r not in taken:
                    out[m].append(r)
                    taken.add(r)
        n, k = len(all_resources), len(members)
        low, extra = divmod(n, k)
        # Members keep up to their quota; the first `extra` heaviest keep one more.
        order = sorted(members, key=lambda m: (-len(out[m]), m))
        quota = {m: low + (1 if i < extra else 0) for i, m in enumerate(order)}
        free = [r for r in all_resources if r not in taken]
        for m in members:
            while len(out[m]) > quota[m]:
                free.append(out[m].pop())
        free.sort(key=all_resources.index)
        for m in members:
            while len(out[m]) < quota[m] and free:
                out[m].append(free.pop(0))
        return out


class RoundRobinTestAssignor:
    name = "round-robin-test"
    supports_cooperative = False

    def assign(self, data: AssignmentInput) -> Assignment:
        members = sorted(data.members)
        out: dict[str, list[Resource]] = {m: [] for m in members}
        resources = [(kind, key) for kind in sorted(data.resources) for key in data.resources[kind]]
        for i, r in enumerate(resources):
            if members:
                out[members[i % len(members)]].append(r)
        return out


# --- the simulation ---------------------------------------------------------


@dataclass
class SimMember:
    name: str
    machine: MemberMachine
    callback_ms: int = 0
    assign_ms: int = 0
    #: Requests to the coordinator are dropped (a network partition).
    partitioned: bool = False
    actions: list[Action] = field(default_factory=list)
    callbacks: list[InvokeCallback] = field(default_factory=list)
    requests: list[SendRequest] = field(default_factory=list)
    errors: list[WorkgroupError] = field(default_factory=list)
    closed: bool = False
    tick_at: int | None = None
    #: A frozen process (SIGSTOP): nothing runs until it is resumed.
    paused: bool = False
    deferred: list[Callable[[], None]] = field(default_factory=list)
    #: Revocations / losses whose callback has not completed yet.
    stopping: dict[int, InvokeCallback] = field(default_factory=dict)


@dataclass(frozen=True)
class OwnershipEvent:
    at: int
    member: str
    kind: str  # "start" (assigned) or "stop" (revoked / lost, when the callback completes)
    resource: Resource
    generation: int


@dataclass
class Network:
    """A simulated network: each message takes a random latency and may be lost.

    Messages keep their order on one member's connection (TCP), but not across
    connections: a member's request may overtake another's.  A lost request or
    response looks to the member like a request that timed out.
    """

    rng: Any  # random.Random
    min_ms: int = 1
    max_ms: int = 1
    loss: float = 0.0
    #: The last delivery time per (member, direction): FIFO within a connection.
    _last: dict[tuple[int, str], int] = field(default_factory=dict)
    lost: int = 0
    delivered: int = 0

    def delivery(self, now: int, member: object, direction: str) -> int | None:
        """When a message sent now arrives, or ``None`` if it is lost."""
        if self.loss and self.rng.random() < self.loss:
            self.lost += 1
            return None
        self.delivered += 1
        key = (id(member), direction)
        at = max(now + self.rng.randint(self.min_ms, self.max_ms), self._last.get(key, 0))
        self._last[key] = at
        return at


class Simulation:
    def __init__(
        self, coordinator: Coordinator, *, latency_ms: int = 1, network: Network | None = None
    ) -> None:
        self.coordinator = coordinator
        self.latency_ms = latency_ms
        self.network = network
        self.now = 0
        self.members: dict[str, SimMember] = {}
        self.log: list[OwnershipEvent] = []
        self.coordinator_down = False
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._coordinator_tick_at: int | None = None
        self.requests_seen: list[tuple[str, GroupRequest]] = []

    # --- members ------------------------------------------------------------

    def add(
        self,
        name: str,
        config: MemberConfig,
        catalog: Mapping[str, Sequence[str | int]],
        *,
        callback_ms: int = 0,
        assign_ms: int = 0,
        start: bool = True,
    ) -> SimMember:
        member = SimMember(name, MemberMachine(config, catalog), callback_ms, assign_ms)
        self.members[name] = member
        if start:
            self._apply(member, member.machine.start(self.now))
        return member

    def close(self, name: str) -> None:
        member = self.members[name]
        self._apply(member, member.machine.close(self.now))

    def drain(self, name: str) -> None:
        """The member drains: it stays in the group and takes nothing."""
        member = self.members[name]
        self._apply(member, member.machine.drain(self.now))

    def kill(self, name: str) -> None:
        """The process dies: nothing more is sent or received; what it owned stops."""
        member = self.members.pop(name)
        for r in sorted(member.machine.owned, key=repr):
            self.log.append(OwnershipEvent(self.now, name, "stop", r, -1))
        member.closed = True

    def pause(self, name: str) -> None:
        """Freeze the process: its application stops working on what it owns."""
        member = self.members[name]
        member.paused = True
        # A frozen application works on nothing, including what it was revoking.
        # (If it resumes after its session ran out, a revocation still running
        # overlaps the new owner: only fencing with the generation guards that.)
        frozen = set(member.machine.owned)
        for cb in member.stopping.values():
            frozen.update(cb.resources)
        for r in sorted(frozen, key=repr):
            self.log.append(OwnershipEvent(self.now, name, "stop", r, -2))

    def resume(self, name: str) -> None:
        """Thaw: timers fire first (a session that ran out is noticed at once)."""
        member = self.members[name]
        member.paused = False
        self._apply(member, member.machine.tick(self.now))
        for r in sorted(member.machine.owned, key=repr):
            self.log.append(OwnershipEvent(self.now, name, "start", r, -2))
        deferred, member.deferred = member.deferred, []
        for fn in deferred:
            fn()

    def set_resources(self, catalog: Mapping[str, Sequence[str | int]]) -> None:
        for member in list(self.members.values()):
            self._apply(member, member.machine.resources_changed(self.now, catalog))

    # --- running ------------------------------------------------------------

    def at(self, when: int, fn: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (when, next(self._seq), fn))

    def run_for(self, ms: int) -> None:
        self.run_until(lambda: False, limit_ms=ms)

    def run_until(self, done: Callable[[], bool], *, limit_ms: int = 120_000) -> bool:
        end = self.now + limit_ms
        same_time = 0
        while not done():
            self._schedule_ticks()
            if not self._queue or self._queue[0][0] > end:
                self.now = end
                return done()
            when, _, fn = heapq.heappop(self._queue)
            if when > self.now:
                self.now, same_time = when, 0
            else:
                same_time += 1
                # A machine that keeps asking to be ticked now without progress spins.
                assert same_time < 100_000, f"event storm at {self.now} ms"
            fn()
        return True

    def stable(self) -> bool:
        live = [m for m in self.members.values() if not m.closed]
        if not live or any(m.machine.state is not State.STABLE for m in live):
            return False
        generations = {m.machine.generation for m in live}
        settled = all(m.machine.settled for m in live)
        return len(generations) == 1 and settled and not self._pending_messages()

    def generation(self) -> int:
        return max(m.machine.generation for m in self.members.values() if not m.closed)

    def _pending_messages(self) -> bool:
        return any(getattr(fn, "message", False) for _, _, fn in self._queue)

    def assignment(self) -> dict[str, set[Resource]]:
        return {name: set(m.machine.owned) for name, m in self.members.items() if not m.closed}

    def check_exclusive(self) -> None:
        """No resource was ever owned by two members at the same time."""
        owner: dict[Resource, str] = {}
        for event in self.log:  # appended in time order
            if event.kind == "stop":
                if owner.get(event.resource) == event.member:
                    del owner[event.resource]
            else:
                current = owner.get(event.resource)
                if current is not None and current != event.member:
                    history = "\n".join(str(e) for e in self.log if e.resource == event.resource)
                    raise AssertionError(
                        f"{event.resource} given to {event.member} at {event.at} ms "
                        f"while {current} still owns it; its history:\n{history}"
                    )
                owner[event.resource] = event.member

    # --- plumbing -----------------------------------------------------------

    def _schedule_ticks(self) -> None:
        for member in self.members.values():
            if member.paused or member.closed:
                continue
            deadline = member.machine.next_deadline()
            if deadline is not None and member.tick_at != deadline:
                member.tick_at = deadline
                self.at(deadline, self._ticker(member, deadline))
        deadline = self.coordinator.next_deadline()
        if deadline is not None and deadline != self._coordinator_tick_at:
            self._coordinator_tick_at = deadline
            self.at(deadline, self._coordinator_ticker(deadline))

    def _ticker(self, member: SimMember, deadline: int) -> Callable[[], None]:
        def tick() -> None:
            if member.tick_at == deadline:
                member.tick_at = None
            if not member.closed and not member.paused:
                self._apply(member, member.machine.tick(self.now))

        return tick

    def _coordinator_ticker(self, deadline: int) -> Callable[[], None]:
        def tick() -> None:
            if self._coordinator_tick_at == deadline:
                self._coordinator_tick_at = None
            self._deliver_replies(self.coordinator.tick(self.now))

        return tick

    def _message(self, fn: Callable[[], None]) -> Callable[[], None]:
        fn.message = True  # type: ignore[attr-defined]
        return fn

    def _apply(self, member: SimMember, actions: list[Action]) -> None:
        member.actions.extend(actions)
        for action in actions:
            if isinstance(action, FindCoordinator):
                self.at(self.now + self.latency_ms, self._message(lambda m=member: self._found(m)))
            elif isinstance(action, SendRequest):
                member.requests.append(action)
                arrives = self._arrival(member, "up")
                if arrives is None:  # lost on the way: the member's request times out
                    self._time_out(member, action)
                    continue
                self.at(
                    arrives,
                    self._message(lambda m=member, a=action: self._to_coordinator(m, a)),
                )
            elif isinstance(action, InvokeCallback):
                member.callbacks.append(action)
                if action.kind != "on_assigned":
                    member.stopping[action.callback_id] = action
                # Owning starts when on_assigned is invoked.  on_lost tells the
                # application that the resources are gone already (Kafka's
                # onPartitionsLost): ownership ends when it is issued, whereas an
                # on_revoked hand-over ends when the callback completes.
                kind = {"on_assigned": "start", "on_lost": "stop"}.get(action.kind)
                if kind is not None:
                    for r in action.resources:
                        self.log.append(
                            OwnershipEvent(self.now, member.name, kind, r, action.generation)
                        )
                self.at(
                    self.now + member.callback_ms,
                    lambda m=member, a=action: self._callback_done(m, a),
                )
            elif isinstance(action, RunAssignor):
                try:
                    result: RoundResult | WorkgroupError = run_round_stages(action.stages)
                except WorkgroupError as exc:
                    result = exc
                self.at(
                    self.now + member.assign_ms,
                    lambda m=member, a=action, r=result: self._assigned(m, a, r),
                )
            elif isinstance(action, Failed):
                member.errors.append(action.error)
            elif isinstance(action, Closed):
                member.closed = True

    def _assigned(
        self, member: SimMember, action: RunAssignor, result: RoundResult | WorkgroupError
    ) -> None:
        if member.paused:
            member.deferred.append(lambda: self._assigned(member, action, result))
            return
        if not member.closed:
            self._apply(member, member.machine.assignment_done(self.now, action.run_id, result))

    def _callback_done(self, member: SimMember, action: InvokeCallback) -> None:
        if member.paused:
            member.deferred.append(lambda: self._callback_done(member, action))
            return
        member.stopping.pop(action.callback_id, None)
        if action.kind == "on_revoked":
            for r in action.resources:
                self.log.append(OwnershipEvent(self.now, member.name, "stop", r, action.generation))
        if member.name in self.members and self.members[member.name] is member:
            self._apply(member, member.machine.callback_done(self.now, action.callback_id))

    def _found(self, member: SimMember) -> None:
        if member.closed:
            return
        if member.paused:
            member.deferred.append(lambda: self._found(member))
            return
        if self.coordinator_down or member.partitioned:
            error = CoordinatorUnavailableError("no coordinator")
            self._apply(member, member.machine.find_coordinator_failed(self.now, error))
        else:
            self._apply(member, member.machine.coordinator_found(self.now))

    def _arrival(self, member: SimMember, direction: str) -> int | None:
        if self.network is None:
            return self.now + self.latency_ms
        return self.network.delivery(self.now, member, direction)

    def _time_out(self, member: SimMember, action: SendRequest) -> None:
        def failed() -> None:
            if member.paused:
                member.deferred.append(failed)
                return
            if self.members.get(member.name) is member and not member.closed:
                self._apply(
                    member,
                    member.machine.request_failed(
                        self.now, action.request_id, CoordinatorUnavailableError("timed out")
                    ),
                )

        self.at(self.now + action.timeout_ms, failed)

    def _to_coordinator(self, member: SimMember, action: SendRequest) -> None:
        if member.closed and self.members.get(member.name) is not member:
            return
        if self.coordinator_down or member.partitioned:
            self._time_out(member, action)
            return
        self.requests_seen.append((member.name, action.request))
        replies = self.coordinator.handle(
            self.now, (member, action.request_id, action), action.request
        )
        self._deliver_replies(replies)

    def _deliver_replies(self, replies: list[Any]) -> None:
        for reply in replies:
            if not isinstance(reply, Reply):
                continue
            member, _request_id, request = reply.token
            arrives = self._arrival(member, "down")
            if arrives is None:  # the answer is lost: the member's request times out
                self._time_out(member, request)
                continue
            self.at(
                arrives,
                self._message(
                    lambda m=member, req=request, res=reply.result: self._response(m, req, res)
                ),
            )

    def _response(self, member: SimMember, request: SendRequest, result: GroupResult) -> None:
        if self.members.get(member.name) is not member:
            return
        if member.partitioned:  # the answer never arrives: the request times out
            self._time_out(member, request)
            return
        request_id = request.request_id
        if member.paused:
            member.deferred.append(lambda: self._response(member, request, result))
            return
        self._apply(member, member.machine.response(self.now, request_id, result))


def random_faults(
    sim: Simulation,
    rng: Any,  # random.Random
    *,
    ops: Sequence[str],
    rounds: int,
    restart: Callable[[str], None],
    dead: list[str],
    min_wait_ms: int,
    max_wait_ms: int,
    partition_ms: tuple[int, int] = (500, 18_000),
) -> None:
    """``rounds`` random faults, drawn from ``ops`` ("kill", "pause", "close",
    "partition", "restart", "wait"), each followed by a random wait; frozen members
    are thawed at random and all of them at the end.  ``restart(name)`` adds a
    member back; ``dead`` holds the names that may be restarted."""
    paused: list[str] = []
    for _ in range(rounds):
        live = [n for n in sim.members if n not in paused and not sim.members[n].closed]
        op = rng.choice(ops)
        if op == "kill" and len(live) > 1:
            victim = rng.choice(live)
            sim.kill(victim)
            dead.append(victim)
        elif op == "pause" and len(live) > 1:
            victim = rng.choice(live)
            sim.pause(victim)
            paused.append(victim)
        elif op == "close" and len(live) > 1:
            victim = rng.choice(live)
            sim.close(victim)
            sim.run_until(lambda v=victim: sim.members[v].closed, limit_ms=60_000)
            sim.members.pop(victim)
            dead.append(victim)
        elif op == "partition" and live:
            member = sim.members[rng.choice(live)]
            member.partitioned = True
            sim.at(
                sim.now + rng.randrange(*partition_ms),
                lambda m=member: setattr(m, "partitioned", False),
            )
        elif op == "restart" and dead:
            restart(dead.pop(rng.randrange(len(dead))))
        sim.run_for(rng.randrange(min_wait_ms, max_wait_ms))
        if paused and rng.random() < 0.6:
            sim.resume(paused.pop(rng.randrange(len(paused))))
    for name in paused:
        sim.resume(name)


class EmbeddedCoordinator:
    """The embedded coordinator's sans-I/O core behind the simulation's interface."""

    def __init__(self, **config: Any) -> None:
        from workgroup.coordinator.config import CoordinatorConfig
        from workgroup.coordinator.coordinator import GroupCoordinator
        from workgroup.testing.coordinator import sequential_member_ids

        # Sequential member ids keep every simulated run reproducible.
        self.core = GroupCoordinator(
            CoordinatorConfig(**config), member_id_factory=sequential_member_ids()
        )

    def handle(self, now: int, token: Any, request: GroupRequest) -> list[Reply]:
        return [a for a in self.core.handle(now, token, request) if isinstance(a, Reply)]

    def tick(self, now: int) -> list[Reply]:
        return [a for a in self.core.expire(now) if isinstance(a, Reply)]

    def next_deadline(self) -> int | None:
        return self.core.next_deadline_ms()
