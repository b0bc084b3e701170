"""The requests a member sends its coordinator, built from its parts.  Sans-I/O.

The member machine decides *when* a JoinGroup, SyncGroup, Heartbeat or
LeaveGroup goes (its rules 2, 7 and 9); this part builds it, registers it in
flight under the current generation and puts the
:class:`~workgroup.member.actions.SendRequest` in the machine's outbox.

Rules:

1. Every request is registered in flight (:class:`~workgroup.member.requests.InFlight`)
   under the generation current when it is sent, with its send time; its id
   comes from the machine's one :class:`~workgroup.member.requests.RequestIds`.
2. A JoinGroup carries, per protocol offered, the member's metadata encoded in
   the version it currently speaks for that protocol (version probing): kinds,
   what it reports owned (cooperative: what it owns and is releasing; eager:
   what it revoked), loads, catalog hash, tags (the configured ones, leaving,
   draining, refusals, asks), warm-ups and readiness.  Metadata that cannot be
   encoded fails the member (:class:`~workgroup.member.outcomes.Fail`).
3. JoinGroup and SyncGroup time out after the rebalance timeout plus 5 s
   (``join_timeout_ms``); Heartbeat and LeaveGroup after the session timeout,
   at least a second.  A Heartbeat sent beside a held JoinGroup/SyncGroup goes
   on the second connection.
4. What is due goes when :mod:`~workgroup.member.membership` allows it: a
   coordinator lookup (:class:`~workgroup.member.actions.FindCoordinator`)
   once its back-off is over, FATAL past the connect deadline; the JoinGroup
   once nothing holds it back (then, if the session bound it moves to is past
   already, what is owned is lost); a heartbeat when it is due and may go.
"""

from __future__ import annotations

from workgroup.errors import WorkgroupError
from workgroup.kafka.messages import Heartbeat, JoinGroup, LeaveGroup, LeavingMember, SyncGroup
from workgroup.log import get_logger
from workgroup.member.actions import Action, FindCoordinator, SendRequest
from workgroup.member.config import MemberConfig
from workgroup.member.departure import Departure
from workgroup.member.generation import NO_GENERATION_ID
from workgroup.member.holdings import Holdings
from workgroup.member.intents import Intents
from workgroup.member.keyspace import MemberKeyspace
from workgroup.member.load_balancing import LoadMeter
from workgroup.member.membership import Membership
from workgroup.member.outcomes import Fail, Lose, Outcome
from workgroup.member.requests import Pending, RequestIds, RequestKind
from workgroup.member.round_plan import LEAVING_TAG
from workgroup.protocol.metadata import MemberMetadata
from workgroup.protocol.protocol import Protocol

log = get_logger(__name__)


