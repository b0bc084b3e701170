"""Group-level access control for the embedded coordinator (Kafka's ACLs on GROUP resources).

Sans-I/O apart from :meth:`GroupAcl.load`, which reads one file.  The coordinator
asks :meth:`GroupAcl.allows` before it handles a group request and answers
GROUP_AUTHORIZATION_FAILED when the answer is no.

Rules:

* A principal is Kafka's ``User:<name>``.  The file may write ``alice`` for
  ``User:alice``; ``*`` (or ``User:*``) matches every principal, also among the
  super users.  Without SASL every connection is ``User:ANONYMOUS``.  Other
  principal types (``Group:x``) are an error.
* Operations, and the requests that need them: ``join`` (JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup), ``commit`` (OffsetCommit), ``describe``
  (DescribeGroups, ListGroups, OffsetFetch), ``delete`` (DeleteGroups),
  ``drain`` (``workgroup drain`` and ``undrain``).  In the file ``all`` stands
  for the five.
* Drain requests of group ``G`` are offsets of its companion group
  ``workgroup-drains.G`` (:mod:`workgroup.runtime.drains`).  A request on a
  companion group is decided on ``G``: reading it (``describe``) needs
  ``describe`` on ``G``, so every member of ``G`` reads its requests; anything
  else (committing a request, deleting them) needs ``drain`` on ``G``.
* As in Kafka (where READ, WRITE and DELETE imply DESCRIBE), allowing ``join``,
  ``commit``, ``delete`` or ``drain`` on a group also allows ``describe`` on
  it: a member reads its own checkpoints (OffsetFetch) and a group it may join
  is no secret to it.  A ``deny`` rule for ``describe`` still denies it.
* A group pattern is an exact group name, or a prefix ending in ``*``: ``etl-*``
  matches ``etl-`` and every group starting with it; ``*`` alone matches every
  group.  A ``*`` anywhere else is an error.
* A rule matches a request when its principals, its groups and its operations
  all match.
* The decision, in order (Kafka's AclAuthorizer with
  ``allow.everyone.if.no.acl.found=false``):

  1. a super user is allowed everything;
  2. a matching ``deny`` rule denies, whatever the ``allow`` rules say;
  3. a matching ``allow`` rule allows;
  4. anything else is denied, also when the file has no rules at all.

* The file holds an optional ``super_users`` list and any number of
  ``[[allow]]`` and ``[[deny]]`` tables, each with exactly ``principals``,
  ``groups`` and ``operations``, non-empty lists of strings.  Anything else
  (unknown or missing keys, empty lists, wrong types, invalid TOML, an
  unreadable file) raises :class:`~workgroup.errors.ConfigError` naming the file
  and the rule, numbered from 1 within its table (``deny rule 2``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from workgroup.errors import ConfigError

Operation = Literal["join", "commit", "describe", "delete", "drain"]
#: Operations whose permission includes ``describe`` (Kafka: READ/WRITE/DELETE → DESCRIBE).
_IMPLYING_DESCRIBE: tuple[Operation, ...] = ("describe", "join", "commit", "delete", "drain")
OPERATIONS: tuple[Operation, ...] = ("join", "commit", "describe", "delete", "drain")
#: Starts the name of a group's companion group of drain requests.
DRAIN_GROUP_PREFIX = "workgroup-drains."
#: Starts the name of a group's companion group of current loads.
LOAD_GROUP_PREFIX = "workgroup-loads."
ANONYMOUS = "User:ANONYMOUS"
#: The principal that matches every principal (written ``*`` or ``User:*``).
EVERY_PRINCIPAL = "User:*"

_USER_TYPE = "User"
_OPERATIONS_BY_NAME: dict[str, tuple[Operation, ...]] = {
    **{operation: (operation,) for operation in OPERATIONS},
    "all": OPERATIONS,
}
_TOP_LEVEL_KEYS = ("super_users", "allow", "deny")
_RULE_KEYS = ("principals", "groups", "operations")


def principal_of(user: str) -> str:
    """Kafka's principal of a user name: ``alice`` -> ``User:alice`` (``User:alice`` unchanged)."""
    if user.startswith(_USER_TYPE + ":"):
        return user
    return f"{_USER_TYPE}:{user}"


def drained_group_of(group: str) -> str | None:
    """The group whose drain requests ``group`` holds (``None``: not a companion group)."""
    if group.startswith(DRAIN_GROUP_PREFIX) and len(group) > len(DRAIN_GROUP_PREFIX):
        return group[len(DRAIN_GROUP_PREFIX) :]
    return None


def loaded_group_of(group: str) -> str | None:
    """The group whose current loads ``group`` holds (``None``: not that companion)."""
    if group.startswith(LOAD_GROUP_PREFIX) and len(group) > len(LOAD_GROUP_PREFIX):
        return group[len(LOAD_GROUP_PREFIX) :]
    return None


def _group_matches(pattern: str, group: str) -> bool:
    if pattern.endswith("*"):
        return group.startswith(pattern[:-1])
    return group == pattern


@dataclass(frozen=True, slots=True)
class AclRule:
    """Principals that may (in ``allow``) or may not (in ``deny``) do operations on groups.

    ``principals`` are full principals (``User:alice``, or ``User:*`` for every
    one); ``groups`` are patterns (``orders``, ``etl-*``, ``*``).
    """

    principals: frozenset[str]
    groups: tuple[str, ...]
    operations: frozenset[Operation]

    def matches(self, principal: str, operation: Operation, group: str) -> bool:
        return (
            operation in self.operations
            and (principal in self.principals or EVERY_PRINCIPAL in self.principals)
            and any(_group_matches(pattern, group) for pattern in self.groups)
        )


