"""Load balancing, the member's part and the leader's, without I/O.

A member measures its load (:class:`LoadMeter`) and publishes it in its
metadata; the leader's round runs the balancing stage (:func:`balance_stage`,
:func:`~workgroup.assignors.balance.balance` on the round's target after the
reassignment delay and refusals: :mod:`~workgroup.member.round_stages`) and
the leader remembers, between rounds, what it needs to keep the stage steady
(:class:`LeaderBalancing`).

Rules:

1. **Reports.**  A handler reports any non-negative, finite number per resource
   (records/s, bytes/s: :meth:`LoadMeter.record`; anything else is a
   :class:`~workgroup.errors.ConfigError`).  Each resource's reports are smoothed
   by an exponentially weighted moving average with time constant
   ``smoothing_ms`` (half the balancing interval), so a burst or a quiet second
   moves the published load only a little.
2. **Publishing.**  The smoothed load of every owned resource goes in the
   member's metadata (version 3) each time it joins; a resource without
   reports is sent as "not measured".  A member rejoins by itself (a metadata
   change, as for warm-ups ready) only when the leader's view of it is out of
   date: a resource it published unmeasured is measured now (the loads of a
   group started together arrive after its first round), or the total of the
   resources it published moved by more than the tolerance; at most once per
   ``balance_interval_ms``.  A member that published no load at all rejoins
   with its first ones unless its assignment says the leader needs none
   (``loads_known``: the leader has the load of everything it gave it, its
   former owners', or probes after the round anyway: rule 4); then the loads
   it first measures are what later changes are measured against.  Otherwise
   the leader decides when to look again (rule 4).
3. **The leader's view.**  The leader keeps the last load it saw for each
   resource, so that a resource whose owner is revoking it (and reports it no
   more) keeps its load; resources nobody ever measured count as the average
   (the stage's rule 1).  Resources the stage moved are *pinned* for
   ``pinned_intervals`` balancing intervals (not moved again meanwhile).  Where
   the stage put each resource is kept after the pin expires, while the
   members stay the same, so that the assignor's count balance does not undo
   it (the stage's rule 5: :func:`~workgroup.assignors.balance.balance`); a
   member that joins or leaves changes the premises of those decisions (the
   assignor's choice for a newcomer stands), but for one that takes nothing
   (leaving, draining): the stage decided without it.  What
   a round decided is kept in the round's plan
   (:class:`~workgroup.member.round_plan.RoundPlan`, kept by
   :class:`~workgroup.member.pipeline.LeaderPipeline`) while it withholds
   resources: the follow-up rounds of a cooperative rebalance carry it out
   instead of deciding again, until nothing is withheld or its premises change
   (a member joined or left or changed, the catalog changed).
4. **Probing.**  When a round ends still above the tolerance because
   ``max_moves`` or pinned resources stopped it (the moves left too few, or
   pins held anywhere in the way, for the swap or chain that would help; not
   when no move could help, as with one resource above the mean: then only
   changed loads can, and the next rebalance brings them), or when its stage
   moved resources while some load was not measured, or the round gives a
   member a resource it did not own whose load the leader never saw (a new
   leader that never saw a departed member's loads counts them as the
   average; their new owners measure them meanwhile, but rejoin by themselves
   only for what they published: rule 2), the leader asks for a rebalance
   ``balance_interval_ms`` later (Kafka Streams' probing rebalance): members
   rejoin with fresh loads and the stage goes on.  A round that ends within the
   tolerance schedules nothing; the next rebalance, whatever its cause, brings
   fresh loads.  Together with the stage's target (half the tolerance) and the
   pins, noise cannot start a storm of moves: at most one round per interval,
   and a resource never moves back within ``pinned_intervals`` intervals.
5. **A keyspace's rounds** (:mod:`~workgroup.member.keyspace_stage`: the
   planner runs in place of the stage): a round whose plan changed the map or
   waited for a hand-over probes ``balance_interval_ms`` later, so that the
   next plan sees the loads of the slices it cut, merged or moved once their
   owners measured them (they rejoin by themselves only for what they
   published: rule 2); a round that changed nothing plans no probe.  Rounds
   that wait one after another probe ever later (the interval doubles, up to
   ``MAX_WAIT_DOUBLINGS`` times): a member that has not yet synced holds
   nothing, so each round waits for it again, and a probe every interval would
   keep it from ever syncing where rounds take longer than the interval (a
   broker that holds JoinGroup half a session).
6. **Heading over rounds.**  When the stage heads for a placement over rounds
   (:mod:`~workgroup.assignors.balance_rounds`), the leader keeps it between
   rounds and gives it to the next; the round is unfinished meanwhile, so the
   leader probes an interval later (rule 4).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from workgroup.assignors._common import RackInfo
from workgroup.assignors.balance import (
    DEFAULT_MAX_MOVES,
    DEFAULT_TOLERANCE,
    Balanced,
    balance,
    check_settings,
)
from workgroup.assignors.balance_rounds import Heading
from workgroup.assignors.base import Assignment, AssignmentInput
from workgroup.errors import ConfigError
from workgroup.types import Resource

#: Default time between probing rebalances while the load stays over tolerance.
DEFAULT_BALANCE_INTERVAL_MS = 60_000
#: A resource the stage moved is not moved again for this many intervals.
DEFAULT_PINNED_INTERVALS = 3


def check_load(value: object) -> float:
    """``value`` as a load, or :class:`ConfigError` (rule 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"a load is a number (records/s, bytes/s, ...), got {value!r}")
    load = float(value)
    if not 0 <= load < math.inf:
        raise ConfigError(f"a load must be finite and >= 0, got {value!r}")
    return load


