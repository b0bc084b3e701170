"""Keyspaces: key -> slice lookups per second, the slice map's size, the planner's round.

Four tables (one process, one core):

* **lookups**: keys per second through ``SliceMap.slice_for_key`` for str keys
  (``"user-<n>"``) and int keys, at several slice counts, next to the hash alone
  (``key_hash``) and the bisection alone (``SliceMap.slice_of`` on a hash).
* **directory**: keys per second through ``Directory.owner(keyspace, key)``,
  the routing answer (slice, token, holder, endpoint), for a group of 100
  members that carry the map, read as a reader reads them (the members'
  described assignments joined, the map decoded from them); target 1,000,000
  lookups/s for any key.
* **encoding**: the encoded slice map's bytes and encode/decode times, owned
  by 100 members.
* **planner**: the planner alone (``plan_next_map``) at 100 members and 10,000
  slices with skewed loads and hot keys: a steady round, a round after a member
  joins, and one after a member leaves (best of ``--repeat``).
* **leader**: the leader's whole round at 100 members and 10,000 slices, as the
  member machine runs it (``LeaderPipeline``, led by ``member-000``): the
  members' JoinGroup metadata read (two carriers report the whole map, every
  other member its part of it; each what it owns, the loads of its slices and
  8 sampled hot keys), the keyspace stage (the planner, the catalog, the
  hand-overs withheld), and the 100 SyncGroup assignments encoded (the next
  map whole to two carriers, its part to every other member).  Rounds:
  steady, one member joins, one leaves, both carriers leave at once (the map
  rebuilt from the parts), and the first round after a full restart (nobody
  carries a map).  Best of ``--repeat``; target <= 1 s.  "group state": the
  members' metadata and assignments, which a Kafka broker stores as one
  record (1 MiB by default: ``LeaderPipeline``'s rule 6).

    .venv/bin/python benchmarks/keyspace_lookup.py [--keys N] [--repeat N]
        [--only lookups|directory|encoding|planner|leader] [--slices 100,10000,100000]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.table import Table

from workgroup.client.describe import GroupDescription, MemberDescription
from workgroup.client.keyspaces import newest_maps
from workgroup.client.owners import join_owners
from workgroup.client.reader import GroupSnapshot
from workgroup.directory import Directory
from workgroup.kafka.messages import JoinedMember
from workgroup.keyspaces import (
    KeyspaceLoads,
    PlannerSettings,
    SliceMap,
    decode_slice_map,
    encode_slice_map,
    key_hash,
    plan_next_map,
)
from workgroup.keyspaces.partial import PartialMap, part_of
from workgroup.keyspaces.report import KeyspaceReport, encode_map_only, encode_report
from workgroup.member.keyspace import KeyspaceConfig, MemberKeyspace
from workgroup.member.load_balancing import BalanceSettings
from workgroup.member.pipeline import LeaderPipeline
from workgroup.member.round_stages import run_round_stages
from workgroup.protocol.catalog import FrozenCatalog
from workgroup.protocol.endpoint import ENDPOINT_TAG
from workgroup.protocol.metadata import BinaryCodec, MemberMetadata
from workgroup.protocol.protocol import Protocol
from workgroup.types import Key


def best_seconds(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def owned(smap: SliceMap, members: int) -> SliceMap:
    slices = tuple(
        dataclasses.replace(piece, owner=f"member-{i % members:03d}")
        for i, piece in enumerate(smap.slices)
    )
    return SliceMap(smap.keyspace, slices, smap.max_token, smap.epoch)


def lookups(keys: int, repeat: int, counts: Sequence[int]) -> Table:
    table = Table(title=f"key -> slice lookups per second ({keys:,} keys, best of {repeat})")
    for column in ("slices", "keys", "lookup/s", "hash only/s", "bisect only/s"):
        table.add_column(column, justify="right")
    kinds: list[tuple[str, Sequence[Key]]] = [
        ("str", [f"user-{n}" for n in range(keys)]),
        ("int", list(range(keys))),
    ]
    for count in counts:
        smap = SliceMap.uniform("bench", count)
        for kind, sample in kinds:
            points = [key_hash(key) for key in sample]
            find, slice_of = smap.slice_for_key, smap.slice_of
            whole = best_seconds(lambda f=find, s=sample: [f(k) for k in s], repeat)
            hashing = best_seconds(lambda s=sample: [key_hash(k) for k in s], repeat)
            bisect = best_seconds(lambda f=slice_of, p=points: [f(x) for x in p], repeat)
            table.add_row(
                f"{count:,}",
                kind,
                f"{keys / whole:,.0f}",
                f"{keys / hashing:,.0f}",
                f"{keys / bisect:,.0f}",
            )
    return table


def described_keyspace(smap: SliceMap) -> GroupSnapshot:
    """A reading of the group whose members own ``smap``'s slices and carry it."""
    carried = encode_map_only(smap)
    owners = smap.owners()
    members = [
        MemberDescription(
            member_id,
            None,
            member_id,
            "127.0.0.1",
            {smap.keyspace: [piece.id for piece in pieces]},
            None,
            5,
            BinaryCodec().encode_metadata(
                MemberMetadata(tags=((ENDPOINT_TAG, f"10.0.0.{i % 250}:8080"),))
            ),
            {},
            carried,
        )
        for i, (member_id, pieces) in enumerate(owners.items())
    ]
    group = f"bench.{smap.keyspace}"
    description = GroupDescription(group, "Stable", "workgroup", "-", 5, None, members)
    maps, _ = newest_maps(description)
    return GroupSnapshot(
        group, description, [], join_owners(description, []), changed=True, keyspaces=maps
    )


