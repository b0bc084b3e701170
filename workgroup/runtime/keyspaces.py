"""A keyspace in a running app: a handler per owned slice, with its :class:`SliceLease`.

``@app.keyspace("users")`` (:meth:`workgroup.App.keyspace`) declares a group,
``<app>.users``, whose resources are the slices of the keyspace's map,
``("users", slice id)``; the member core hands them out with leases like any
resource (:mod:`workgroup.member.keyspace`, :mod:`workgroup.member.keyspace_stage`).

Rules:

1. **The catalog is the map**: the group's resource list is the slice ids of
   the map the member was last handed (no resource function; nothing to poll).
2. **A slice's token** is the one the map gave it when its lease started; a
   slice keeps its token while it keeps its owner, and a slice born from a split
   or a merge, or moved, takes a token above every token before it.
3. **owns(key)**, asked continuously: the lease is held, and the key's slice
   in the member's current map is this slice, with this token, owned by this
   member.  It turns false as soon as the member learns a map that moved the
   key elsewhere (a split, a merge, a move), before the slice's lease ends.
4. **Fencing per key** (:meth:`SliceLease.token_for`): a write of a key goes
   with the key's token, the slice's while the key is this slice's, and is
   refused here (:class:`~workgroup.keyspaces.KeyMovedError`) once it is not.
   A holder that cannot know yet (frozen across a split) still writes with its
   old token, which is below the token of every later holder of the key, so a
   store that compares tokens per key (:class:`~workgroup.sinks.sql.FencedTable`,
   keyed by the key) refuses it once the new holder wrote.
5. **Loads**: :meth:`SliceLease.report_load` is the slice's load (published
   with the member's metadata, as any resource's); :meth:`SliceLease.report_key_load`
   samples a key's, and the heaviest reach the leader, which splits a key that
   dominates its slice into a slice of its own.
6. **A full restart keeps the tokens**: a slice's handler starts once the
   group's slots hold a highest token at or above the slice's
   (:mod:`workgroup.runtime.keyspace_state`), and the leader after a restart
   issues tokens above it.
7. **A bounded pool of lease slots**: a slice's lease slot is the pool slot
   its map gives it (:mod:`workgroup.keyspaces.slot_pool`), a slot a slice
   merged away handed on; its header names the slice, and a new holder finding
   an earlier slice's name there starts without a checkpoint.  A keyspace
   uses about as many slots (on Kafka, topics) as it ever had slices at once.
8. **Warm-ups** (``warm_up=True``; the keyspace stage's rule 6): a slice
   moved to this process is first handed to it to warm up
   (:attr:`SliceLease.role` ``"warming"``): the map still names its current
   owner, with that owner's token, so :meth:`SliceLease.owns` is false and
   :meth:`SliceLease.token_for` refuses every key.  :meth:`SliceLease.ready`
   says the slice is prepared; once the cut-over made this process the owner
   it takes the slice as the map now gives it (the token of the cut-over, above
   the previous owner's) and, after rule 6's proof of that token, returns
   ``True``; ``False`` once the move was called off or the lease ended.
9. **Standbys** (``standbys=N``; the keyspace stage's rule 7): a slice's
   standby twin held here runs the handler with :attr:`SliceLease.role`
   ``"standby"``: the lease owns no key (:meth:`SliceLease.owns` is false,
   :meth:`SliceLease.token_for` refuses every key) and needs no proof of a
   token; :meth:`SliceLease.ready` reports the standby warm, which makes this
   process the preferred next owner of the slice.  Once it is handed the
   slice itself, an active lease of its own runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from workgroup.errors import ConfigError
from workgroup.keyspaces.errors import KeyMovedError
from workgroup.keyspaces.hashing import key_hash
from workgroup.keyspaces.slices import Slice
from workgroup.member.driver import GroupMember, member_keyspace
from workgroup.member.keyspace import KeyspaceConfig, KnownMap, MemberKeyspace
from workgroup.runtime.keyspace_slots import pool_slot_key
from workgroup.runtime.keyspace_state import KeyspaceState
from workgroup.runtime.lease import Lease, Role
from workgroup.runtime.slots import Slot, slot_of
from workgroup.runtime.spec import KeyspaceSpec
from workgroup.types import Key


class SliceLease:
    """This process's hold on one slice of a keyspace (see the module docstring).

    Attributes:
        keyspace: The keyspace's name.
        slice: The slice as the map gave it when the lease started (its range
            and its token).
        lease: The underlying :class:`~workgroup.Lease` (checkpoints, commits,
            its own fencing token, revocation).
    """

    def __init__(
        self,
        lease: Lease,
        piece: Slice,
        view: MemberKeyspace,
        owner: str,
        cover: Callable[[int, Lease], Awaitable[bool]] | None = None,
    ) -> None:
        self.lease = lease
        self.slice = piece
        self.keyspace = view.config.name
        self._view = view
        #: This member's id: the owner the map names while this lease works.
        self._owner = owner
        #: Rule 6's proof of a token (``None``: no kept state).
        self._cover = cover

    @property
    def role(self) -> Role:
        """``"active"``, ``"warming"`` while the slice is warmed up here (rule
        8), or ``"standby"`` (rule 9)."""
        return self.lease.role

    async def ready(self) -> bool:
        """Rule 8: say the slice is prepared; ``True`` once this process owns it
        (:attr:`slice` is then the map's, with the cut-over's token), ``False``
        once the move was called off or the lease ended.  A standby (rule 9)
        returns at once: whether its lease is held."""
        if not await self.lease.ready():
            return False
        if self.lease.role == "standby":
            return True
        smap = self._view.map
        current = smap.by_id().get(self.slice.id) if smap is not None else None
        if current is not None and current.owner == self._owner:
            if self._cover is not None and not await self._cover(current.token, self.lease):
                return False  # the lease ended before the slots proved the new token
            self.slice = current
        return True

    def __repr__(self) -> str:
        return f"<SliceLease {self.keyspace} {self.slice} {self.lease.state.value}>"

    @property
    def token(self) -> int:
        """The slice's token (rule 2): fences the keys this slice holds."""
        return self.slice.token

    @property
    def map(self) -> KnownMap | None:
        """The newest map this process knows: whole, or the part of it this
        member works on (:mod:`workgroup.member.keyspace` rule 1), whose
        lookups answer ``None`` for a key of another member's slice."""
        return self._view.map

    @property
    def held(self) -> bool:
        return self.lease.held

    async def wait_revoked(self) -> None:
        """Return once the slice's lease ends (revoked, lost or stopping)."""
        await self.lease.wait_revoked()

    def owns(self, key: Key) -> bool:
        """Rule 3: whether ``key`` is this slice's, with this token, now."""
        smap = self._view.map
        if smap is None or not self.lease.held or self.lease.role == "standby":
            return False  # a standby owns no key (rule 9)
        current = smap.slice_for_key(key)
        return (
            current is not None
            and current.id == self.slice.id
            and current.token == self.slice.token
            and current.owner == self._owner
        )

    def token_for(self, key: Key) -> int:
        """Rule 4: the token to write ``key`` with (this slice's); raises
        :class:`~workgroup.keyspaces.KeyMovedError` if the key is not this
        slice's (rule 3)."""
        if self.owns(key):
            return self.slice.token
        smap = self._view.map
        current = None if smap is None else smap.slice_for_key(key)
        now = "another member's" if current is None else str(current)
        raise KeyMovedError(
            f"keyspace {self.keyspace!r}: key {key!r} is not in slice {self.slice.id} "
            f"(token {self.slice.token}) held here{'' if self.lease.held else ' (lease ended)'}; "
            f"its slice is {now}"
        )

    def report_load(self, value: float) -> None:
        """Rule 5: the slice's current load (finite, >= 0, the app's unit)."""
        self.lease.report_load(value)

    def report_key_load(self, key: Key, value: float) -> None:
        """Rule 5: the current load of one key of this slice (sampled: report the
        hot ones); :class:`~workgroup.errors.ConfigError` for a bad value."""
        self._view.record_key_load(key_hash(key), value)