@dataclass(frozen=True, slots=True)
class BalanceSettings:
    """The balancing settings of a group (``imbalance_tolerance``, ``max_moves``,
    ``balance_interval_ms``); ``max_moves=0`` turns balancing off."""

    imbalance_tolerance: float = DEFAULT_TOLERANCE
    max_moves: int = DEFAULT_MAX_MOVES
    balance_interval_ms: int = DEFAULT_BALANCE_INTERVAL_MS
    pinned_intervals: int = DEFAULT_PINNED_INTERVALS

    def __post_init__(self) -> None:
        check_settings(self.imbalance_tolerance, self.max_moves)
        if isinstance(self.balance_interval_ms, bool) or not (
            isinstance(self.balance_interval_ms, int) and self.balance_interval_ms > 0
        ):
            raise ConfigError(
                f"balance_interval_ms must be an integer > 0, got {self.balance_interval_ms!r}"
            )
        if self.pinned_intervals < 0:
            raise ConfigError(f"pinned_intervals must be >= 0, got {self.pinned_intervals}")

    @property
    def smoothing_ms(self) -> float:
        return self.balance_interval_ms / 2


class LoadMeter:
    """A member's smoothed load per resource (rules 1 and 2)."""

    def __init__(self, smoothing_ms: float = DEFAULT_BALANCE_INTERVAL_MS / 2) -> None:
        if not smoothing_ms > 0:
            raise ConfigError(f"smoothing_ms must be > 0, got {smoothing_ms}")
        self.smoothing_ms = smoothing_ms
        #: ``resource -> (smoothed load, time of the last report)``.
        self._loads: dict[Resource, tuple[float, int]] = {}
        # Handlers in threads report while the member reads: one lock, held briefly.
        self._lock = threading.Lock()
        #: What the last metadata carried: ``(owned, loads)`` (rule 2).
        self._published: tuple[tuple[Resource, ...], tuple[float, ...]] | None = None
        #: When :meth:`changed` first looked after that publication.
        self._looked_at: int | None = None
        #: Something was measured before that publication (the leader has seen
        #: this member's loads, or remembers those of what it gave away).
        self._measured_before = False
        self._measured = False
        #: The last assignment said the leader needs no first loads from this
        #: member (it has them, or probes for them).
        self._loads_known = False

    def record(self, resource: Resource, value: object, now: int) -> None:
        load = check_load(value)
        with self._lock:
            self._measured = True
            previous = self._loads.get(resource)
            if previous is None:
                self._loads[resource] = (load, now)
                return
            smoothed, at = previous
            weight = 1 - math.exp(-max(now - at, 0) / self.smoothing_ms)
            self._loads[resource] = (smoothed + weight * (load - smoothed), max(now, at))

    def load(self, resource: Resource) -> float | None:
        with self._lock:
            entry = self._loads.get(resource)
        return entry[0] if entry else None

    def report(self, owned: Iterable[Resource]) -> tuple[float, ...]:
        """The loads of ``owned`` for the metadata (NaN: not measured; empty when
        nothing is); forgets resources no longer owned."""
        owned = tuple(owned)
        with self._lock:
            if not self._loads:
                self._published, self._looked_at = (owned, ()), None
                self._measured_before = self._measured
                return ()
            keep = set(owned)
            for resource in [r for r in self._loads if r not in keep]:
                del self._loads[resource]
            loads = tuple(self._loads[r][0] if r in self._loads else math.nan for r in owned)
            published = loads if any(not math.isnan(x) for x in loads) else ()
            self._published, self._looked_at = (owned, published), None
            self._measured_before = self._measured
        return published

    def assigned(self, *, loads_known: bool) -> None:
        """An assignment was taken; ``loads_known``: its leader needs no first
        loads from this member (rule 2)."""
        self._loads_known = loads_known

    def changed(self, owned: Iterable[Resource], now: int, settings: BalanceSettings) -> bool:
        """Whether the leader should see this member's loads again (rule 2): it
        published no load and measures some now, a resource it published
        unmeasured is measured now, or the total of those it published measured
        moved by more than the tolerance.  Only resources
        still owned count (the leader knows where it moved the others); at most
        once per ``balance_interval_ms``, counted from the first look after the
        publication, so that every resource has reported by then."""
        if settings.max_moves <= 0 or self._published is None:
            return False
        if self._looked_at is None:
            self._looked_at = now
        if now - self._looked_at < settings.balance_interval_ms:
            return False
        published_owned, published = self._published
        owned = tuple(owned)
        keep = set(owned)
        before: list[float] = []
        after: list[float] = []
        with self._lock:
            if not published:
                # A fresh member (a group started together): the leader has no
                # load of it, so any measured one is news.  One that had measured
                # before gave its loads in earlier rounds.
                measured = [r for r in owned if r in self._loads]
                if self._measured_before or not measured:
                    return False
                if not self._loads_known:
                    return True
                # The leader has their loads (their former owners'): what is
                # measured now is what later changes are measured against.
                self._published = (
                    tuple(measured),
                    tuple(self._loads[r][0] for r in measured),
                )
                return False
            for index, resource in enumerate(published_owned):
                entry = self._loads.get(resource)
                if entry is None or resource not in keep:
                    continue
                old = published[index]
                if math.isnan(old):
                    return True
                before.append(old)
                after.append(entry[0])
        old_total, new_total = math.fsum(before), math.fsum(after)
        return abs(new_total - old_total) > settings.imbalance_tolerance * old_total


