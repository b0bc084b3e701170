"""``workgroup.kafka.java`` against values printed by a JVM (OpenJDK 17).

The expected values come from ``String.hashCode()`` and from iterating a
``new HashMap<String, Integer>()`` that had the keys put into it in order.
"""

from __future__ import annotations

import pytest

from workgroup.kafka.java import java_hashmap_order, java_string_hash

INT_MIN = -(2**31)


@pytest.mark.parametrize(
    ("text", "java_hash"),
    [
        ("", 0),
        ("hello", 99162322),
        ("\u00e9", 233),
        ("polygenelubricants", INT_MIN),  # wraps around to Integer.MIN_VALUE
        ("banana", -1396355227),
        ("hello world", 1794106052),
        ("Aa", 2112),
        ("BB", 2112),
        ("\U0001d11e", 1772394),  # one code point, two UTF-16 code units (D834 DD1E)
        ("\ud800", 55296),  # a lone surrogate is hashed as it is
        ("consumer-1-2b6c", 332885808),
    ],
)
def test_java_string_hash_matches_the_jvm(text: str, java_hash: int) -> None:
    assert java_string_hash(text) == java_hash


def test_java_string_hash_is_a_signed_int() -> None:
    for text in ("polygenelubricants", "banana", "\uffff" * 40):
        assert INT_MIN <= java_string_hash(text) < 2**31


@pytest.mark.parametrize(
    ("inserted", "iterated"),
    [
        (["England", "Germany", "Norway", "USA"], ["USA", "Norway", "England", "Germany"]),
        # A key put twice keeps its first place.
        (["Volvo", "BMW", "Ford", "BMW", "Mazda"], ["Volvo", "Mazda", "Ford", "BMW"]),
        (["y", "x"], ["x", "y"]),
        # "Aa" and "BB" collide (both 2112): insertion order decides.
        (["BB", "Aa"], ["BB", "Aa"]),
        (["Aa", "BB"], ["Aa", "BB"]),
        # "q" (113) and "a" (97) share bucket 1 of a 16-slot table ...
        (["q", "a", "b"], ["q", "a", "b"]),
        # ... but not of the 32-slot table that the 13th key makes.
        ([*"qabcdefghijkl"], [*"abcdefghijkl", "q"]),
    ],
)
def test_java_hashmap_order_matches_the_jvm(inserted: list[str], iterated: list[str]) -> None:
    assert java_hashmap_order(inserted) == iterated


#: ``member-<i>-<hex>`` for i in 0..99, in the order a JVM HashMap iterates them
#: (a 256-slot table; 15 buckets hold two or three keys).
JVM_ORDER_OF_100 = [
    32, 90, 45, 39, 2, 28, 37, 49, 44, 0, 20, 67, 59, 73, 63, 33, 60, 30, 5, 64,
    19, 98, 47, 14, 1, 43, 12, 77, 52, 22, 51, 8, 50, 15, 68, 69, 79, 46, 36, 96,
    85, 74, 10, 7, 66, 88, 57, 93, 48, 9, 11, 26, 3, 87, 94, 27, 72, 31, 62, 70,
    71, 99, 29, 91, 16, 89, 82, 78, 25, 24, 34, 81, 4, 6, 38, 42, 75, 76, 80, 21,
    40, 84, 13, 55, 83, 86, 41, 58, 65, 97, 35, 56, 17, 18, 54, 53, 61, 95, 23, 92,
]  # fmt: skip


def test_java_hashmap_order_of_a_hundred_member_ids() -> None:
    ids = [f"member-{i}-{(i * 2654435761) % 2**32:08x}" for i in range(100)]
    assert java_hashmap_order(ids) == [ids[i] for i in JVM_ORDER_OF_100]


def test_java_hashmap_order_accepts_any_iterable() -> None:
    assert java_hashmap_order(iter(["y", "x"])) == ["x", "y"]
    assert java_hashmap_order([]) == []
