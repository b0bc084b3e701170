"""How a member takes the assignment its SyncGroup was answered with.  Sans-I/O.

The member machine decides *that* an assignment counts (its rules 1 and 4);
this part carries it out across the parts it touches: the member is STABLE,
what it holds changes (:mod:`~workgroup.member.holdings`), its warm-ups follow
(:mod:`~workgroup.member.intents`), and the rounds the assignment calls for
are asked of :mod:`~workgroup.member.membership`.

Rules:

1. The member is STABLE, and heartbeats every 50 ms while the assignment says
   a follow-up round is due (the machine's rule 2); the assignment settles the
   follow-up it does not announce.  A leader's catalog that is not this
   member's is logged (``member.catalog_mismatch``); the leader's wins, and a
   leader remembers the catalog it assigned with (:mod:`~workgroup.member.catalog`).
2. Foreign resources are dropped first (holdings, rule 6).  A member closing by
   releasing everything (the machine's rule 9) takes nothing and asks for the
   next round, which hands it to others.
3. Two changes, each reported with what is owned right after it: what is owned
   and not assigned any more is revoked, then what is assigned and not owned
   is added.  Between them, warm-ups now assigned are promoted and those not
   asked for any more end; after them, the warm-ups asked for start
   (``on_warming``; the machine's rule 14).
4. Version probing (the machine's rule 6): the version the leader says every
   member speaks (at least 1, at most this codec's newest) becomes the one
   spoken, and a change asks for a round.
5. A cooperative member that revoked something, or whose JoinGroup claimed
   what the leader withheld on its account, asks for the follow-up round;
   with ``confirm_release``, not for what is still releasing (its release asks
   for it: the machine's rule 9).  A round the leader asks for is asked for,
   except while closing with resources still releasing (the same metadata
   would get the same generation back, round after round).
6. A static member's first assignment in this process, empty while its
   catalog lists work of its kinds, asks for one round (the machine's rule 15).
7. In a keyspace's group, the map the assignment carries becomes the member's
   catalog first (:mod:`~workgroup.member.keyspace`, rule 1), so that the
   leader's catalog and this member's agree.
"""

from __future__ import annotations

from dataclasses import replace

from workgroup.log import get_logger
from workgroup.member.catalog import MemberCatalog
from workgroup.member.config import MemberConfig
from workgroup.member.departure import Departure
from workgroup.member.holdings import Holdings
from workgroup.member.intents import Intents
from workgroup.member.keyspace import MemberKeyspace
from workgroup.member.membership import Membership
from workgroup.member.transitions import State
from workgroup.protocol.metadata import AssignmentData
from workgroup.protocol.protocol import Protocol

log = get_logger(__name__)


