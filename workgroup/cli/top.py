"""``workgroup top GROUP``: a live view of a group (members, what each owns and
the load it reports now, generation, warm-ups and draining or leaving members: ``describe``'s table)
and the changes seen while watching (rebalances, members that join, leave,
start or stop draining, warm-ups that start or end), and the warm-ups under
way with how long each has been warming.  Ctrl-C ends it.

On a terminal the view is redrawn in place.  When stdout is not a terminal (a
pipe, a file, a service's journal) it is written as lines instead, only what
changed since the last poll (:class:`PipedView`): the changes seen, one line
each; the group's table again when the group or its loads differ; an error
once, however many polls meet it in a row.

``--once`` prints one view and exits: 0, or 1 when the group could not be
described (the error is in the view), as ``describe`` does.  The times it
shows and the wait between polls are read from its :class:`~workgroup.clock.Clock`
(``Watch.clock``)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console, RenderableType
from rich.console import Group as Stack
from rich.live import Live
from rich.table import Table
from rich.text import Text

from workgroup.admin import GroupDescription, describe_group
from workgroup.cli.connection import connect, coordinator_options
from workgroup.cli.describe import loads_of, render
from workgroup.cli.options import console
from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.errors import WorkgroupError
from workgroup.member.errors import NothingAnswersError
from workgroup.security import Security

#: Rebalances kept in the view.
HISTORY = 8


@dataclass
class Watch:
    """What ``top`` saw so far: the last description and the changes."""

    last: GroupDescription | None = None
    error: str | None = None
    changes: list[tuple[float, str]] = field(default_factory=list)
    #: How many changes were seen in all (``changes`` keeps the last ``HISTORY``).
    changes_seen: int = 0
    #: ``(member, kind, key) -> when this view first saw it warming up``.
    warming_since: dict[tuple[str, str, str], float] = field(default_factory=dict)
    #: When this view started: warm-ups seen in its first poll began earlier.
    started: float | None = None
    #: The members' current loads (:func:`~workgroup.admin.read_current_loads`).
    loads: Mapping[str, float] = field(default_factory=dict)
    #: Stamps what is seen (its wall time) and times the polls.
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False, compare=False)

    def observe(
        self,
        description: GroupDescription | None,
        error: str | None,
        at: float,
        loads: Mapping[str, float] | None = None,
    ) -> None:
        before = self.last
        if loads is not None:
            self.loads = loads
        if self.started is None:
            self.started = at
        if description is not None:
            if before is not None:
                change = _difference(before, description)
                if change:
                    self.changes = [*self.changes, (at, change)][-HISTORY:]
                    self.changes_seen += 1
            self.last = description
            warming = {
                (m.instance_id or m.member_id, kind, str(key))
                for m in description.members
                for kind, keys in m.warming.items()
                for key in keys
            }
            self.warming_since = {
                w: self.warming_since.get(w, at) for w in sorted(warming, key=repr)
            }
        self.error = error

    def warmups(self, now: float) -> Table | None:
        """The warm-ups under way and how long this view has seen each (``≥``: since
        the view started, they began earlier); ``None`` when there are none."""
        if not self.warming_since or self.last is None:
            return None
        ready = {
            (m.instance_id or m.member_id, kind, str(key))
            for m in self.last.members
            for kind, keys in m.ready.items()
            for key in keys
        }
        table = Table("member", "resource", "warming for", "ready", title="warm-ups",
                      title_justify="left")  # fmt: skip
        for (member, kind, key), since in self.warming_since.items():
            at_least = "≥ " if since == self.started else ""
            table.add_row(
                member,
                f"{kind}/{key}",
                f"{at_least}{max(now - since, 0.0):.1f} s",
                "✓" if (member, kind, key) in ready else "-",
            )
        return table

    def view(self, *, history: bool = True, now: float | None = None) -> Stack:
        """The group's table and, unless ``history=False`` (one poll: ``--once``),
        the warm-ups under way (for how long) and the changes seen while watching."""
        parts: list[Table | Text] = []
        if self.last is not None:
            parts.append(render(self.last, self.loads))
        if self.error:
            parts.append(Text(f"error: {self.error}", style="red"))
        if not history:
            return Stack(*parts)
        warmups = self.warmups(self.clock.wall() if now is None else now)
        if warmups is not None:
            parts.append(warmups)
        if not self.changes:
            parts.append(Text("no rebalances yet (since this view started)"))
            return Stack(*parts)
        table = Table("time", "change", title="recent rebalances", title_justify="left")
        for at, change in self.changes:
            table.add_row(_stamp(at), change)
        parts.append(table)
        return Stack(*parts)


def _stamp(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


@dataclass
class PipedView:
    """What ``top`` writes when stdout is not a terminal, where rich's ``Live``
    draws nothing until it stops: after each poll, only what is new, so a journal
    or a pipe reads as a log of the group rather than the same view every second."""

    #: The changes of the watch already written (:attr:`Watch.changes_seen`).
    changes_written: int = 0
    #: What was written last: ``("error", message)`` or ``("group", description, loads)``.
    shown: tuple[object, ...] | None = None

    def update(self, watch: Watch, now: float) -> list[RenderableType]:
        """What to write after ``watch``'s latest poll (nothing when nothing changed)."""
        parts: list[RenderableType] = []
        new = min(watch.changes_seen - self.changes_written, len(watch.changes))
        for at, change in watch.changes[len(watch.changes) - new :]:
            parts.append(Text(f"{_stamp(at)} {change}"))
        self.changes_written = watch.changes_seen
        if watch.error is not None:
            if self.shown != ("error", watch.error):
                self.shown = ("error", watch.error)
                parts.append(Text(f"{_stamp(now)} error: {watch.error}"))
        elif watch.last is not None:
            group = ("group", watch.last, dict(watch.loads))
            if self.shown != group:
                self.shown = group
                parts += [Text(_stamp(now)), render(watch.last, watch.loads)]
                warmups = watch.warmups(now)
                if warmups is not None:
                    parts.append(warmups)
        return parts