@dataclass(frozen=True, slots=True)
class BalanceStage:
    """The balancing stage of one round as the leader describes it (frozen, so
    that it runs off the event loop): the settings, the resources pinned now
    and the loads remembered from earlier rounds (only read)."""

    tolerance: float
    max_moves: int
    pinned: frozenset[Resource] = frozenset()
    remembered: Mapping[Resource, float] = field(default_factory=dict)
    #: The round carries out an earlier decision that was stopped early.
    carry_stopped_early: bool = False
    #: The placement earlier rounds head for (rule 6).
    heading: Heading | None = None
    #: ``resource -> member`` the stage moved it to in earlier rounds, and the
    #: members it was decided for (rule 3).
    placed: Mapping[Resource, str] = field(default_factory=dict)
    placed_for: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class BalanceResult:
    """What the balancing stage did to one round's target."""

    assignment: Assignment
    #: The stage's result (``None``: nothing was measured, it did not run).
    balanced: Balanced | None
    #: The target is a decision for the follow-up rounds to carry out: the
    #: stage changed it, or carried one out.
    decided: bool
    #: It moved resources between members holding one whose load was not
    #: measured (counted as the average): measured loads may decide otherwise.
    guessed: bool
    #: The loads it used (the remembered ones and the round's).
    loads: Mapping[Resource, float]
    #: The members that take work, those its decisions are for (rule 3).
    members: frozenset[str] = frozenset()


def taking_work(data: AssignmentInput) -> frozenset[str]:
    """The members of ``data`` that take some kind: one leaving or draining
    takes nothing, and the stage decides as if it were gone."""
    return frozenset(mid for mid, m in data.members.items() if m.kinds)


