"""A keyspace's slices share a bounded pool of lease slots: merges and splits
over rounds hand slots on instead of taking new ones (on a Kafka broker a slot
is a topic), and every key keeps exactly one owner (the embedded coordinator
and Tansu)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from tests.wire.member.backends import Backend, run_backend
from tests.wire.runtime.test_keyspaces import KEYS, Process, owners_of, settle
from workgroup.admin import read_lease_slots
from workgroup.keyspaces import PlannerSettings, SliceMap
from workgroup.runtime.slots import LEASE_TOPIC_PREFIX

# Four slices a member, no more and no fewer: a lone member's 8 slices merge
# down to 4, and split back to 8 when a second member joins.
SETTINGS = PlannerSettings(
    imbalance_tolerance=0.5, min_slices_per_member=4, max_slices_per_member=4, churn_budget=1.0
)
#: The keyspace's own state slots: the token, the epoch, one chunk of its map.
STATE_SLOTS = 3
CYCLES = 3


#: How long a map may take to settle: Tansu holds every JoinGroup about half
#: a session (1.5 s here), and a map settles over several rounds.
SETTLE_S = {"embedded": 40.0, "tansu": 90.0}
# Several maps settle in a test: more than the suite's default of 120 s on Tansu.
pytestmark = pytest.mark.timeout(360)


async def settle_at(processes: list[Process], count: int, timeout_s: float) -> SliceMap:
    """The map once it is settled with ``count`` slices: a lone member's merges
    take more than one round (a slice merges once a round), and the next round
    comes a balancing interval later, after :func:`settle`'s quiet spell."""
    async with asyncio.timeout(timeout_s):
        while True:
            smap = await settle(processes, timeout_s)
            if len(smap.slices) == count:
                return smap


@pytest.fixture(scope="module", params=["embedded", pytest.param("tansu", marks=pytest.mark.tansu)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    with run_backend(request.param) as running:
        yield running


async def test_splits_and_merges_hand_slots_on(backend: Backend) -> None:
    app_name = f"ks-{uuid.uuid4().hex[:8]}"
    group = f"{app_name}.users"
    stay = Process("stay", app_name, SETTINGS, loads=False)
    running = [stay.start(backend.bootstrap)]
    born: set[int] = set()
    try:
        for cycle in range(CYCLES):
            visitor = Process(f"visitor-{cycle}", app_name, SETTINGS, loads=False)
            visit = visitor.start(backend.bootstrap)
            both = await settle_at([stay, visitor], 8, SETTLE_S[backend.name])
            for key in KEYS:
                assert len(owners_of([stay, visitor], key)) == 1, key
            visit[0].set()
            await asyncio.wait_for(visit[1], 40)
            alone = await settle_at([stay], 4, SETTLE_S[backend.name])
            born |= {s.id for s in both.slices} | {s.id for s in alone.slices}
    finally:
        for stop, task in running:
            stop.set()
            await asyncio.gather(task, return_exceptions=True)
    topics = {
        slot.topic
        for slot in await read_lease_slots(backend.bootstrap, group)
        if slot.topic.startswith(f"{LEASE_TOPIC_PREFIX}{group}.")
    }
    # A slot per slice id would be one per id born (36 here, 39 topics before
    # the pool); the pool holds the most slices at once (8) and the slots
    # retired while their holders let go (4 here: 15 topics with the state's).
    assert len(born) > 2 * len(topics)
    assert len(topics) <= 2 * 8 + STATE_SLOTS
