"""A keyspace's state in its group's slots: read back as committed, bounded in
size, and whatever the slots hold, read without failing, down to what the
offsets prove."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.keyspaces import SliceMap
from workgroup.keyspaces.partial import part_of
from workgroup.runtime import keyspace_slots
from workgroup.runtime.keyspace_slots import (
    MAX_CHUNKS,
    chunk_key,
    encode_persisted,
    epoch_key,
    part_token_key,
    read_persisted,
    token_key,
)
from workgroup.runtime.slots import MAX_METADATA_BYTES, slot_header

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "keyspaces"))
from slice_map_strategies import slice_maps


def committed(smap: SliceMap) -> tuple[tuple[int, str], int, list[str]]:
    """What the slots hold once ``smap`` is committed: the token slot, the epoch
    slot's offset, the chunks' metadata."""
    slots = encode_persisted(smap).slots
    name = smap.keyspace
    count = len(slots) - 2
    return (
        slots[token_key(name)],
        slots[epoch_key(name)][0],
        [slots[chunk_key(name, i)][1] for i in range(count)],
    )


@settings(max_examples=60, deadline=None)
@given(slice_maps())
def test_a_committed_map_reads_back_whole(smap: SliceMap) -> None:
    commit = encode_persisted(smap)
    assert commit.map_kept
    assert len(commit.slots) <= MAX_CHUNKS + 2
    for key, (offset, metadata) in commit.slots.items():
        assert offset >= 0
        assert metadata.startswith(slot_header(key))
        assert len(metadata.encode("utf-8")) <= MAX_METADATA_BYTES
    token, epoch, chunks = committed(smap)
    assert token[0] == smap.max_token
    assert epoch == smap.epoch
    first = read_persisted(smap.keyspace, token, epoch)  # before the chunks are read
    assert first.chunks == len(chunks)
    read = read_persisted(smap.keyspace, token, epoch, chunks)
    assert read.error is None
    assert read.state.map == smap
    assert (read.state.max_token, read.state.epoch) == (smap.max_token, smap.epoch)
    assert read.state.covers(smap)


def test_a_part_of_the_next_map_proves_its_tokens_and_leaves_the_kept_map_alone() -> None:
    """A member handed only its part commits the map's highest token and epoch
    in their own slots; the token slot and the chunks keep the map a carrier
    committed, which a full restart starts from above every token."""
    kept = SliceMap.uniform("users", 6)
    token, _, chunks = committed(kept)
    following = SliceMap("users", kept.slices, max_token=kept.max_token + 4, epoch=kept.epoch + 2)
    commit = encode_persisted(part_of(following, {kept.slices[0].id}))
    assert not commit.map_kept
    assert set(commit.slots) == {part_token_key("users"), epoch_key("users")}
    part_token, _ = commit.slots[part_token_key("users")]
    new_epoch, _ = commit.slots[epoch_key("users")]
    assert (part_token, new_epoch) == (following.max_token, following.epoch)
    read = read_persisted("users", token, new_epoch, chunks, part_token)
    assert read.error is None
    assert read.state.map == kept  # ranges from the carrier's commit
    assert read.state.max_token == following.max_token  # tokens from the part's
    assert read.state.epoch == following.epoch


def test_a_large_map_takes_several_chunks() -> None:
    smap = SliceMap.uniform("users", 20_000)
    token, epoch, chunks = committed(smap)
    assert 1 < len(chunks) <= MAX_CHUNKS
    assert read_persisted("users", token, epoch, chunks).state.map == smap


def test_a_map_too_large_for_its_slots_keeps_its_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyspace_slots, "MAX_CHUNKS", 1)
    smap = SliceMap.uniform("users", 20_000)
    commit = encode_persisted(smap)
    assert not commit.map_kept
    assert set(commit.slots) == {token_key("users"), epoch_key("users")}
    token, epoch, _ = committed(smap)
    read = read_persisted("users", token, epoch)
    assert read.error is None
    assert read.state.map is None
    assert (read.state.max_token, read.state.epoch) == (smap.max_token, smap.epoch)


def test_slots_never_committed_or_without_metadata_prove_what_their_offsets_say() -> None:
    assert read_persisted("users", (-1, None), -1).state.max_token == 0
    # A broker that keeps no commit metadata (Tansu): the offsets alone.
    read = read_persisted("users", (42, None), 3)
    assert read.error is None
    assert (read.state.max_token, read.state.epoch, read.state.map) == (42, 3, None)


def corrupt_cases(smap: SliceMap) -> dict[str, tuple[tuple[int, str | None], list[str | None]]]:
    token, _, chunks = committed(smap)
    header = slot_header(token_key("users"))
    other_epoch = [chunks[0].replace(f"{smap.epoch}:", f"{smap.epoch + 1}:", 1), *chunks[1:]]
    flipped = chunks[0][:-5] + ("A" if chunks[0][-5] != "A" else "B") + chunks[0][-4:]
    return {
        "no header": ((token[0], "garbage"), chunks),
        "another key's slot": ((token[0], slot_header("users") + "v1 epoch=1 chunks=1"), chunks),
        "not the format": ((token[0], header + "v2 epoch=x"), chunks),
        "too many chunks": ((token[0], header + "v1 epoch=1 chunks=999"), chunks),
        "a chunk of another epoch": (token, other_epoch),
        "a chunk flipped": (token, [flipped, *chunks[1:]]),
        "a chunk missing": (token, [None, *chunks[1:]]),
        "a chunk naming another key": (token, [chunks[0].replace("map/0", "map/9"), *chunks[1:]]),
        "a map above the token slot": ((smap.max_token - 1, token[1]), chunks),
    }


@pytest.mark.parametrize(
    "case",
    [
        "no header",
        "another key's slot",
        "not the format",
        "too many chunks",
        "a chunk of another epoch",
        "a chunk flipped",
        "a chunk missing",
        "a chunk naming another key",
        "a map above the token slot",
    ],
)
def test_bad_slots_drop_the_map_with_one_line_and_keep_what_the_offsets_prove(case: str) -> None:
    smap = SliceMap(
        "users", SliceMap.uniform("users", 50, first_token=10).slices, max_token=90, epoch=4
    )
    token, chunks = corrupt_cases(smap)[case]
    read = read_persisted("users", token, 4, chunks)
    assert read.error is not None
    assert "\n" not in read.error
    assert "users" in read.error
    assert read.state.map is None
    assert (read.state.max_token, read.state.epoch) == (token[0], 4)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-1, 2**40),
    st.integers(-1, 2**40),
    st.one_of(st.none(), st.text(max_size=80)),
    st.lists(st.one_of(st.none(), st.text(max_size=80)), max_size=3),
)
def test_whatever_the_slots_hold_reading_never_fails(
    offset: int, epoch: int, metadata: str | None, chunks: list[str | None]
) -> None:
    for token_metadata in (metadata, f"{slot_header(token_key('users'))}{metadata or ''}"):
        read = read_persisted("users", (offset, token_metadata), epoch, chunks)
        assert read.state.max_token == max(offset, 0)
        assert read.state.epoch >= max(epoch, 0)
        assert read.error is None or "\n" not in read.error
        if read.state.map is not None:
            assert read.state.map.max_token <= read.state.max_token
