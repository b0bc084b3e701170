"""The member machine's parts, built and wired in one place.  Sans-I/O.

Every part is built here, once per machine, in the order their dependencies
need; each is handed only the parts it reads or moves (never the machine).
The machine routes between them (:mod:`~workgroup.member.state`).

Rules:

1. The parts share one list of actions to send (``out``: the machine hands it
   to the driver) and one source of request ids (``ids``).
2. What a part keeps is its own: no two parts keep the same fact (the state and
   generation are :class:`~workgroup.member.membership.Membership`'s, what is
   owned :class:`~workgroup.member.holdings.Holdings`', how far closing has come
   :class:`~workgroup.member.departure.Departure`'s).
"""

from __future__ import annotations

from dataclasses import dataclass

from workgroup.member.actions import Action, CallbackErrorPolicy
from workgroup.member.application import ApplicationRequests
from workgroup.member.assignment import AssignmentTaker
from workgroup.member.catalog import MemberCatalog
from workgroup.member.closing import Closing
from workgroup.member.commits import CommitRouter
from workgroup.member.config import MemberConfig
from workgroup.member.departure import Departure
from workgroup.member.holdings import Holdings
from workgroup.member.intents import Intents
from workgroup.member.keyspace import MemberKeyspace
from workgroup.member.leading import Leading
from workgroup.member.load_balancing import LoadMeter
from workgroup.member.membership import Membership
from workgroup.member.outgoing import Outgoing
from workgroup.member.pipeline import LeaderPipeline
from workgroup.member.requests import RequestIds
from workgroup.member.responses import Responses
from workgroup.protocol.catalog import Catalog


@dataclass(frozen=True, slots=True)
class MemberParts:
    """One machine's parts (the machine's rules name what each decides)."""

    #: The actions to send, in order (rule 1).
    out: list[Action]
    ids: RequestIds
    #: The catalog read, its digest, and the one the assignment was led with.
    catalog: MemberCatalog
    #: What the member owns and the callbacks reporting it (rules 8, 9, 12).
    holdings: Holdings
    #: Which generation each commit goes under, and their answers (rule 11).
    commit_router: CommitRouter
    #: As leader: the round's stages, the delays and balancing memory (rule 13).
    pipeline: LeaderPipeline
    #: How far closing has come (rules 7 and 9).
    departure: Departure
    #: State, generation, requests, coordinator, session, next round (rules 1-6).
    membership: Membership
    #: Load balancing: what this member measures.
    loads: LoadMeter
    #: Drain, refusals, warm-ups and the restart probe (rules 10, 14, 15).
    intents: Intents
    #: Reads the answers to JoinGroup, SyncGroup and Heartbeat (rules 1, 3).
    responses: Responses
    #: Takes the assignments SyncGroup answers with (rules 5, 6, 8, 9, 14, 15).
    taker: AssignmentTaker
    #: Builds and sends JoinGroup, SyncGroup, Heartbeat and LeaveGroup.
    outgoing: Outgoing
    #: Closing: hand-over, revoking, heartbeats while LEAVING, LeaveGroup (rules 7, 9).
    closing: Closing
    #: When the leader's round runs and what a STABLE leader watches (rules 5, 13).
    leading: Leading
    #: What the application asks: rounds, catalogs, drain, refusals, warm-ups ready.
    requests: ApplicationRequests
    #: The keyspace map known and the hot keys sampled (``None``: no keyspace).
    keyspace: MemberKeyspace | None = None


def build_parts(
    config: MemberConfig,
    catalog: Catalog | None,
    *,
    confirm_release: bool,
    on_callback_error: CallbackErrorPolicy,
) -> MemberParts:
    """The parts of a machine with ``config``, reading ``catalog`` first."""
    out: list[Action] = []
    ids = RequestIds()
    member_catalog = MemberCatalog(catalog)
    holdings = Holdings(
        config.group_id,
        ids,
        out,
        confirm_release=confirm_release,
        on_callback_error=on_callback_error,
    )
    commit_router = CommitRouter(
        config.group_id, config.instance_id, config.effective_request_timeout_ms
    )
    keyspace = MemberKeyspace(config.keyspace) if config.keyspace is not None else None
    pipeline = LeaderPipeline(
        config.group_id,
        reassign_delay_ms=config.reassign_delay_ms,
        balance=config.balance,
        max_warmups=config.max_warmups,
        keyspace=config.keyspace,
        keyspace_view=keyspace,
    )
    departure = Departure(dynamic=config.instance_id is None)
    intents = Intents()
    membership = Membership(config, holdings, intents, departure)
    loads = LoadMeter(config.balance.smoothing_ms)
    outgoing = Outgoing(config, ids, out, membership, holdings, intents, departure, loads, keyspace)
    closing = Closing(config, out, membership, holdings, intents, departure, outgoing)
    return MemberParts(
        out=out,
        ids=ids,
        catalog=member_catalog,
        holdings=holdings,
        commit_router=commit_router,
        pipeline=pipeline,
        departure=departure,
        membership=membership,
        loads=loads,
        intents=intents,
        responses=Responses(config, membership),
        taker=AssignmentTaker(config, membership, holdings, intents, departure, keyspace),
        outgoing=outgoing,
        closing=closing,
        leading=Leading(membership, pipeline, member_catalog, ids, out),
        requests=ApplicationRequests(
            config.group_id, membership, holdings, intents, member_catalog, closing
        ),
        keyspace=keyspace,
    )
