"""The reader's slot bookkeeping (:mod:`workgroup.client.reader`), without a coordinator."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workgroup.client.reader import _by_key, _in_key_order
from workgroup.client.slots import LeaseSlot
from workgroup.runtime.slots import encode_key

keys = st.integers(-5, 5) | st.sampled_from(["", "a", "1", "b"])
slots = st.lists(
    st.builds(
        LeaseSlot,
        st.sampled_from(["t1", "t2", "t3"]),
        keys | st.none(),
        st.integers(0, 9),
        st.none(),
    ),
)


@given(slots)
def test_slots_by_key_keep_what_key_order_keeps(fetched: list[LeaseSlot]) -> None:
    """As answered, the slots by key are those the key-ordered list gives: of two
    naming one key (a header naming another key's slot), the later topic's."""
    in_order = sorted(fetched, key=lambda s: (s.key is None, encode_key(s.key or ""), s.topic))
    assert _by_key(fetched) == {s.key: s for s in in_order if s.key is not None}


@given(st.lists(keys, unique_by=lambda k: (type(k), k)))
def test_int_keys_come_first_in_order_then_str_keys(listed: list[int | str]) -> None:
    ordered = _in_key_order(listed)
    ints = [k for k in ordered if isinstance(k, int)]
    assert ordered == [*sorted(ints), *sorted(k for k in ordered if isinstance(k, str))]
    assert sorted(ordered, key=repr) == sorted(listed, key=repr)
