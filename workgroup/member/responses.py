"""How a member reads its coordinator's answers to JoinGroup, SyncGroup and
Heartbeat, and the errors every group answer shares.  Sans-I/O.

This part moves :class:`~workgroup.member.membership.Membership` as an answer
says (generation, leader, session proofs, failures counted) and returns the
:mod:`~workgroup.member.outcomes` that belong to the member machine, in order.

Rules:

1. An answer counts only in the state that sent its request (JoinGroup in
   JOINING, SyncGroup in SYNCING) and, for SyncGroup and Heartbeat, under the
   generation it was sent in (the machine's rule 1); otherwise it changes
   nothing.
2. Errors every answer shares, from each code's ``MemberAction`` in
   :data:`workgroup.errors.ERROR_MEANINGS` (the machine's rule 3): find the
   coordinator again; FATAL with the error saying what the coordinator
   expected; UNKNOWN_MEMBER_ID: lose, forget member id and generation, rejoin
   now; ILLEGAL_GENERATION: lose, forget the generation, rejoin now.  What is
   left is the caller's: JoinGroup and SyncGroup rejoin after the back-off,
   a heartbeat retries after it.
3. JoinGroup: MEMBER_ID_REQUIRED and REBALANCE_IN_PROGRESS rejoin now (the
   first with the member id given); NONE enters the generation, if its
   protocol type and name are this member's (else FATAL,
   :class:`~workgroup.member.errors.InconsistentProtocolError`).  The answer
   proves the session, and the round began after the request was sent.  The
   leader then leads the round, unless told to skip it; others sync.
4. SyncGroup: REBALANCE_IN_PROGRESS proves the session and rejoins now; NONE
   for another protocol is FATAL; NONE read after the session could have
   ended (a freeze: heartbeat.py, rule 4) is not acted on
   (``member.assignment_too_late``); an assignment that cannot be decoded
   rejoins after the back-off (``member.assignment_unreadable``); an empty one
   is the empty assignment, in the version spoken.
5. Heartbeat: NONE proves the session; REBALANCE_IN_PROGRESS proves it too and,
   while STABLE, asks for a round.  While LEAVING a heartbeat only keeps the
   session: an answer saying the group no longer knows the member ends it
   (:class:`~workgroup.member.outcomes.LostWhileLeaving`), any other failure
   retries.
6. A request that failed (no answer): while LEAVING, or a heartbeat beside a
   held request that failed retriably (only a missing proof), the heartbeat is
   retried after the back-off; an unsupported version or any other error that
   is not retriable is FATAL; otherwise the coordinator is looked for again.
7. An OffsetCommit answer under the current generation
   (:mod:`~workgroup.member.commits`) that proved the session counts as an
   answered heartbeat; one refusing the member is read as rule 2 says (while
   LEAVING, as rule 5 says).
"""

from __future__ import annotations

from workgroup.errors import (
    ErrorCode,
    MemberAction,
    MemberCheck,
    ProtocolError,
    UnsupportedVersionError,
    WorkgroupError,
)
from workgroup.kafka.messages import HeartbeatResult, JoinGroupResult, SyncGroupResult
from workgroup.log import get_logger
from workgroup.member.commits import CommitVerdict, MembershipRefused, SessionProved
from workgroup.member.config import MemberConfig
from workgroup.member.errors import InconsistentProtocolError, fatal_error
from workgroup.member.generation import Generation
from workgroup.member.membership import Membership
from workgroup.member.outcomes import (
    CoordinatorLost,
    Fail,
    Lead,
    Lose,
    LostWhileLeaving,
    Outcome,
    Rejoin,
    Reset,
    Sync,
    Take,
)
from workgroup.member.requests import Pending
from workgroup.member.transitions import State
from workgroup.protocol.metadata import AssignmentData
from workgroup.protocol.protocol import Protocol

log = get_logger(__name__)


