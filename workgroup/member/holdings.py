"""What a member holds and what the application is told about it: ownership,
the callbacks issued and running, releasing, the callback-error policy and the
filter on foreign resources.  Sans-I/O.

The member machine decides *when* something changes hands (its rules 7-9 and
12); this part applies the change, issues the callback that reports it and says
what follows from it (a round to ask for, an error to fail with).

Rules:

1. Every change is applied to :class:`~workgroup.member.ownership.Ownership`
   first, then reported by one :class:`~workgroup.member.actions.InvokeCallback`
   whose ``owned`` is what is owned right after it; an empty change issues
   nothing.  Callback ids come from the machine's one
   :class:`~workgroup.member.requests.RequestIds`, the actions go to its outbox.
2. A callback is *running* from its issue until the driver says it is done (or
   failed); while any runs, the machine sends no JoinGroup and no LeaveGroup.
3. A revocation's resources are releasing until its ``on_revoked`` callback
   returns, or, with ``confirm_release``, until :meth:`Holdings.released` names
   them, each on its own.  With ``confirm_release`` a revocation opens the
   release window: a cooperative JoinGroup waits until ``RELEASE_WINDOW_MS``
   after it for the releases.  A confirmed release that leaves others
   releasing keeps the window open until ``GATHER_MS`` after it: releases
   come in bunches (a daemon's queries end their batches on the same
   trigger), and one that just misses a round's JoinGroup needs a round of
   its own, which the others notice only at their next heartbeat.
4. A loss drops what is releasing too; with ``confirm_release`` that is
   reported in ``on_lost`` (the work on it must stop now), without it the
   running ``on_revoked`` callbacks say so already.
5. A callback that raised has made its change all the same.  ``"fail"`` fails
   the member (a :class:`~workgroup.member.errors.CallbackError`, the
   callback's exception as its cause) unless the member failed or closed
   already; otherwise the failure is logged (``member.callback_failed``) and,
   with ``"release"``, what a failed ``on_assigned`` took is given back.
6. An assignment is trusted only so far: resources of kinds the member does not
   take, or, when the leader used the same catalog, not in that catalog, are
   dropped and logged (``member.assignment_foreign``).
7. No holding keeps a timer: callbacks and releases are events, and the release
   window is read by the JoinGroup's timing, so :meth:`Holdings.next_deadline`
   is always ``None``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from workgroup.log import get_logger
from workgroup.member.actions import Action, CallbackErrorPolicy, CallbackKind, InvokeCallback
from workgroup.member.errors import CallbackError
from workgroup.member.ownership import Ownership
from workgroup.member.requests import RequestIds
from workgroup.protocol.metadata import AssignmentData
from workgroup.types import Resource, sorted_resources

log = get_logger(__name__)

#: A cooperative JoinGroup (a follow-up round, a closing member's hand-over)
#: waits up to this long after a revocation for its resources' releases (less,
#: once nothing is releasing): what is released by then goes to others in that
#: round instead of one more (rule 3).
RELEASE_WINDOW_MS = 100
#: A release that leaves others releasing holds the JoinGroup this long for them
#: (rule 3): a round costs the others' heartbeat interval, this costs little.
GATHER_MS = 50


@dataclass(frozen=True, slots=True)
class GiveBack:
    """Rule 5, ``"release"``: give back what a failed callback took."""

    resources: tuple[Resource, ...]
    reason: str


class Holdings:
    """One member's resources and the callbacks that report them."""

    def __init__(
        self,
        group_id: str,
        ids: RequestIds,
        out: list[Action],
        *,
        confirm_release: bool,
        on_callback_error: CallbackErrorPolicy,
    ) -> None:
        self._group_id = group_id
        self._ids = ids
        self._out = out
        #: Releases are confirmed one by one, not by ``on_revoked`` returning (rule 3).
        self.confirm_release = confirm_release
        self._on_callback_error = on_callback_error
        self.ownership = Ownership()
        #: The callbacks issued and not done yet, by id (rule 2).
        self._callbacks: dict[int, InvokeCallback] = {}
        #: on_revoked callbacks running, and what they revoke (rule 3).
        self._revoking: dict[int, tuple[Resource, ...]] = {}
        #: A cooperative JoinGroup waits until then for releases (rule 3).
        self.release_window_until = 0
        self._catalog_key_sets: dict[str, frozenset[str | int]] = {}
        self._catalog_sets_for: object = None

    # --- views ------------------------------------------------------------------

    @property
    def owned(self) -> frozenset[Resource]:
        return self.ownership.resources

    @property
    def releasing(self) -> frozenset[Resource]:
        return self.ownership.releasing

    @property
    def callbacks_running(self) -> bool:
        """Rule 2: some callback has not returned yet."""
        return bool(self._callbacks)

    def __bool__(self) -> bool:
        """Something is owned or still releasing."""
        return bool(self.ownership)

    def next_deadline(self) -> int | None:
        """Rule 7: no holding wakes the member."""
        return None

    # --- changes ----------------------------------------------------------------

    def callback(self, kind: CallbackKind, resources: tuple[Resource, ...], gen: int) -> None:
        """Issue a callback for a change already applied (rule 1)."""
        if not resources:
            return
        callback = InvokeCallback(self._ids.take(), kind, resources, gen, self.owned)
        self._callbacks[callback.callback_id] = callback
        self._out.append(callback)

    def warmups_ended(self, ended: tuple[Resource, ...], reason: str, generation: int) -> None:
        """Warm-ups ``ended`` (never owned) are over: ``on_warming_ended``."""
        if not ended:
            return
        log.info("member.warmup_ended", group=self._group_id, count=len(ended), reason=reason)
        self.callback("on_warming_ended", ended, generation)

    def revoke(
        self, resources: Iterable[Resource], generation: int, seen: int
    ) -> tuple[Resource, ...]:
        """Revoke ``resources`` given up in ``generation``; returns those owned.
        ``seen``: the newest time the member saw (the release window's start)."""
        revoked = self.ownership.start_release(resources, generation)
        self._report_revoked(revoked, generation, seen)
        return revoked

    def revoke_before_eager_join(self, seen: int) -> None:
        """Eager: nothing may be owned by anyone while the group rebalances."""
        self._report_revoked(*self.ownership.give_up_before_eager_join(), seen)

    def _report_revoked(self, resources: tuple[Resource, ...], generation: int, seen: int) -> None:
        """``resources`` are releasing: tell the application (rule 3)."""
        if not resources:
            return
        log.info(
            "member.revoking",
            group=self._group_id,
            count=len(resources),
            generation=generation,
        )
        self.callback("on_revoked", resources, generation)
        self._revoking[self._ids.last] = resources
        if self.confirm_release:
            self.release_window_until = seen + RELEASE_WINDOW_MS

    def callback_done(self, callback_id: int) -> tuple[Resource, ...]:
        """The callback returned (rule 2); returns what that released (rule 3)."""
        self._callbacks.pop(callback_id, None)
        revoked = self._revoking.pop(callback_id, ())
        if revoked and not self.confirm_release:
            return self.released(revoked)
        return ()

    def released(self, resources: Iterable[Resource]) -> tuple[Resource, ...]:
        """Revoked resources whose work stopped: no longer reported (rule 3);
        returns those that were releasing."""
        done = self.ownership.released(resources)
        if done:
            log.info(
                "member.released",
                group=self._group_id,
                count=len(done),
                releasing=len(self.ownership.releasing),
            )
        return done

    def confirmed_released(self, resources: Iterable[Resource], now: int) -> tuple[Resource, ...]:
        """The application confirmed releases (``confirm_release``): as
        :meth:`released`, and the window stays open for the rest (rule 3)."""
        done = self.released(resources)
        if done and self.confirm_release and self.ownership.releasing:
            self.release_window_until = max(self.release_window_until, now + GATHER_MS)
        return done

    def give_up(
        self, resources: Iterable[Resource], reason: str, member_id: str
    ) -> tuple[Resource, ...]:
        """Stop owning ``resources`` without a callback; returns those owned."""
        released = self.ownership.give_up(resources)
        if released:
            log.warning(
                "member.resources_released",
                group=self._group_id,
                member_id=member_id,
                count=len(released),
                reason=reason,
            )
        return released

    def lose(self, reason: str) -> None:
        """Everything is gone without a revocation (rule 4)."""
        if not self.ownership:
            return
        owned, releasing, generation = self.ownership.lose()
        lost = sorted_resources({*owned, *releasing}) if self.confirm_release else owned
        if not lost:
            return
        log.warning(
            "member.resources_lost",
            group=self._group_id,
            count=len(lost),
            generation=generation,
            reason=reason,
        )
        self.callback("on_lost", lost, generation)

    def assign(self, assigned: Iterable[Resource], generation: int) -> tuple[Resource, ...]:
        """Own ``assigned``; reports what was added (``on_assigned``) and returns it."""
        added = self.ownership.assign(assigned, generation)
        self.callback("on_assigned", added, generation)
        return added

    def callback_failed(
        self,
        callback_id: int,
        error: BaseException,
        traceback: str | None,
        *,
        may_fail: bool,
    ) -> CallbackError | GiveBack | None:
        """Rule 5 for the callback ``callback_id`` that raised ``error``: the error
        to fail the member with, what to give back, or nothing (logged).
        ``may_fail``: the member has neither failed nor closed."""
        callback = self._callbacks.get(callback_id)
        if callback is None:
            return None
        what = f"{callback.kind} failed in generation {callback.generation}"
        policy = self._on_callback_error
        if policy == "fail" and may_fail:
            failure = CallbackError(f"{what}: {type(error).__name__}: {error}")
            failure.__cause__ = error
            return failure  # logged as member.fatal
        # Kafka's clients log callback failures and carry on; the ownership
        # change has happened either way.
        log.error(
            "member.callback_failed",
            callback=callback.kind,
            generation=callback.generation,
            error_type=type(error).__name__,
            error=str(error),
            policy=policy,
            **({"traceback": traceback} if traceback else {}),
        )
        if policy == "release" and callback.kind == "on_assigned":
            return GiveBack(callback.resources, what)
        return None

    # --- what an assignment may hand over (rule 6) -------------------------------

    def without_foreign_resources(
        self,
        data: AssignmentData,
        *,
        kinds: Iterable[str] | None,
        catalog: Mapping[str, tuple[str | int, ...]],
        catalog_hash: bytes,
        generation: int,
        leader: str,
    ) -> AssignmentData:
        """Drop what a buggy or hostile leader may not hand this member (rule 6).
        A leader with a newer catalog may name resources this member has not
        read yet."""
        same_catalog = data.catalog_hash == catalog_hash
        if kinds is None and not same_catalog:
            return data
        keys = self._catalog_sets(catalog)

        def foreign(resource: Resource) -> bool:
            kind, key = resource
            if kinds is not None and kind not in kinds:
                return True
            return same_catalog and key not in keys.get(kind, ())

        rejected = [r for r in data.assigned if foreign(r)]
        if not rejected:
            return data
        log.error(
            "member.assignment_foreign",
            group=self._group_id,
            generation=generation,
            leader=leader,
            count=len(rejected),
            first=[f"{kind}/{key}" for kind, key in rejected[:3]],
        )
        kept = tuple(r for r in data.assigned if not foreign(r))
        return replace(data, assigned=kept)

    def _catalog_sets(
        self, catalog: Mapping[str, tuple[str | int, ...]]
    ) -> dict[str, frozenset[str | int]]:
        if self._catalog_sets_for is not catalog:
            self._catalog_key_sets = {k: frozenset(v) for k, v in catalog.items()}
            self._catalog_sets_for = catalog
        return self._catalog_key_sets


__all__ = ["GATHER_MS", "RELEASE_WINDOW_MS", "GiveBack", "Holdings"]
