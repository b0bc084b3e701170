"""Carries the member machine's requests to its coordinator and feeds their
answers back (asyncio, over the member's
:class:`~workgroup.member.transport.CoordinatorConnection`).

Rules:

1. One lookup per :class:`~workgroup.member.actions.FindCoordinator`: the
   machine's back-off is the only retry policy.  Anything but a network error
   is fatal rather than a lookup that never answers.
2. Each :class:`~workgroup.member.actions.SendRequest` goes with the machine's
   timeout and its choice of connection (beside a held request, or behind it);
   its answer or failure goes back to the machine: an OffsetCommit's as a
   commit's answer, every other as a response.
3. An :class:`~workgroup.member.errors.InconsistentProtocolError` is completed
   by one DescribeGroups (what the group speaks, within
   :data:`DESCRIBE_TIMEOUT_S`) before the application sees it; a describe that
   fails leaves the error as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from workgroup.errors import WorkgroupError
from workgroup.kafka.messages import OffsetCommit, OffsetCommitResult
from workgroup.log import get_logger
from workgroup.member.actions import Action, SendRequest
from workgroup.member.errors import InconsistentProtocolError
from workgroup.member.state import MemberMachine
from workgroup.member.transport import CoordinatorConnection, kafka_errors

log = get_logger(__name__)

#: How long the DescribeGroups that explains an INCONSISTENT_GROUP_PROTOCOL may take.
DESCRIBE_TIMEOUT_S = 5.0


class RequestSender:
    """The member's requests, on their way to the coordinator and back."""

    def __init__(
        self,
        connection: CoordinatorConnection,
        group_id: str,
        *,
        lookup_timeout_s: float,
        feed: Callable[[list[Action]], None],
        now: Callable[[], int],
    ) -> None:
        self._connection = connection
        self._group_id = group_id
        self._lookup_timeout_s = lookup_timeout_s
        self._feed = feed
        self._now = now

    async def find_coordinator(self, machine: MemberMachine) -> None:
        """Rule 1."""
        try:
            # Anything unexpected (not a network error) is fatal.
            with kafka_errors(f"finding the coordinator of group {self._group_id!r}"):
                node_id = await self._connection.find(self._group_id, self._lookup_timeout_s)
        except WorkgroupError as exc:
            self._feed(machine.find_coordinator_failed(self._now(), exc))
            return
        log.debug("member.coordinator", node=node_id, group=self._group_id)
        self._feed(machine.coordinator_found(self._now()))

    async def send(self, machine: MemberMachine, action: SendRequest) -> None:
        """Rule 2."""
        commit = isinstance(action.request, OffsetCommit)
        try:
            result = await self._connection.request(
                action.request,
                action.timeout_ms / 1000,
                beside_held=action.beside_held,
                may_wait_behind_held=action.may_wait_behind_held,
            )
        except WorkgroupError as exc:
            if commit:
                self._feed(machine.commit_answered(self._now(), action.request_id, exc))
            else:
                self._feed(machine.request_failed(self._now(), action.request_id, exc))
            return
        if commit:
            assert isinstance(result, OffsetCommitResult)
            self._feed(machine.commit_answered(self._now(), action.request_id, result))
        else:
            self._feed(machine.response(self._now(), action.request_id, result))

    async def explain(
        self,
        error: InconsistentProtocolError,
        report: Callable[[WorkgroupError], None],
    ) -> None:
        """Rule 3: add what the group speaks to ``error``, then ``report`` it."""
        try:
            summary = await self._connection.describe(self._group_id, DESCRIBE_TIMEOUT_S)
            if summary:
                error.args = (f"{error}; {summary}",)
        except Exception as exc:  # the error stands as it is
            log.debug("member.describe_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            report(error)


__all__ = ["DESCRIBE_TIMEOUT_S", "RequestSender"]