def balance_stage(
    stage: BalanceStage,
    target: Assignment,
    data: AssignmentInput,
    *,
    refused: Mapping[str, Collection[Resource]],
    carried: bool,
    exclusive: bool,
) -> BalanceResult:
    """The balancing stage on ``target`` (the round's target after the
    reassignment delay and refusals), for the members of ``data``: nothing is
    given to a member that refuses it.  ``carried``: ``target`` is an earlier
    round's decision, measured only (no moves).  Pure."""
    loads: Mapping[Resource, float] = data.resource_loads
    members = taking_work(data)
    if stage.remembered:
        # Only read, so shared when nobody reported (a fresh group): copying a
        # million loads costs more than summing them.
        loads = {**stage.remembered, **loads} if loads else stage.remembered
    if not loads:
        return BalanceResult(
            target, None, decided=False, guessed=False, loads=loads, members=members
        )
    capacities = {mid: m.capacity for mid, m in data.members.items()}
    kinds = {mid: m.kinds for mid, m in data.members.items()}
    if carried:
        # Measured only (max_moves=0), as the plan decided it.
        measured = balance(
            target, loads, capacities, tolerance=stage.tolerance, max_moves=0, kinds=kinds
        )
        balanced = replace(measured, stopped_early=stage.carry_stopped_early)
        return BalanceResult(
            balanced.assignment, balanced, decided=True, guessed=False, loads=loads, members=members
        )
    owned: dict[str, Collection[Resource]] = {mid: m.owned for mid, m in data.members.items()}
    owned_loads = {mid: m.owned_load for mid, m in data.members.items() if m.owned_load is not None}
    balanced = balance(
        target,
        loads,
        capacities,
        tolerance=stage.tolerance,
        max_moves=stage.max_moves,
        kinds=kinds,
        owned=owned,
        pinned=stage.pinned,
        racks=RackInfo.build(data),
        exclusive=exclusive,
        owned_loads=owned_loads,
        refused=refused,
        heading=stage.heading,
        placed=stage.placed if stage.placed_for == members else None,
    )
    out = balanced.assignment
    # The members the moves touched are where a guess decided anything (a
    # million resources over 2,000 members: 500 lookups each, not a million).
    touched = {mid for move in balanced.moves for mid in (move.giver, move.taker)}
    guessed = balanced.gained_unmeasured or any(
        r not in loads for mid in touched for r in out.get(mid, ())
    )
    decided = bool(balanced.moves or balanced.returned)
    return BalanceResult(
        out, balanced, decided=decided, guessed=guessed, loads=loads, members=members
    )


@dataclass(frozen=True, slots=True)
class BalanceOutcome:
    """What the balancing stage did in a round."""

    #: The stage's result (``None``: it did not run).
    balanced: Balanced | None
    #: The round's target is a decision for the follow-up rounds to carry out.
    decided: bool


#: Rule 5: how many times the probe's delay doubles over rounds that wait in a row.
MAX_WAIT_DOUBLINGS = 4