def directory(keys: int, repeat: int, counts: Sequence[int]) -> Table:
    table = Table(
        title=f"Directory.owner(keyspace, key) per second ({keys:,} keys, 100 members, "
        f"best of {repeat})"
    )
    for column in ("slices", "keys", "lookup/s", "answered"):
        table.add_column(column, justify="right")
    kinds: list[tuple[str, Sequence[Key]]] = [
        ("str", [f"user-{n}" for n in range(keys)]),
        ("int", list(range(keys))),
    ]
    for count in counts:
        smap = owned(SliceMap.uniform("users", count), 100)
        # Never connects: it answers from the reading it is handed.
        router = Directory("127.0.0.1:1", f"bench.{smap.keyspace}")
        router.take(described_keyspace(smap))
        for kind, sample in kinds:
            owner = router.owner

            def route(s: Sequence[Key] = sample, o: Callable[..., object] = owner) -> list[object]:
                return [o("users", k) for k in s]

            seconds = best_seconds(route, repeat)
            answered = sum(1 for k in sample[:1000] if owner("users", k) is not None)
            table.add_row(f"{count:,}", kind, f"{keys / seconds:,.0f}", f"{answered / 10:.0f}%")
    return table


def encoding(repeat: int) -> Table:
    table = Table(title="slice map encoding (100 owners)")
    for column in ("slices", "bytes", "bytes/slice", "encode ms", "decode ms"):
        table.add_column(column, justify="right")
    for count in (1_000, 10_000, 100_000):
        smap = owned(SliceMap.uniform("bench", count), 100)
        blob = encode_slice_map(smap)
        encode = best_seconds(lambda m=smap: encode_slice_map(m), repeat)
        decode = best_seconds(lambda b=blob: decode_slice_map(b), repeat)
        table.add_row(
            f"{count:,}",
            f"{len(blob):,}",
            f"{len(blob) / count:.1f}",
            f"{encode * 1e3:.1f}",
            f"{decode * 1e3:.1f}",
        )
    return table


def planner(repeat: int) -> Table:
    table = Table(title=f"planner round, 100 members, 10,000 slices (best of {repeat})")
    for column in ("round", "seconds", "slices after", "splits", "merges", "moves", "moved"):
        table.add_column(column, justify="right")
    rng = random.Random(29)
    smap = owned(SliceMap.uniform("bench", 10_000), 100)
    # Zipf-like slice loads, and 20 sampled hot keys.
    slice_loads = {piece.id: 1.0 / (rng.randrange(1, 10_000) ** 0.5) for piece in smap}
    hot = {rng.getrandbits(64): 5.0 * (k + 1) for k in range(20)}
    loads = KeyspaceLoads(slice_loads, hot)
    members = {f"member-{i:03d}": 1.0 for i in range(100)}
    settings = PlannerSettings(min_slices_per_member=100, max_slices_per_member=150)
    scenarios = [
        ("steady", members),
        ("one joins", {**members, "member-100": 1.0}),
        ("one leaves", {m: c for m, c in members.items() if m != "member-042"}),
    ]
    for name, group in scenarios:
        seconds = best_seconds(lambda g=group: plan_next_map(smap, loads, g, settings), repeat)
        plan = plan_next_map(smap, loads, group, settings)
        table.add_row(
            name,
            f"{seconds:.3f}",
            f"{len(plan.map):,}",
            str(plan.splits),
            str(plan.merges),
            str(plan.moves),
            f"{plan.moved:.2%}",
        )
    return table


#: The members the map went to whole in the round before.
CARRIERS = ("member-000", "member-001")


