"""What the application asks of its member, beyond starting and closing it:
rounds, a new catalog, warm-ups ready, draining, giving resources up or
refusing them, and releases confirmed.  Sans-I/O.

Each request changes the parts it concerns and, where the leader must hear of
it, asks for a round; the member machine (rules 8-10, 14 and 15) takes it,
as every round, once the member is STABLE with no callback running.

Rules:

1. A rejoin asked for (:meth:`ApplicationRequests.rejoin`) counts only while
   STABLE (a round under way sees the same group anyway).
2. A new catalog asks for a round only of a STABLE leader (its assignor reads
   the catalog; a follower's goes to the leader with its next JoinGroup).
3. Warm-ups (or owned resources) newly ready, and a drain started or ended,
   change the member's metadata: a round follows, also after the one under
   way if its JoinGroup went without the change (one still to go carries
   it).  A closed or failed member neither drains nor undrains.
4. Giving resources up (:meth:`ApplicationRequests.give_up`: no callback) asks
   for a round only when something owned was given up; a refusal gives them
   up and names them in the metadata until it ends.
5. A release confirmed (the machine's rule 9) may free a round (a cooperative
   JoinGroup reported the resource) or let a closing member leave.
"""

from __future__ import annotations

from collections.abc import Iterable

from workgroup.log import get_logger
from workgroup.member.catalog import MemberCatalog
from workgroup.member.closing import Closing
from workgroup.member.holdings import Holdings
from workgroup.member.intents import Intents
from workgroup.member.membership import Membership
from workgroup.member.transitions import State
from workgroup.protocol.catalog import Catalog
from workgroup.types import Resource

log = get_logger(__name__)


class ApplicationRequests:
    """The application's requests, carried to the parts they concern."""

    def __init__(
        self,
        group_id: str,
        membership: Membership,
        holdings: Holdings,
        intents: Intents,
        catalog: MemberCatalog,
        closing: Closing,
    ) -> None:
        self._group_id = group_id
        self._membership = membership
        self._holdings = holdings
        self._intents = intents
        self._catalog = catalog
        self._closing = closing

    @property
    def _over(self) -> bool:
        return self._membership.state in (State.CLOSED, State.FATAL)

    def rejoin(self, reason: str) -> None:
        """Rule 1."""
        if self._membership.state is State.STABLE:
            self._membership.ask_rejoin(reason)

    def catalog_read(self, catalog: Catalog) -> None:
        """Rule 2."""
        membership = self._membership
        changed = self._catalog.change(catalog)
        if changed and membership.is_leader and membership.state is State.STABLE:
            membership.ask_rejoin("resources changed")

    def ready(self, now: int, resources: Iterable[Resource]) -> None:
        """Rule 3: warm-ups (or owned resources) ready."""
        fresh = self._intents.mark_ready(resources, self._holdings.ownership.resources, now)
        if fresh:
            log.info(
                "member.warmup_ready",
                group=self._group_id,
                count=len(fresh),
                warming=len(self._intents.warming),
            )
            self._membership.metadata_changed(f"{len(fresh)} warm-ups ready")

    def drain(self, draining: bool) -> None:
        """Rule 3: start or end draining."""
        if not self._over and self._intents.drain(draining):
            log.info(
                "member.draining" if draining else "member.undrained",
                group=self._group_id,
                member_id=self._membership.generation.member_id,
                owned=len(self._holdings.ownership.resources),
            )
            self._membership.metadata_changed("draining" if draining else "undrained")

    def give_up(self, resources: Iterable[Resource], reason: str) -> None:
        """Rule 4: stop owning ``resources`` without a callback."""
        membership = self._membership
        released = self._holdings.give_up(resources, reason, membership.generation.member_id)
        if released:
            membership.ask_rejoin(f"released {len(released)} resources: {reason}")

    def refuse(self, resources: Iterable[Resource], until: int) -> None:
        """Rule 4: name ``resources`` as refused until ``until`` (then give them up)."""
        self._intents.refuse(resources, until)

    def released(self, now: int, resources: Iterable[Resource]) -> None:
        """Rule 5: the application's work on revoked ``resources`` stopped."""
        if not self._over:
            self._membership.released(self._holdings.confirmed_released(resources, now))
            if self._membership.state is State.LEAVING:
                self._closing.maybe_finish(now)