class KeyspaceGroup:
    """The link between a keyspace's declaration and its group's member: the
    group's resource list (rule 1) and its handler, which wraps each lease in a
    :class:`SliceLease`."""

    def __init__(self, spec: KeyspaceSpec, group_id: str) -> None:
        self.spec = spec
        self.group_id = group_id
        self._indexed: tuple[KnownMap, dict[int, Slice]] | None = None
        self.config = KeyspaceConfig(
            spec.name, spec.settings, spec.max_sampled_keys, standbys=spec.standbys
        )
        #: Set once the group's member exists.
        self.member: GroupMember | None = None
        #: The keyspace's state kept across restarts (rule 6), set with the member.
        self.state: KeyspaceState | None = None

    def slice_ids(self) -> list[int]:
        """Rule 1: the slices of the map the member knows (none before the first)."""
        keyspace = member_keyspace(self.member) if self.member is not None else None
        smap = keyspace.map if keyspace is not None else None
        return [] if smap is None else [piece.id for piece in smap.slices]

    def view(self) -> MemberKeyspace | None:
        """The member's view of the keyspace (``None``: no member yet)."""
        return member_keyspace(self.member) if self.member is not None else None

    def _map(self) -> KnownMap | None:
        keyspace = self.view()
        return keyspace.map if keyspace is not None else None

    def _slices(self) -> Mapping[int, Slice]:
        """The slices of the map this process knows, by id (built once per map)."""
        smap = self._map()
        if smap is None:
            return {}
        if self._indexed is None or self._indexed[0] is not smap:
            self._indexed = (smap, smap.by_id())
        return self._indexed[1]

    def slot(self, slice_id: Key) -> Slot:
        """Rule 7: the lease slot of slice ``slice_id``: its slot in the pool."""
        piece = self._slices().get(slice_id) if type(slice_id) is int else None
        if piece is None or piece.slot is None:
            # Not in the map this process knows (yet), or given no pool slot:
            # the slot of its own key, as any resource's.
            return slot_of(self.group_id, slice_id)
        return slot_of(self.group_id, pool_slot_key(self.spec.name, piece.slot))

    def earlier_holder(self, named: Key) -> bool:
        """Rule 7: whether the slice a pool slot's header names held the slot
        before (it is in no map this process knows any more)."""
        return type(named) is int and named not in self._slices()

    async def handle(self, lease: Lease) -> None:
        """Run the keyspace's handler on the slice ``lease`` holds."""
        member = self.member
        keyspace = member_keyspace(member) if member is not None else None
        smap = keyspace.map if keyspace is not None else None
        piece = smap.by_id().get(int(lease.key)) if smap is not None else None
        if member is None or piece is None:
            raise ConfigError(
                f"keyspace {self.spec.name!r}: slice {lease.key} is not in the map this "
                "process knows"
            )
        assert keyspace is not None
        # A warming lease's slice has its current owner's token, proved already;
        # a standby takes no token (rule 9).
        standby = lease.role == "standby"
        if (
            not standby
            and self.state is not None
            and not await self.state.cover(piece.token, lease)
        ):
            return  # the lease ended before the slots proved the slice's token
        state = self.state
        await self.spec.handler(
            SliceLease(
                lease,
                piece,
                keyspace,
                member.member_id,
                cover=state.cover if state is not None else None,
            )
        )


__all__ = ["KeyspaceGroup", "SliceLease"]
