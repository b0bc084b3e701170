"""Hypothesis strategies for slice maps (shared by the keyspace tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from workgroup.keyspaces import HASH_SPACE, Slice, SliceMap

MEMBER_NAMES = [f"m{i}" for i in range(6)]


@st.composite
def slice_maps(draw: st.DrawFn, max_slices: int = 40) -> SliceMap:
    """Valid maps: random cuts (some one point wide), ids, tokens and owners."""
    cuts = draw(
        st.lists(
            st.one_of(
                st.integers(1, HASH_SPACE - 1),
                st.sampled_from([1, 2, HASH_SPACE // 2, HASH_SPACE // 2 + 1, HASH_SPACE - 1]),
            ),
            max_size=max_slices - 1,
            unique=True,
        )
    )
    bounds = [0, *sorted(cuts), HASH_SPACE]
    count = len(bounds) - 1
    ids = draw(st.lists(st.integers(1, 10**6), min_size=count, max_size=count, unique=True))
    # A slice's id is the token it was born with: its token is that or above.
    tokens = [i + draw(st.integers(0, 1000)) for i in ids]
    owners = draw(
        st.lists(st.none() | st.sampled_from(MEMBER_NAMES), min_size=len(ids), max_size=len(ids))
    )
    # Pool slots: none (a map from before slots), or distinct ones, and a few
    # retired slots of slices merged away.
    pool = draw(
        st.none()
        | st.lists(
            st.integers(0, 3 * count + 3), min_size=count + 3, max_size=count + 3, unique=True
        )
    )
    slots: list[int | None] = [None] * count if pool is None else list(pool[:count])
    retired: tuple[tuple[int, int], ...] = ()
    if pool is not None:
        gone = draw(st.lists(st.integers(1, 10**6).filter(lambda i: i not in ids), max_size=3))
        retired = tuple(sorted(zip(pool[count:], gone, strict=False)))
    slices = tuple(
        Slice(ids[i], bounds[i], bounds[i + 1], tokens[i], owners[i], slots[i])
        for i in range(len(ids))
    )
    extra = draw(st.integers(0, 1000))
    return SliceMap(
        draw(st.text(min_size=1, max_size=10)),
        slices,
        max_token=max(tokens) + extra,
        epoch=draw(st.integers(0, 2**40)),
        retired=retired,
    )