class LeaderBalancing:
    """The leader's memory between rounds and its probing timer (rules 3 and 4)."""

    def __init__(self, settings: BalanceSettings) -> None:
        self.settings = settings
        #: The loads the last round used (never modified: rounds build new ones).
        self.loads: Mapping[Resource, float] = {}
        #: ``resource -> when the stage moved it``.
        self.moved_at: dict[Resource, int] = {}
        #: When to probe (``None``: nothing scheduled).
        self.probe_at: int | None = None
        #: What the last round's stage did (``None``: it did not run).
        self.last: Balanced | None = None
        #: The plan being carried out was decided on guessed loads (rule 4).
        self._guessed = False
        #: The placement the stage heads for over rounds (rule 6).
        self.heading: Heading | None = None
        #: ``resource -> member`` the stage moved it to, for the members of
        #: ``placed_for`` (rule 3); never modified (a round that changes it
        #: builds a new one: the stage reads it in another thread).
        self.placed: Mapping[Resource, str] = {}
        self.placed_for: frozenset[str] = frozenset()
        #: Keyspace rounds in a row that waited for a hand-over (rule 5).
        self._waits_in_a_row = 0

    @property
    def enabled(self) -> bool:
        return self.settings.max_moves > 0

    def pinned(self, now: int) -> frozenset[Resource]:
        span = self.settings.pinned_intervals * self.settings.balance_interval_ms
        for resource in [r for r, at in self.moved_at.items() if now - at >= span]:
            del self.moved_at[resource]
        return frozenset(self.moved_at)

    def stage(self, now: int, *, carry_stopped_early: bool = False) -> BalanceStage | None:
        """The stage a round starting at ``now`` runs (``None``: balancing is off);
        ``carry_stopped_early``: the round carries out a decision stopped early."""
        if not self.enabled:
            return None
        self.probe_at = None  # this round is the probe; it schedules the next
        return BalanceStage(
            tolerance=self.settings.imbalance_tolerance,
            max_moves=self.settings.max_moves,
            pinned=self.pinned(now),
            remembered=self.loads,
            carry_stopped_early=carry_stopped_early,
            heading=self.heading,
            placed=self.placed,
            placed_for=self.placed_for,
        )

    def finished(self, now: int, result: BalanceResult | None, *, carried: bool) -> BalanceOutcome:
        """Record a round's stage (``result``; ``None``: balancing is off) and
        schedule the next probe; returns what the stage did.  ``carried``: the
        round carried out an earlier decision."""
        if result is None:
            return BalanceOutcome(None, decided=False)
        self.last = result.balanced
        self.loads = result.loads  # a new mapping each round: no copy needed
        if not carried:  # a carried round decides nothing: the heading stays
            self.heading = self.last.heading if self.last is not None else None
        if self.last is None:
            self.probe_at = None
            return BalanceOutcome(None, decided=result.decided)
        for move in self.last.moves:
            self.moved_at[move.resource] = now
        self._remember_placements(self.last, result.members)
        unfinished = self.last.unfinished(self.settings.imbalance_tolerance)
        # Rule 4: moves decided on guessed loads are looked at again once measured
        # (the follow-up rounds that carry them out keep that).
        self._guessed = result.guessed or (carried and self._guessed)
        again = unfinished or self._guessed
        self.probe_at = now + self.settings.balance_interval_ms if again else None
        return BalanceOutcome(self.last, decided=result.decided)

    def keyspace_planned(self, now: int, *, changed: bool, waited: bool) -> None:
        """Rule 5: a keyspace round's plan changed the map, or waited for a hand-over."""
        self._waits_in_a_row = self._waits_in_a_row + 1 if waited else 0
        if not self.enabled:
            return
        if not (changed or waited):
            self.probe_at = None
            return
        doublings = min(max(self._waits_in_a_row - 1, 0), MAX_WAIT_DOUBLINGS)
        self.probe_at = now + self.settings.balance_interval_ms * 2**doublings

    def _remember_placements(self, last: Balanced, members: frozenset[str]) -> None:
        """Where the round's moves put resources (rule 3); a member that
        joins or leaves (``members``: those that take work) starts the memory
        afresh."""
        if members != self.placed_for:
            self.placed_for = members
            self.placed = {}
        if last.moves:
            placed = dict(self.placed)
            placed.update((move.resource, move.taker) for move in last.moves)
            self.placed = placed

    def loads_known(
        self, assigned: Mapping[str, Collection[Resource]], published: Collection[str]
    ) -> frozenset[str]:
        """The members of ``assigned`` that published no load (not in
        ``published``) and need not rejoin to bring their first (rule 2): the
        leader has the load of everything they are given (the former owners'),
        or probes after this round anyway.  With no load at all (a group
        started together), none: their first loads are news."""
        if not self.loads:
            return frozenset()
        fresh = [mid for mid in assigned if mid not in published]
        if self.probe_at is not None:
            return frozenset(fresh)
        known = self.loads
        return frozenset(mid for mid in fresh if all(r in known for r in assigned[mid]))

    def due(self, now: int) -> bool:
        return self.probe_at is not None and now >= self.probe_at

    def probed(self) -> None:
        """The probing rebalance was requested."""
        self.probe_at = None


__all__ = [
    "DEFAULT_BALANCE_INTERVAL_MS",
    "DEFAULT_PINNED_INTERVALS",
    "BalanceOutcome",
    "BalanceResult",
    "BalanceSettings",
    "BalanceStage",
    "LeaderBalancing",
    "LoadMeter",
    "balance_stage",
    "check_load",
    "taking_work",
]