async def watch_live(
    group: str, bootstrap: str, security: Security, watch: Watch, interval: float, out: Console
) -> None:
    """Poll ``group`` every ``interval`` seconds until cancelled: a view redrawn in
    place on a terminal, :class:`PipedView`'s lines anywhere else."""
    if out.is_terminal:
        with Live(watch.view(), console=out, refresh_per_second=4, screen=False) as live:
            while True:
                await _poll(group, bootstrap, security, watch)
                live.update(watch.view())
                await watch.clock.sleep(interval)
    piped = PipedView()
    while True:
        await _poll(group, bootstrap, security, watch)
        for part in piped.update(watch, watch.clock.wall()):
            out.print(part)
        out.file.flush()
        await watch.clock.sleep(interval)


def _difference(before: GroupDescription, after: GroupDescription) -> str:
    notes = []
    if before.generation != after.generation:
        notes.append(f"generation {before.generation} -> {after.generation}")
    if before.state != after.state:
        notes.append(f"{before.state} -> {after.state}")
    old = {m.member_id for m in before.members}
    new = {m.member_id for m in after.members}
    if new - old:
        notes.append(f"joined {', '.join(sorted(new - old))}")
    if old - new:
        notes.append(f"left {', '.join(sorted(old - new))}")
    was = {m.member_id: m for m in before.members}
    for m in after.members:
        prior = was.get(m.member_id)
        if prior is None:
            continue
        if m.status != prior.status and m.status in ("draining", "leaving"):
            notes.append(f"{m.member_id} {m.status}")
        elif prior.status == "draining" and m.status != "draining":
            notes.append(f"{m.member_id} undrained")
        warming = sum(len(keys) for keys in m.warming.values())
        warmed = sum(len(keys) for keys in prior.warming.values())
        if warming != warmed:
            notes.append(f"{m.member_id} warming {warmed} -> {warming}")
    return "; ".join(notes)


async def _poll(
    group: str, bootstrap: str, security: Security, watch: Watch, *, fail_unreachable: bool = False
) -> None:
    """One look at ``group``; ``fail_unreachable``: a closed address is the command's
    error (as for every command) instead of a line of the view."""
    try:
        description = await describe_group(bootstrap, group, security=security, timeout_s=5)
    except WorkgroupError as exc:
        if fail_unreachable and isinstance(exc, NothingAnswersError):
            raise
        watch.observe(None, str(exc), watch.clock.wall())
    else:
        loads = await loads_of(bootstrap, description, security, 5)
        watch.observe(description, None, watch.clock.wall(), loads)


@click.command("top")
@click.argument("group")
@coordinator_options(timeout=False)
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds per poll.")
@click.option("--once", is_flag=True, help="Print one view and exit.")
def command(
    group: str,
    bootstrap: str,
    config_file: Path | None,
    interval: float,
    once: bool,
    log_level: str,
    log_format: str,
) -> None:
    """Watch GROUP live: members, ownership, rebalances."""
    security = connect(bootstrap, config_file, log_level, log_format)
    watch = Watch()
    if once:
        asyncio.run(_poll(group, bootstrap, security, watch, fail_unreachable=True))
        console().print(watch.view(history=False))
        if watch.last is None:
            sys.exit(1)  # nothing to show: as describe, exit 1
        return

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(watch_live(group, bootstrap, security, watch, interval, console()))
