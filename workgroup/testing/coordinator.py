"""Drive the sans-I/O coordinator in memory: a recording driver on a fake clock.

Used by the coordinator's own tests and by anything else that wants a
coordinator without sockets (member state machine tests, simulations)::

    h = CoordinatorHarness()
    a = h.send(join_request("g"))            # MEMBER_ID_REQUIRED (v4+)
    member_id = h.result(a, JoinGroupResult).member_id
    b = h.send(join_request("g", member_id))  # parked until the join phase ends
    h.advance(h.config.initial_rebalance_delay_ms)
    joined = h.result(b, JoinGroupResult)

Time only moves when the test moves it (``advance``/``advance_to``, on the
harness's :class:`~workgroup.testing.clock.FakeClock`), and timers
fire at their own deadlines in order, exactly as a real driver calling
``expire`` on time would make them fire.  The harness checks the contract the
driver relies on: every token is answered at most once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from workgroup.coordinator.actions import Action, Persist, Reply
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.coordinator import GroupCoordinator
from workgroup.coordinator.group import Group
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    ClientInfo,
    GroupRequest,
    GroupResult,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.testing.clock import FakeClock

R = TypeVar("R")

DEFAULT_PROTOCOL_TYPE = "consumer"
DEFAULT_PROTOCOLS: tuple[tuple[str, bytes], ...] = (("range", b"meta"),)


@dataclass(frozen=True, slots=True)
class Token:
    """A reply token with a readable name (``#3 join``)."""

    number: int
    label: str = ""

    def __repr__(self) -> str:
        return f"Token(#{self.number} {self.label})".replace(" )", ")")


def sequential_member_ids() -> Callable[[str, str], str]:
    """Member id factory giving ``<instance or client>-<n>``: predictable ids for tests."""
    counter = itertools.count(1)

    def factory(client_id: str, group_instance_id: str) -> str:
        return f"{group_instance_id or client_id}-{next(counter)}"

    return factory


def join_request(
    group_id: str,
    member_id: str = "",
    *,
    protocols: tuple[tuple[str, bytes], ...] = DEFAULT_PROTOCOLS,
    protocol_type: str = DEFAULT_PROTOCOL_TYPE,
    session_timeout_ms: int = 10_000,
    rebalance_timeout_ms: int = 30_000,
    group_instance_id: str | None = None,
    api_version: int = 9,
    client_id: str = "client",
    reason: str | None = None,
) -> JoinGroup:
    return JoinGroup(
        group_id=group_id,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        member_id=member_id,
        protocol_type=protocol_type,
        protocols=protocols,
        group_instance_id=group_instance_id,
        reason=reason,
        api_version=api_version,
        client=ClientInfo(client_id=client_id, client_host="/127.0.0.1"),
    )


@dataclass
class FormedGroup:
    """What ``CoordinatorHarness.form_group`` produced."""

    group_id: str
    generation_id: int
    leader: str
    member_ids: list[str]
    assignments: dict[str, bytes] = field(default_factory=dict)


class CoordinatorHarness:
    """A ``GroupCoordinator`` with a fake clock that records every action."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        clock: FakeClock | None = None,
        member_id_factory: Callable[[str, str], str] | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.clock = clock or FakeClock()
        self.coordinator = GroupCoordinator(
            self.config, member_id_factory=member_id_factory or sequential_member_ids()
        )
        self.actions: list[Action] = []
        self.persisted: list[Persist] = []
        self.replies: dict[Token, GroupResult] = {}
        self._requests: dict[Token, GroupRequest] = {}
        self._numbers = itertools.count(1)

    @property
    def now_ms(self) -> int:
        return self.clock.monotonic_ms()

    # --- sending ------------------------------------------------------------------

    def send(self, request: GroupRequest, label: str = "") -> Token:
        """Hand a request to the coordinator now; the answer may come later."""
        token = Token(next(self._numbers), label or type(request).__name__)
        self._requests[token] = request
        self._record(self.coordinator.handle(self.now_ms, token, request))
        return token

    def call(self, request: GroupRequest, expected: type[R]) -> R:
        """Send a request that must be answered at once, and return the answer."""
        token = self.send(request)
        return self.result(token, expected)

    def answered(self, token: Token) -> bool:
        return token in self.replies

    def result(self, token: Token, expected: type[R]) -> R:
        if token not in self.replies:
            raise AssertionError(f"{token} has not been answered")
        result = self.replies[token]
        if not isinstance(result, expected):
            raise AssertionError(f"{token} was answered with {result!r}, not {expected.__name__}")
        return result

    def group(self, group_id: str) -> Group:
        """The coordinator's group (which must exist)."""
        group = self.coordinator.group(group_id)
        if group is None:
            raise AssertionError(f"group {group_id!r} does not exist")
        return group

    def pending_tokens(self) -> list[Token]:
        return [token for token in self._requests if token not in self.replies]

    # --- time ---------------------------------------------------------------------

    def advance(self, ms: int) -> list[Action]:
        return self.advance_to(self.now_ms + ms)

    def advance_to(self, target_ms: int) -> list[Action]:
        """Move time to ``target_ms``, firing each timer at its own deadline."""
        fired: list[Action] = []
        while (deadline := self.coordinator.next_deadline_ms()) is not None and (
            deadline <= target_ms
        ):
            self.clock.advance_to_ms(deadline)
            actions = self.coordinator.expire(self.now_ms)
            self._record(actions)
            fired.extend(actions)
        self.clock.advance_to_ms(target_ms)
        return fired

    def advance_until_answered(self, *tokens: Token) -> None:
        """Fire timers, deadline by deadline, until every token has its answer."""
        while not all(token in self.replies for token in tokens):
            deadline = self.coordinator.next_deadline_ms()
            if deadline is None:
                pending = [t for t in tokens if t not in self.replies]
                raise AssertionError(f"no timer left to answer {pending}")
            self.advance_to(deadline)

    def _record(self, actions: list[Action]) -> None:
        for action in actions:
            self.actions.append(action)
            if isinstance(action, Persist):
                self.persisted.append(action)
                continue
            assert isinstance(action, Reply)
            token = action.token
            if not isinstance(token, Token) or token not in self._requests:
                raise AssertionError(f"reply to a token that was never sent: {action!r}")
            if token in self.replies:
                raise AssertionError(f"{token} answered twice: {self.replies[token]!r}, {action!r}")
            self.replies[token] = action.result

    # --- conveniences --------------------------------------------------------------

    def join_new_member(
        self,
        group_id: str,
        *,
        protocols: tuple[tuple[str, bytes], ...] = DEFAULT_PROTOCOLS,
        protocol_type: str = DEFAULT_PROTOCOL_TYPE,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        api_version: int = 9,
        client_id: str = "client",
    ) -> tuple[str, Token]:
        """A dynamic member's first JoinGroup (the v4+ MEMBER_ID_REQUIRED round trip included).

        Returns the member id and the token of the parked (or answered) join.
        """

        def request(member_id: str) -> JoinGroup:
            return join_request(
                group_id,
                member_id,
                protocols=protocols,
                protocol_type=protocol_type,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                api_version=api_version,
                client_id=client_id,
            )

        first = self.send(request(""), "join")
        answer = self.result(first, JoinGroupResult)
        if answer.error is not ErrorCode.MEMBER_ID_REQUIRED:
            return answer.member_id, first
        return answer.member_id, self.send(request(answer.member_id), "join")

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        assignments: tuple[tuple[str, bytes], ...] = (),
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Token:
        return self.send(
            SyncGroup(
                group_id,
                generation_id,
                member_id,
                assignments,
                group_instance_id=group_instance_id,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
            ),
            "sync",
        )

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        return self.call(
            Heartbeat(group_id, generation_id, member_id, group_instance_id), HeartbeatResult
        ).error

    def form_group(
        self,
        group_id: str,
        size: int,
        *,
        assign: Callable[[list[str]], dict[str, bytes]] | None = None,
        protocols: tuple[tuple[str, bytes], ...] = DEFAULT_PROTOCOLS,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
    ) -> FormedGroup:
        """Join ``size`` new dynamic members to an empty group and sync them all."""
        joins = [
            self.join_new_member(
                group_id,
                protocols=protocols,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
            )
            for _ in range(size)
        ]
        self.advance_until_answered(*(token for _, token in joins))
        results = [self.result(token, JoinGroupResult) for _, token in joins]
        for result in results:
            if result.error is not ErrorCode.NONE:
                raise AssertionError(f"join failed: {result!r}")
        leader = results[0].leader
        generation = results[0].generation_id
        member_ids = [result.member_id for result in results]
        leader_view = next(r for r in results if r.member_id == leader).members
        ids_seen_by_leader = [m.member_id for m in leader_view]
        assignments = (assign or _label_assignments)(ids_seen_by_leader)
        tokens = [
            self.sync(group_id, member_id, generation)
            for member_id in member_ids
            if member_id != leader
        ]
        tokens.append(self.sync(group_id, leader, generation, tuple(assignments.items())))
        for token in tokens:
            answer = self.result(token, SyncGroupResult)
            if answer.error is not ErrorCode.NONE:
                raise AssertionError(f"sync failed: {answer!r}")
        return FormedGroup(group_id, generation, leader, member_ids, assignments)


def _label_assignments(member_ids: list[str]) -> dict[str, bytes]:
    return {member_id: f"assigned:{member_id}".encode() for member_id in member_ids}


__all__ = [
    "DEFAULT_PROTOCOLS",
    "DEFAULT_PROTOCOL_TYPE",
    "CoordinatorHarness",
    "FormedGroup",
    "Token",
    "join_request",
    "sequential_member_ids",
]