class Responses:
    """Reads one member's answers (see the module docstring)."""

    def __init__(self, config: MemberConfig, membership: Membership) -> None:
        self._config = config
        self._membership = membership
        self._protocols = {p.wire_name: p for p in config.protocols}

    # --- errors every answer shares (rule 2) ------------------------------------

    def refused(self, code: ErrorCode, context: str) -> list[Outcome] | None:
        """What ``code`` means for any group answer; ``None``: the caller's to handle."""
        action = code.meaning.member
        if action is MemberAction.FIND_COORDINATOR:
            return [CoordinatorLost(f"{context}: {code.name}")]
        if action is MemberAction.FATAL:
            config = self._config
            error = fatal_error(
                code,
                context,
                session_timeout_ms=config.session_timeout_ms,
                protocol_type=config.protocol_type,
                protocol_names=[p.wire_name for p in config.protocols],
                instance_id=config.instance_id,
            )
            return [Fail(error)]
        if action is MemberAction.RESET_MEMBER:
            reason = f"{context}: unknown member id"
            return [Lose(f"{context}: {code.name}"), Rejoin(reason, True, Reset.MEMBER)]
        if action is MemberAction.RESET_GENERATION:
            reason = f"{context}: illegal generation"
            return [Lose(f"{context}: {code.name}"), Rejoin(reason, True, Reset.GENERATION)]
        return None

    def commit_verdict(self, now: int, verdict: CommitVerdict | None) -> list[Outcome]:
        """What an OffsetCommit's answer said about the member (rule 7)."""
        if isinstance(verdict, MembershipRefused):
            if self._membership.state is State.LEAVING:
                return self.lost_while_leaving(verdict.code)
            return self.refused(verdict.code, "OffsetCommit") or []
        if isinstance(verdict, SessionProved):
            self._membership.heartbeat.proved_alive(now, verdict.sent_at, held=False)
        return []

    def _proved_alive(self, now: int, pending: Pending) -> None:
        """The coordinator answered: the session was alive (heartbeat.py, rule 2)."""
        self._membership.heartbeat.proved_alive(now, pending.sent_at, held=pending.held)

    def failed(self, now: int, pending: Pending, error: WorkgroupError) -> list[Outcome]:
        """A request other than LeaveGroup failed (rule 6)."""
        membership = self._membership
        if membership.state is State.LEAVING or (
            pending.beside_held and pending.kind == "heartbeat" and error.retriable
        ):
            # LEAVING: keep trying until the session rules give up.  Beside a held
            # request: no proof, but the held request goes on.
            membership.heartbeat.failed(now, membership.backoff)
            return []
        if isinstance(error, UnsupportedVersionError) or not error.retriable:
            return [Fail(error)]
        log.info("member.request_failed", request=pending.kind, error=str(error))
        return [CoordinatorLost(f"{pending.kind} failed: {error}")]

    # --- JoinGroup (rule 3) -----------------------------------------------------

    def join(self, now: int, pending: Pending, result: JoinGroupResult) -> list[Outcome]:
        membership = self._membership
        if membership.state is not State.JOINING:
            return []
        code = result.error
        if code is ErrorCode.NONE:
            membership.join_failures = 0
            return self._joined(now, pending, result)
        if code is ErrorCode.MEMBER_ID_REQUIRED:
            membership.generation = membership.generation.with_member_id(result.member_id)
            return [Rejoin("member id required", immediately=True)]
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            return [Rejoin("rebalance in progress", immediately=True)]
        refused = self.refused(code, "JoinGroup")
        if refused is not None:
            return refused
        membership.join_failures += 1
        log.info("member.join_retry", error=code.name, attempt=membership.join_failures)
        return [Rejoin(f"JoinGroup: {code.name}", immediately=False)]

    def _joined(self, now: int, pending: Pending, result: JoinGroupResult) -> list[Outcome]:
        config = self._config
        if result.protocol_type is not None and result.protocol_type != config.protocol_type:
            error = InconsistentProtocolError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"the group's protocol type is {result.protocol_type!r}, "
                f"this member speaks {config.protocol_type!r}",
            )
            return [Fail(error)]
        protocol = self._protocols.get(result.protocol_name or "")
        if protocol is None:
            error = InconsistentProtocolError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"the coordinator chose protocol {result.protocol_name!r}, this member "
                f"supports {sorted(self._protocols)}",
            )
            return [Fail(error)]
        membership = self._membership
        previous_generation = membership.generation.generation_id
        membership.generation = Generation(result.generation_id, result.member_id, protocol)
        membership.leader_id = result.leader
        membership.group_size = len(result.members) if result.leader == result.member_id else None
        heartbeat = membership.heartbeat
        heartbeat.forget_proof()
        self._proved_alive(now, pending)
        heartbeat.round_began_after(pending.sent_at)
        heartbeat.schedule(now)
        membership.rebalances += 1
        leader = membership.is_leader
        log.info(
            "member.joined",
            group=config.group_id,
            member_id=membership.generation.member_id,
            generation=membership.generation.generation_id,
            previous_generation=previous_generation,
            protocol=protocol.wire_name,
            leader=leader,
            # Only the leader is told the members: a follower's count would read as 0.
            **({"members": len(result.members)} if leader else {}),
        )
        if leader and not result.skip_assignment:
            return [Lead(protocol, result)]
        return [Sync(follow=not leader)]

    # --- SyncGroup (rule 4) -----------------------------------------------------

    def sync(self, now: int, pending: Pending, result: SyncGroupResult) -> list[Outcome]:
        membership = self._membership
        if membership.state is not State.SYNCING or not membership.generation.answers_to(
            pending.generation
        ):
            return []
        code = result.error
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            self._proved_alive(now, pending)
            return [Rejoin("rebalance in progress", immediately=True)]
        if code is not ErrorCode.NONE:
            refused = self.refused(code, "SyncGroup")
            if refused is not None:
                return refused
            membership.join_failures += 1
            return [Rejoin(f"SyncGroup: {code.name}", immediately=False)]
        protocol = membership.generation.protocol
        assert protocol is not None
        if (result.protocol_type is not None and result.protocol_type != protocol.type) or (
            result.protocol_name is not None and result.protocol_name != protocol.wire_name
        ):
            error = InconsistentProtocolError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                "SyncGroup answered for protocol "
                f"{result.protocol_type}/{result.protocol_name}, "
                f"expected {protocol.type}/{protocol.wire_name}",
            )
            return [Fail(error)]
        self._proved_alive(now, pending)
        heartbeat = membership.heartbeat
        session_end = heartbeat.session_end()
        if session_end is None or now < session_end:
            heartbeat.proved_stable(pending.sent_at)
        if session_end is not None and now >= session_end:
            # Read after a freeze (heartbeat.py, rule 4): the answer may be old and
            # the coordinator may have given these resources to others since.  Do
            # not act on it; the session ends and the member rejoins.
            log.warning(
                "member.assignment_too_late",
                group=self._config.group_id,
                generation=pending.generation,
                late_ms=now - session_end,
            )
            return []
        try:
            data = self._decode_assignment(protocol, result.assignment)
        except ProtocolError as exc:
            log.error(
                "member.assignment_unreadable",
                group=self._config.group_id,
                error=str(exc),
                size=len(result.assignment),
            )
            membership.join_failures += 1
            return [Rejoin("unreadable assignment", immediately=False)]
        return [Take(protocol, data)]

    def _decode_assignment(self, protocol: Protocol, blob: bytes) -> AssignmentData:
        if not blob:
            # Kafka's coordinator answers an empty assignment to members the leader
            # left out (and to everyone when the leader sent none).
            return AssignmentData(
                generation=self._membership.generation.generation_id,
                common_version=self._membership.used_versions[protocol.wire_name],
            )
        return protocol.codec.decode_assignment(blob).value

    # --- Heartbeat (rule 5) -----------------------------------------------------

    def heartbeat(self, now: int, pending: Pending, result: HeartbeatResult) -> list[Outcome]:
        membership = self._membership
        if not membership.generation.answers_to(pending.generation):
            return []
        code = result.error
        heartbeat = membership.heartbeat
        if membership.state is State.LEAVING:
            return self._leaving_heartbeat(now, pending, code)
        if code is ErrorCode.NONE:
            heartbeat.succeeded()
            self._proved_alive(now, pending)
            heartbeat.proved_stable(pending.sent_at)
        elif code is ErrorCode.REBALANCE_IN_PROGRESS:
            # The session is alive: the coordinator only wants everyone to rejoin.
            self._proved_alive(now, pending)
            if membership.state is State.STABLE:
                membership.ask_rejoin("coordinator started a rebalance")
        else:
            refused = self.refused(code, "Heartbeat")
            if refused is not None:
                return refused
            heartbeat.failed(now, membership.backoff)
        return []

    def _leaving_heartbeat(self, now: int, pending: Pending, code: ErrorCode) -> list[Outcome]:
        """LEAVING: a heartbeat only keeps the session; the member no longer
        rejoins, so a lost membership ends it (what is left is lost)."""
        heartbeat = self._membership.heartbeat
        if code.meaning.check is MemberCheck.PASSED:
            heartbeat.succeeded()
            self._proved_alive(now, pending)
        elif code.meaning.ends_membership:
            return self.lost_while_leaving(code)
        else:  # coordinator moved or busy: retry; the session rules bound it
            heartbeat.failed(now, self._membership.backoff)
        return []

    def lost_while_leaving(self, code: ErrorCode) -> list[Outcome]:
        """LEAVING, an answer (``code``) says the group no longer knows the member."""
        log.warning("member.session_lost", group=self._config.group_id, error=code.name)
        return [LostWhileLeaving()]


__all__ = ["Responses"]