class Outgoing:
    """Builds and sends one member's requests (see the module docstring)."""

    def __init__(
        self,
        config: MemberConfig,
        ids: RequestIds,
        out: list[Action],
        membership: Membership,
        holdings: Holdings,
        intents: Intents,
        departure: Departure,
        loads: LoadMeter,
        keyspace: MemberKeyspace | None = None,
    ) -> None:
        self._config = config
        self._ids = ids
        self._out = out
        self._membership = membership
        self._holdings = holdings
        self._intents = intents
        self._departure = departure
        self._loads = loads
        self._keyspace = keyspace

    @property
    def _short_timeout_ms(self) -> int:
        return max(self._config.session_timeout_ms, 1_000)

    def _send(
        self,
        now: int,
        kind: RequestKind,
        request: JoinGroup | SyncGroup | Heartbeat | LeaveGroup,
        timeout_ms: int,
        *,
        beside_held: bool = False,
    ) -> None:
        """Rule 1."""
        request_id = self._ids.take()
        pending = Pending(kind, self._membership.generation, now, beside_held)
        self._membership.pending.add(request_id, pending)
        self._out.append(SendRequest(request_id, request, timeout_ms, beside_held))

    # --- what is due (rule 4) ---------------------------------------------------

    def find_if_due(self, now: int) -> list[Outcome]:
        """FINDING_COORDINATOR: a lookup once its back-off is over."""
        membership = self._membership
        connect_deadline = membership.connect_deadline()
        if connect_deadline is not None and now >= connect_deadline:
            return [Fail(membership.lookup.timeout_error())]
        if membership.lookup.take_due(now):
            self._out.append(FindCoordinator())
        return []

    def join_if_due(self, now: int, *, seen: int, catalog_hash: bytes) -> list[Outcome]:
        """JOINING: the JoinGroup once nothing holds it back."""
        membership = self._membership
        if membership.join_may_go() and now >= membership.join_ready_at():
            failed = self.join(now, seen=seen, catalog_hash=catalog_hash)
            if failed is not None:
                return [failed]
        if membership.session_over(now) and membership.pending.rebalancing:
            # The JoinGroup just sent binds the session to the round floor
            # (heartbeat.py, rule 3), which may be past already.
            return [Lose("no answer proved the session in time")]
        return []

    def heartbeat_if_due(self, now: int) -> None:
        due = self._membership.heartbeat.next_at
        if self._membership.may_heartbeat() and due is not None and now >= due:
            self.heartbeat(now)

    # --- building and sending (rules 1-3) ---------------------------------------

    def join(self, now: int, *, seen: int, catalog_hash: bytes) -> Fail | None:
        """Send JoinGroup (rule 2); ``seen``: the newest time the member saw (the
        refusals it names end by it)."""
        config = self._config
        try:
            protocols = tuple(
                (p.wire_name, self.metadata(p, seen=seen, catalog_hash=catalog_hash))
                for p in config.protocols
            )
        except WorkgroupError as exc:
            return Fail(exc)
        request = JoinGroup(
            group_id=config.group_id,
            session_timeout_ms=config.session_timeout_ms,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            member_id=self._membership.generation.member_id,
            protocol_type=config.protocol_type,
            protocols=protocols,
            group_instance_id=config.instance_id,
        )
        self._send(now, "join", request, config.join_timeout_ms)
        return None

    def metadata(self, protocol: Protocol, *, seen: int, catalog_hash: bytes) -> bytes:
        """This member's metadata for ``protocol`` (rule 2)."""
        config = self._config
        owned, generation = self._holdings.ownership.report(self._membership.rebalance_mode)
        departing = {LEAVING_TAG: "1"} if self._departure.departing else {}
        meta = MemberMetadata(
            kinds=tuple(sorted(config.kinds)) if config.kinds is not None else (),
            owned=owned,
            owned_generation=generation if owned else NO_GENERATION_ID,
            rack=config.rack,
            capacity=config.capacity,
            loads=self._loads.report(owned),
            instance_id=config.instance_id,
            user_data=(
                config.user_data
                if self._keyspace is None
                else self._keyspace.user_data(self._membership.generation.member_id)
            ),
            catalog_hash=catalog_hash,
            tags=tuple(sorted({**config.tags, **departing, **self._intents.tags(seen)}.items())),
            warms_up=config.warm_up and not self._intents.draining,
            warming=self._intents.warming_sorted(),
            ready=self._intents.ready_sorted(),
        )
        version = self._membership.used_versions[protocol.wire_name]
        return protocol.codec.encode_metadata(meta, version)

    def sync(self, now: int, assignments: tuple[tuple[str, bytes], ...]) -> None:
        """Send SyncGroup (the leader's ``assignments``; a follower's are empty)."""
        generation = self._membership.generation
        protocol = generation.protocol
        request = SyncGroup(
            group_id=self._config.group_id,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            assignments=assignments,
            group_instance_id=self._config.instance_id,
            protocol_type=protocol.type if protocol else None,
            protocol_name=protocol.wire_name if protocol else None,
        )
        self._send(now, "sync", request, self._config.join_timeout_ms)

    def heartbeat(self, now: int) -> None:
        """Send Heartbeat, beside a held JoinGroup/SyncGroup if one is (rule 3)."""
        generation = self._membership.generation
        request = Heartbeat(
            group_id=self._config.group_id,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            group_instance_id=self._config.instance_id,
        )
        self._membership.heartbeat.schedule(now)
        log.debug(
            "member.heartbeat",
            group=self._config.group_id,
            generation=generation.generation_id,
        )
        beside = self._membership.pending.rebalancing
        self._send(now, "heartbeat", request, self._short_timeout_ms, beside_held=beside)

    def leave(self, now: int, member_id: str, instance_id: str | None, reason: str) -> None:
        """Send LeaveGroup for ``member_id``."""
        request = LeaveGroup(
            group_id=self._config.group_id,
            members=(LeavingMember(member_id, instance_id, reason),),
        )
        self._send(now, "leave", request, self._short_timeout_ms)


__all__ = ["Outgoing"]
