"""``workgroup drain GROUP`` and ``workgroup undrain GROUP``: move a member's
resources away (with warm-ups where the group has them) and keep it idle, or let
it take work again.

The member is named by ``--instance-id`` (the request outlives its restarts) or
``--member-id`` (it ends with the member); GROUP is the group id, as
``describe`` takes it.  The request is stored in the group's companion group
(:mod:`workgroup.runtime.drains`); each daemon reads its own every second.

Rules:

* an unknown member is refused, listing the group's members; ``undrain`` of an
  instance id that left the group still withdraws its request;
* draining the last member that is not drained is refused unless ``--force``:
  its resources would stay idle, owned by nobody;
* an already drained member (or, for ``undrain``, one not drained) is said so,
  exit 0;
* ``--wait`` polls DescribeGroups until the group is stable and the member owns
  and warms up nothing (``undrain``: until it no longer reports draining),
  printing each change; ``--wait-timeout-s`` bounds it (``--request-timeout-s``
  each request; ``--timeout`` and ``--timeout-s`` are their older spellings).

Exit status: 0 done (or nothing to do); 1 no such group, or the coordinator
cannot be reached; 2 bad input; 3 the last member, refused without
``--force``; 4 no such member; 5 ``--wait`` ran out of time (the request
stays); 6 the coordinator's ACL does not allow this principal to drain the group.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from workgroup.admin import GroupDescription, MemberDescription, describe_group
from workgroup.cli.connection import connect, coordinator_options
from workgroup.cli.options import option_with_alias
from workgroup.clock import SYSTEM_CLOCK, Clock, wait_within
from workgroup.errors import WorkgroupError
from workgroup.member.round_plan import DRAINING_TAG
from workgroup.runtime.drains import DrainRequests, DrainTarget, is_drained, targets_of
from workgroup.security import Security

#: How often ``--wait`` describes the group.
POLL_S = 0.5
DEFAULT_WAIT_TIMEOUT_S = 300.0
#: Group states of a rebalance under way: members report a drain only as they
#: rejoin, so the old metadata still says what they were.
REBALANCING = ("PreparingRebalance", "CompletingRebalance")


class LastMemberError(WorkgroupError):
    """Draining the group's last member that takes work, without ``--force``."""

    exit_code = 3


class UnknownMemberError(WorkgroupError):
    """No member of the group has that instance id or member id."""

    exit_code = 4


class DrainTimeoutError(WorkgroupError):
    """``--wait`` ran out of time."""

    exit_code = 5
    retriable = True


@dataclass(frozen=True)
class Progress:
    """Where a member stands, as DescribeGroups shows it."""

    group_state: str
    draining: bool
    owns: int
    warming: int
    #: Whether the wait wants the member draining (drain) or not (undrain);
    #: ``None``: nothing is awaited.
    wanted: bool | None = None

    @property
    def drained(self) -> bool:
        """Stable, draining, owning and warming up nothing."""
        return self.group_state == "Stable" and self.draining and not self.owns and not self.warming

    @property
    def undrained(self) -> bool:
        return self.group_state == "Stable" and not self.draining

    def __str__(self) -> str:
        flag = "member draining" if self.draining else "member not draining"
        if self.wanted is not None and self.draining != self.wanted:
            change = "drain" if self.wanted else "undrain"
            flag = (
                f"the {change} is under way (the member reports it as it rejoins)"
                if self.group_state in REBALANCING
                else f"the member has not seen the {change} request yet"
            )
        return f"group {self.group_state}, {flag}, owns {self.owns}, warming up {self.warming}"


def describe_member(m: MemberDescription) -> str:
    """``instance a (member a-1f3...)`` or ``member m-1``."""
    if m.instance_id:
        return f"instance {m.instance_id} (member {m.member_id})"
    return f"member {m.member_id}"


def find_member(description: GroupDescription, target: DrainTarget) -> MemberDescription:
    """The member ``target`` names; :class:`UnknownMemberError` listing the members."""
    for m in description.members:
        if (target.by == "instance" and m.instance_id == target.id) or (
            target.by == "member" and m.member_id == target.id
        ):
            return m
    listed = ", ".join(describe_member(m) for m in description.members) or "none"
    raise UnknownMemberError(
        f"group {description.group!r} has no member with {target}; its members: {listed}"
    )


def member_targets(m: MemberDescription) -> tuple[DrainTarget, ...]:
    return targets_of(m.instance_id, m.member_id)


def reports_draining(m: MemberDescription) -> bool:
    """The member's metadata carries the draining tag (it has seen a drain)."""
    meta = m.workgroup_metadata()
    return meta is not None and DRAINING_TAG in dict(meta.tags)