def joined_members(smap: SliceMap | None, members: Sequence[str], seed: int) -> list[JoinedMember]:
    """What each of ``members`` sends in JoinGroup: the slices ``smap`` gives it
    (as held), their loads, the map itself (whole from the carriers, else its
    part), and 8 sampled hot keys."""
    rng = random.Random(seed)
    owners = smap.owners() if smap is not None else {}
    codec = PROTOCOL.codec
    out = []
    for member_id in members:
        pieces = owners.get(member_id, [])
        held: SliceMap | PartialMap | None = smap
        if smap is not None and member_id not in CARRIERS:
            held = part_of(smap, {piece.id for piece in pieces})
        report = KeyspaceReport(held, {rng.getrandbits(64): 5.0 for _ in range(8)})
        meta = MemberMetadata(
            kinds=("users",),
            owned=tuple(("users", piece.id) for piece in pieces),
            owned_generation=4 if pieces else -1,
            loads=tuple(rng.random() for _ in pieces),
            user_data=encode_report(report),
        )
        out.append(JoinedMember(member_id, None, codec.encode_metadata(meta)))
    return out


PROTOCOL = Protocol.of("cooperative-sticky")


def leader_round(joined: list[JoinedMember], config: KeyspaceConfig) -> tuple[float, ...]:
    """One round of a new leader: seconds to read, to plan, to encode; slices, bytes."""
    pipeline = LeaderPipeline(
        "bench",
        reassign_delay_ms=0,
        balance=BalanceSettings(),
        max_warmups=0,
        keyspace=config,
        keyspace_view=MemberKeyspace(config),
    )
    started = time.perf_counter()
    run = pipeline.begin(
        0,
        1,
        PROTOCOL,
        joined,
        generation=5,
        catalog=FrozenCatalog(),
        catalog_hash=b"",
        leader_id=joined[0].member_id,
    )
    read = time.perf_counter()
    result = run_round_stages(run.stages)
    planned = time.perf_counter()
    taken = pipeline.take(run.run_id)
    assert taken is not None
    assert result.keyspace is not None
    blobs = pipeline.finish(0, taken, result)
    encoded = time.perf_counter()
    return (
        read - started,
        planned - read,
        encoded - planned,
        encoded - started,
        float(len(result.keyspace.plan.map)),
        float(max(len(blob) for _, blob in blobs)),
        float(statistics.median(len(blob) for _, blob in blobs)),
        # What a Kafka broker stores as one record (pipeline rule 6).
        float(sum(len(m.metadata) for m in joined) + sum(len(blob) for _, blob in blobs)),
    )


def leader(repeat: int) -> Table:
    table = Table(
        title=f"the leader's whole round, 100 members, 10,000 slices (best of {repeat}; "
        "target <= 1 s)"
    )
    for column in (
        "round",
        "read ms",
        "plan ms",
        "encode ms",
        "round s",
        "slices after",
        "largest assignment",
        "median assignment",
        "group state",
    ):
        table.add_column(column, justify="right")
    config = KeyspaceConfig("users", PlannerSettings())
    names = [f"member-{i:03d}" for i in range(100)]
    smap = owned(SliceMap.uniform("users", 10_000), 100)
    smap = dataclasses.replace(smap, epoch=3)
    scenarios = [
        ("steady", joined_members(smap, names, 29)),
        ("one joins", joined_members(smap, [*names, "member-100"], 29)),
        ("one leaves", joined_members(smap, [n for n in names if n != "member-042"], 29)),
        ("both carriers leave", joined_members(smap, names[2:], 29)),
        ("after a full restart", joined_members(None, names, 29)),
    ]
    for name, joined in scenarios:
        runs = [leader_round(joined, config) for _ in range(repeat)]
        best = min(runs, key=lambda r: r[3])
        table.add_row(
            name,
            f"{best[0] * 1e3:.0f}",
            f"{best[1] * 1e3:.0f}",
            f"{best[2] * 1e3:.0f}",
            f"{best[3]:.3f}",
            f"{best[4]:,.0f}",
            f"{best[5]:,.0f} B",
            f"{best[6]:,.0f} B",
            f"{best[7] / 1e6:.2f} MB",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=["lookups", "directory", "encoding", "planner", "leader"])
    parser.add_argument(
        "--slices",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[100, 10_000, 100_000],
        help="slice counts of the lookup tables (comma-separated)",
    )
    args = parser.parse_args()
    console = Console(width=120)
    if args.only in (None, "lookups"):
        console.print(lookups(args.keys, args.repeat, args.slices))
    if args.only in (None, "directory"):
        console.print(directory(args.keys, args.repeat, args.slices))
    if args.only in (None, "encoding"):
        console.print(encoding(args.repeat))
    if args.only in (None, "planner"):
        console.print(planner(args.repeat))
    if args.only in (None, "leader"):
        console.print(leader(args.repeat))


if __name__ == "__main__":
    main()