class AssignmentTaker:
    """Takes one member's assignments (see the module docstring)."""

    def __init__(
        self,
        config: MemberConfig,
        membership: Membership,
        holdings: Holdings,
        intents: Intents,
        departure: Departure,
        keyspace: MemberKeyspace | None = None,
    ) -> None:
        self._config = config
        self._keyspace = keyspace
        self._membership = membership
        self._holdings = holdings
        self._intents = intents
        self._departure = departure

    def take(
        self,
        now: int,
        protocol: Protocol,
        data: AssignmentData,
        member_catalog: MemberCatalog,
    ) -> None:
        """Take ``data``, read with ``protocol``, against this member's catalog."""
        if self._keyspace is not None:
            # The keyspace's rule 1: the map the leader planned with is the catalog.
            adopted = self._keyspace.take(
                data.user_data,
                group_id=self._config.group_id,
                generation=self._membership.generation.generation_id,
            )
            if adopted is not None:
                # A part names only this member's slices: the leader's digest
                # stands for the whole map it is part of.
                whole = self._keyspace.carrier
                member_catalog.change(adopted, digest=None if whole else data.catalog_hash)
        catalog, catalog_hash = member_catalog.keys, member_catalog.digest
        config, membership = self._config, self._membership
        holdings, intents, departure = self._holdings, self._intents, self._departure
        heartbeat = membership.heartbeat
        generation = membership.generation.generation_id
        member_id = membership.generation.member_id
        membership.enter(State.STABLE)
        # A follow-up round is due: notice it (the revoking members start it) fast.
        # So is one while this member drains with resources left: each ends in a
        # round (a cut-over once a warm-up elsewhere is ready) that revokes here.
        heartbeat.expedited = data.pending or (intents.draining and bool(data.assigned))
        heartbeat.schedule(now)
        if data.catalog_hash and data.catalog_hash != catalog_hash:
            log.warning(
                "member.catalog_mismatch",
                group=config.group_id,
                member_id=member_id,
                generation=generation,
                leader=membership.leader_id,
                mine=catalog_hash.hex(),
                leader_catalog=data.catalog_hash.hex(),
            )
        member_catalog.assigned(data.catalog_hash, led=membership.is_leader)
        membership.assigned(follow_up=data.pending)
        data = holdings.without_foreign_resources(
            data,
            kinds=config.kinds,
            catalog=catalog,
            catalog_hash=catalog_hash,
            generation=generation,
            leader=membership.leader_id,
        )
        if departure.releasing_all and data.assigned:
            # Closing (rule 2): take nothing; the next round hands it to others.
            data = replace(data, assigned=(), rejoin=True)
        assigned = frozenset(data.assigned)
        # Rule 3: two changes, each reported with what is owned right after it.
        revoked = holdings.revoke(holdings.owned - assigned, generation, heartbeat.last_seen)
        offered = intents.offered(
            data, assigned, warm_up=config.warm_up, taking=not departure.releasing_all
        )
        # Warm-ups promoted (now assigned) just stop being warm-ups.
        holdings.warmups_ended(
            intents.promote(assigned, offered), "the move was called off", generation
        )
        added = holdings.assign(data.assigned, generation)
        started = intents.start(assigned, offered)
        if started:
            log.info(
                "member.warming",
                group=config.group_id,
                generation=generation,
                count=len(started),
                warming=len(intents.warming),
            )
            holdings.callback("on_warming", started, generation)
        log.info(
            "member.assigned",
            group=config.group_id,
            member_id=member_id,
            generation=generation,
            owned=len(assigned),
            added=len(added),
            revoked=len(revoked),
            warming=len(intents.warming),
            follow_up_pending=data.pending,
        )
        self._probe_version(protocol, data)
        # data.revoked: what the leader withheld on our account because our JoinGroup
        # claimed it; we may have lost it since, but others still wait for the round.
        # What is still releasing here asks for that round itself once released
        # (rule 5): a round now would withhold it again, round after round.
        handed_back = {*revoked, *data.revoked}
        if holdings.confirm_release:
            handed_back -= holdings.releasing
        if handed_back and protocol.mode == "cooperative":
            membership.ask_rejoin("follow-up round after revoking resources")
        if data.rejoin and not (departure.releasing_all and holdings.releasing):
            # Closing with resources still releasing: their release asks for the
            # round.  A JoinGroup now, with the same metadata, gets the same
            # generation and the same assignment back, round after round.
            membership.ask_rejoin("the leader asked for another round")
        if intents.probe_after_first(
            data,
            static=config.instance_id is not None,
            may_take=membership.state is State.STABLE
            and not intents.draining
            and not departure.releasing_all,
            catalog=catalog,
            kinds=config.kinds,
        ):
            # Rule 6: a static member handed nothing on its first assignment in
            # this process may have been answered, without a rebalance, with what
            # it held while draining to stop.  Metadata the coordinator has not
            # seen: a known member's JoinGroup with the same metadata gets the
            # same generation back.
            membership.ask_rejoin("a restarted static member was handed nothing")

    def _probe_version(self, protocol: Protocol, data: AssignmentData) -> None:
        """Rule 4."""
        versions = self._membership.used_versions
        used = versions[protocol.wire_name]
        common = min(max(data.common_version, 1), protocol.codec.latest_version)
        if common != used:
            log.info(
                "member.version_probing",
                group=self._config.group_id,
                used=used,
                common=common,
                protocol=protocol.wire_name,
            )
            versions[protocol.wire_name] = common
            self._membership.ask_rejoin(f"metadata version {used} -> {common}")


__all__ = ["AssignmentTaker"]