def drained_members(
    description: GroupDescription, requests: Mapping[DrainTarget, bool | None]
) -> set[str]:
    """Member ids that are drained: asked to be, or reporting it."""
    return {
        m.member_id
        for m in description.members
        if reports_draining(m) or is_drained({t: requests.get(t) for t in member_targets(m)})
    }


def check_not_last(
    description: GroupDescription,
    member: MemberDescription,
    drained: Iterable[str],
    *,
    force: bool,
) -> None:
    """:class:`LastMemberError` if ``member`` is the last one not drained."""
    others = {m.member_id for m in description.members} - set(drained) - {member.member_id}
    if others or force:
        return
    raise LastMemberError(
        f"{describe_member(member)} is the last member of group {description.group!r} that "
        "is not drained: drained, it would hand its resources to nobody and they would stay "
        "idle until a member joins or is undrained (pass --force to drain it anyway)"
    )


def progress_of(
    description: GroupDescription,
    member_id: str | None,
    *,
    instance_id: str | None = None,
    wanted: bool | None = None,
) -> Progress | None:
    """The progress of the member with ``member_id`` (or, given ``instance_id``,
    of whichever member has that instance id: a restarted one has a new member
    id) towards draining (``wanted``) or not; ``None``: no such member in the group."""
    for m in description.members:
        if (
            (m.instance_id != instance_id)
            if instance_id is not None
            else (m.member_id != member_id)
        ):
            continue
        owns = sum(len(keys) for keys in (m.assignment or {}).values())
        warming = sum(len(keys) for keys in m.warming.values())
        meta = m.workgroup_metadata()
        if meta is not None:
            warming = max(warming, len(meta.warming))
            # What it reported at its last JoinGroup: revoked resources still
            # releasing count until its handlers stopped and it rejoined.
            owns = max(owns, len(meta.owned))
        return Progress(description.state, reports_draining(m), owns, warming, wanted)
    return None


