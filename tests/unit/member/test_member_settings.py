"""A member's settings are MemberConfig's fields: GroupMember takes each as a
keyword argument, typed by MemberSettings, which must stay equal to the fields."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, get_type_hints

import pytest

from workgroup.errors import ConfigError
from workgroup.member.config import MemberConfig, MemberSettings, member_config
from workgroup.member.driver import GroupMember
from workgroup.member.keyspace import KeyspaceConfig
from workgroup.protocol.protocol import Protocol

#: A value other than the default for each setting (all of them, checked below).
CHANGED: dict[str, Any] = {
    "instance_id": "w1",
    "session_timeout_ms": 12_000,
    "rebalance_timeout_ms": 40_000,
    "heartbeat_interval_ms": 2_000,
    "retry_backoff_ms": 50,
    "retry_backoff_max_ms": 2_000,
    "connect_timeout_ms": 7_000,
    "kinds": ("shard",),
    "rack": "r1",
    "capacity": 2.0,
    "user_data": b"x",
    "tags": {"zone": "a"},
    "reassign_delay_ms": 1_500,
    "session_margin_ms": 900,
    "request_timeout_ms": 4_000,
    "imbalance_tolerance": 0.2,
    "max_moves": 4,
    "balance_interval_ms": 30_000,
    "warm_up": True,
    "max_warmups": 2,
    "keyspace": KeyspaceConfig("users"),
}


def test_member_settings_are_member_configs_fields_with_their_types() -> None:
    hints = get_type_hints(MemberConfig)
    declared = {
        f.name: hints[f.name]
        for f in fields(MemberConfig)
        if f.name not in ("group_id", "protocols")  # GroupMember's positional arguments
    }
    assert get_type_hints(MemberSettings) == declared, (
        "MemberSettings must list MemberConfig's fields (but group_id and protocols) "
        "with the same types"
    )
    assert MemberSettings.__required_keys__ == frozenset()  # every one has a default
    assert sorted(CHANGED) == sorted(declared)


def test_group_member_takes_every_member_setting_as_a_keyword() -> None:
    protocol = Protocol.of("range")
    member = GroupMember("127.0.0.1:9092", "g", [protocol], on_warming=lambda *_: None, **CHANGED)
    defaults = MemberConfig("g", [protocol])
    for name, value in CHANGED.items():
        assert getattr(defaults, name) != value, name
        assert getattr(member.config, name) == value, name
    assert member.config.protocols == (protocol,)


def test_the_config_keeps_copies_of_what_the_caller_may_change() -> None:
    protocol = Protocol.of("range")
    protocols = [protocol]
    tags = {"zone": "a"}
    config = MemberConfig("g", protocols, kinds=(k for k in ["a", "b"]), tags=tags)
    protocols.append(Protocol.of("round-robin"))
    tags["zone"] = "b"
    assert config.protocols == (protocol,)
    assert config.kinds == ("a", "b")
    assert config.tags == {"zone": "a"}


def test_a_misspelt_keyword_names_the_setting_it_resembles() -> None:
    with pytest.raises(
        TypeError,
        match=r"^GroupMember\(\) got an unexpected keyword argument 'sesion_timeout_ms' "
        r"\(did you mean 'session_timeout_ms'\?\)$",
    ):
        GroupMember("127.0.0.1:9092", "g", [Protocol.of("range")], sesion_timeout_ms=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'colour'$"):
        member_config("g", [Protocol.of("range")], {"colour": "blue"}, "GroupMember()")  # type: ignore[typeddict-unknown-key]


def test_a_setting_that_cannot_work_is_still_a_config_error() -> None:
    with pytest.raises(ConfigError, match="capacity must be > 0"):
        GroupMember("127.0.0.1:9092", "g", [Protocol.of("range")], capacity=0)
    with pytest.raises(ConfigError, match=r"heartbeat interval .* must be lower"):
        GroupMember(
            "127.0.0.1:9092",
            "g",
            [Protocol.of("range")],
            session_timeout_ms=1_000,
            heartbeat_interval_ms=1_000,
        )