@dataclass(frozen=True, slots=True)
class GroupAcl:
    """The group ACL of one coordinator: allow and deny rules, and super users."""

    allow: tuple[AclRule, ...]
    deny: tuple[AclRule, ...] = ()
    super_users: frozenset[str] = frozenset()

    def allows(self, principal: str, operation: Operation, group: str) -> bool:
        """Whether ``principal`` (a full ``User:<name>``) may do ``operation`` on ``group``."""
        drained = drained_group_of(group)
        if drained is not None:  # a companion group: decided on its group
            group, operation = drained, ("describe" if operation == "describe" else "drain")
        loaded = loaded_group_of(group)
        if loaded is not None:  # its members' loads: decided as their commits
            group, operation = loaded, ("describe" if operation == "describe" else "commit")
        if principal in self.super_users or EVERY_PRINCIPAL in self.super_users:
            return True
        if any(rule.matches(principal, operation, group) for rule in self.deny):
            return False
        implied_by = _IMPLYING_DESCRIBE if operation == "describe" else (operation,)
        return any(
            rule.matches(principal, allowed, group) for rule in self.allow for allowed in implied_by
        )

    @classmethod
    def load(cls, path: Path) -> GroupAcl:
        """The ACL in the TOML file at ``path``; :class:`ConfigError` if it cannot be used."""
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read the ACL file: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source}: the ACL file is not UTF-8 text: {exc}") from exc
        return cls.parse(text, source=source)

    @classmethod
    def parse(cls, text: str, *, source: str = "<acl>") -> GroupAcl:
        """The ACL in TOML ``text``; ``source`` names it in error messages."""
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
        _reject_unknown_keys(document, _TOP_LEVEL_KEYS, source)
        where = f"{source}: super_users"
        # An empty super_users list is the same as none, unlike an empty rule list,
        # which would be a rule that can never match.
        super_users = _string_list(document.get("super_users", []), where, may_be_empty=True)
        return cls(
            allow=_rules(document, "allow", source),
            deny=_rules(document, "deny", source),
            super_users=frozenset(_principal(written, where) for written in super_users),
        )

    def describe(self) -> str:
        """A one-line summary for a log line, e.g. ``group ACL: 2 allow rules, ...``."""
        return (
            f"group ACL: {_count(len(self.allow), 'allow rule')}, "
            f"{_count(len(self.deny), 'deny rule')}, "
            f"{_count(len(self.super_users), 'super user')}"
        )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _reject_unknown_keys(table: dict[str, object], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown {_keys(unknown)} ({', '.join(known)})")


def _keys(keys: list[str]) -> str:
    noun = "key" if len(keys) == 1 else "keys"
    return f"{noun} {', '.join(repr(key) for key in keys)}"


def _string_list(value: object, where: str, *, may_be_empty: bool = False) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    for number, item in enumerate(value, 1):
        if not isinstance(item, str):
            raise ConfigError(f"{where} must be a list of strings, but item {number} is {item!r}")
    if not value and not may_be_empty:
        raise ConfigError(f"{where} must not be empty (the rule would match nothing)")
    return value


def _rules(document: dict[str, object], table: str, source: str) -> tuple[AclRule, ...]:
    entries = document.get(table, [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ConfigError(f"{source}: {table} must be an array of tables, written [[{table}]]")
    return tuple(
        _rule(entry, f"{source}: {table} rule {number}") for number, entry in enumerate(entries, 1)
    )


def _rule(entry: dict[str, object], where: str) -> AclRule:
    _reject_unknown_keys(entry, _RULE_KEYS, where)
    missing = [key for key in _RULE_KEYS if key not in entry]
    if missing:
        raise ConfigError(f"{where}: missing {_keys(missing)}")
    principals = _string_list(entry["principals"], f"{where}: principals")
    groups = _string_list(entry["groups"], f"{where}: groups")
    operations = _string_list(entry["operations"], f"{where}: operations")
    return AclRule(
        principals=frozenset(_principal(written, where) for written in principals),
        groups=tuple(_group_pattern(pattern, where) for pattern in groups),
        operations=frozenset(
            operation for name in operations for operation in _operations(name, where)
        ),
    )


def _principal(written: str, where: str) -> str:
    if written == "*":
        return EVERY_PRINCIPAL
    principal_type, colon, _ = written.partition(":")
    # Catches typos such as "user:alice", which would otherwise never match.
    if colon and principal_type != _USER_TYPE:
        raise ConfigError(
            f"{where}: principal {written!r} is not a User principal "
            f"(write 'User:{written}' if ':' is part of the user name)"
        )
    principal = principal_of(written)
    if principal == f"{_USER_TYPE}:":
        raise ConfigError(f"{where}: empty principal name")
    return principal


def _group_pattern(pattern: str, where: str) -> str:
    if not pattern:
        raise ConfigError(f"{where}: empty group pattern (write '*' for every group)")
    if "*" in pattern[:-1]:
        raise ConfigError(
            f"{where}: group pattern {pattern!r}: '*' may only end a prefix, as in 'etl-*'"
        )
    return pattern


def _operations(name: str, where: str) -> tuple[Operation, ...]:
    try:
        return _OPERATIONS_BY_NAME[name]
    except KeyError:
        names = ", ".join(_OPERATIONS_BY_NAME)
        raise ConfigError(f"{where}: unknown operation {name!r} ({names})") from None