async def wait_for(
    describe: Callable[[], Awaitable[GroupDescription]],
    member_id: str,
    done: Callable[[Progress], bool],
    *,
    timeout_s: float,
    say: Callable[[str], None],
    poll_s: float = POLL_S,
    instance_id: str | None = None,
    wanted: bool | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Progress:
    """Describe until ``done(progress)``; say each change; :class:`DrainTimeoutError`.
    A member named by ``instance_id`` is followed across restarts (absent meanwhile:
    waited for); one named by member id that leaves is :class:`UnknownMemberError`.
    The polls wait, the time said is measured and the timeout runs on ``clock``."""
    last: Progress | None = None
    absent_said = False
    started = clock.monotonic()

    async def poll() -> Progress:
        nonlocal last, absent_said
        while True:
            description = await describe()
            progress = progress_of(description, member_id, instance_id=instance_id, wanted=wanted)
            if progress is None and instance_id is None:
                raise UnknownMemberError(f"member {member_id} left group {description.group!r}")
            if progress is None:
                if not absent_said:
                    say(f"instance {instance_id} is not in the group now: waiting for it")
                    absent_said = True
                await clock.sleep(poll_s)
                continue
            if progress != last:
                say(f"{clock.monotonic() - started:6.1f}s  {progress}")
                last = progress
            if done(progress):
                return progress
            await clock.sleep(poll_s)

    polling = asyncio.ensure_future(poll())
    try:
        finished = await wait_within(clock, polling, timeout_s)
    finally:
        if not polling.done():
            polling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await polling
    if finished:
        try:
            return polling.result()
        except TimeoutError:  # a describe that timed out ends the wait as its timeout does
            pass
    raise DrainTimeoutError(
        f"timed out after {timeout_s:g}s: {last or 'no answer'} (the request stays; "
        "the member goes on draining)"
    )


def target_of(instance_id: str | None, member_id: str | None) -> DrainTarget:
    if (instance_id is None) == (member_id is None):
        raise click.UsageError("name the member with exactly one of --instance-id, --member-id")
    if instance_id is not None:
        return DrainTarget("instance", instance_id)
    assert member_id is not None
    return DrainTarget("member", member_id)


async def drain(
    bootstrap: str,
    group: str,
    target: DrainTarget,
    *,
    security: Security,
    timeout_s: float,
    wait: bool,
    wait_timeout_s: float,
    force: bool,
    say: Callable[[str], None],
) -> None:
    """``workgroup drain`` (see the module docstring)."""
    description = await describe_group(bootstrap, group, security=security, timeout_s=timeout_s)
    member = find_member(description, target)
    requests = DrainRequests(bootstrap, group, security=security, timeout_s=timeout_s)
    try:
        asked = await requests.read(t for m in description.members for t in member_targets(m))
        mine = {t: asked.get(t) for t in member_targets(member)}
        if is_drained(mine) or reports_draining(member):
            say(f"{describe_member(member)} of group {group!r} is already drained")
        else:
            check_not_last(description, member, drained_members(description, asked), force=force)
            await requests.write(target, True)
            say(
                f"asked to drain {describe_member(member)} of group {group!r}: it moves its "
                "resources away (with warm-ups where the group has them) and stays in the group "
                "owning nothing until 'workgroup undrain'"
            )
    finally:
        await requests.close()
    if wait:
        progress = await wait_for(
            lambda: describe_group(bootstrap, group, security=security, timeout_s=timeout_s),
            member.member_id,
            lambda p: p.drained,
            timeout_s=wait_timeout_s,
            say=say,
            instance_id=target.id if target.by == "instance" else None,
            wanted=True,
        )
        say(f"drained: {progress}")


async def undrain(
    bootstrap: str,
    group: str,
    target: DrainTarget,
    *,
    security: Security,
    timeout_s: float,
    wait: bool,
    wait_timeout_s: float,
    say: Callable[[str], None],
) -> None:
    """``workgroup undrain``: withdraw every request naming the member."""
    description = await describe_group(bootstrap, group, security=security, timeout_s=timeout_s)
    try:
        member: MemberDescription | None = find_member(description, target)
    except UnknownMemberError:
        if target.by != "instance":
            raise
        member = None  # a stopped instance: its request outlives it
    targets: Sequence[DrainTarget] = member_targets(member) if member is not None else (target,)
    requests = DrainRequests(bootstrap, group, security=security, timeout_s=timeout_s)
    try:
        asked = await requests.read(targets)
        withdrawn = [t for t, drained in asked.items() if drained]
        if member is None and not withdrawn:
            find_member(description, target)  # raises, listing the members
        for t in withdrawn:
            await requests.write(t, False)
    finally:
        await requests.close()
    who = describe_member(member) if member is not None else str(target)
    if withdrawn:
        say(f"undrained {who} of group {group!r}: it takes work again")
    elif member is not None and reports_draining(member):
        say(
            f"{who} of group {group!r} has no drain request: it drains by itself "
            "(a drain before stopping, or its program's own)"
        )
        return
    else:
        say(f"{who} of group {group!r} is not drained")
    if wait and member is not None:
        await wait_for(
            lambda: describe_group(bootstrap, group, security=security, timeout_s=timeout_s),
            member.member_id,
            lambda p: p.undrained,
            timeout_s=wait_timeout_s,
            say=say,
            instance_id=target.id if target.by == "instance" else None,
            wanted=False,
        )


def _options(command: Callable[..., None]) -> Callable[..., None]:
    for decorate in reversed(
        [
            click.argument("group"),
            click.option("--instance-id", default=None, help="The member's instance id."),
            click.option("--member-id", default=None, help="The member's member id."),
            click.option(
                "--wait", is_flag=True, help="Wait until it is done, printing the progress."
            ),
            option_with_alias(
                "--wait-timeout-s",
                "--timeout",
                "wait_timeout_s",
                default=DEFAULT_WAIT_TIMEOUT_S,
                help_text="How long --wait waits (seconds); then exit 5.",
            ),
            coordinator_options(),
        ]
    ):
        command = decorate(command)
    return command


@click.command("drain")
@_options
@click.option(
    "--force", is_flag=True, help="Drain the last member that is not drained (its work idles)."
)
def command(
    group: str,
    instance_id: str | None,
    member_id: str | None,
    wait: bool,
    wait_timeout_s: float,
    force: bool,
    bootstrap: str,
    config_file: Path | None,
    timeout_s: float,
    log_level: str,
    log_format: str,
) -> None:
    """Move a member's resources away and keep it idle, in the group."""
    target = target_of(instance_id, member_id)
    security = connect(bootstrap, config_file, log_level, log_format)
    asyncio.run(
        drain(
            bootstrap,
            group,
            target,
            security=security,
            timeout_s=timeout_s,
            wait=wait,
            wait_timeout_s=wait_timeout_s,
            force=force,
            say=click.echo,
        )
    )


@click.command("undrain")
@_options
def undrain_command(
    group: str,
    instance_id: str | None,
    member_id: str | None,
    wait: bool,
    wait_timeout_s: float,
    bootstrap: str,
    config_file: Path | None,
    timeout_s: float,
    log_level: str,
    log_format: str,
) -> None:
    """Let a drained member take work again."""
    target = target_of(instance_id, member_id)
    security = connect(bootstrap, config_file, log_level, log_format)
    asyncio.run(
        undrain(
            bootstrap,
            group,
            target,
            security=security,
            timeout_s=timeout_s,
            wait=wait,
            wait_timeout_s=wait_timeout_s,
            say=click.echo,
        )
    )


__all__ = [
    "DrainTimeoutError",
    "LastMemberError",
    "Progress",
    "UnknownMemberError",
    "check_not_last",
    "command",
    "drained_members",
    "find_member",
    "progress_of",
    "undrain_command",
]
