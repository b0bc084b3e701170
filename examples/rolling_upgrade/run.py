"""A metadata v1 -> v2 upgrade in a running group, one process at a time.

Three ``workgroup member`` processes share 12 shards with protocol
``cooperative-sticky`` at version 1.  The upgrade is two rolling restarts, as
for any client-side protocol change:

1. each member in turn restarts advertising ``[v2, v1]`` (release 2): the
   coordinator picks the protocol every member supports, so the group stays on
   v1 until the last member has v2, then moves to v2;
2. each member in turn restarts advertising only ``[v2]`` (release 3): v1 is gone.

Members are static (``--instance-id``), so a restart within the session timeout
moves no shard.  After each restart this prints the protocol the group chose, as
every member reported it, and exits 1 if the group ever picks a protocol a
member does not speak or ends anywhere but v2::

    python -m examples.rolling_upgrade.run
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workgroup.testing import run_coordinator
from workgroup.testing.signals import interrupt_on_termination

RELEASES = {
    1: ("cooperative-sticky:1",),
    2: ("cooperative-sticky:2", "cooperative-sticky:1"),
    3: ("cooperative-sticky:2",),
}
MEMBERS = ("a", "b", "c")


@dataclass
class Member:
    name: str
    release: int
    process: subprocess.Popen[str]
    events: list[dict[str, object]] = field(default_factory=list)

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def protocol(self) -> str | None:
        """The protocol of the member's last completed rebalance."""
        stable = [e for e in self.events if e.get("event") == "stable"]
        return str(stable[-1].get("protocol")) if stable else None


def start(bootstrap: str, name: str, release: int) -> Member:
    argv = [
        sys.executable, "-m", "workgroup", "member", "--bootstrap", bootstrap,
        "--group", "upgrade-demo", "--resources", "shard=12", "--instance-id", name,
        "--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500",
    ]  # fmt: skip
    for protocol in RELEASES[release]:
        argv += ["--protocol", protocol]
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    member = Member(name, release, process)
    threading.Thread(target=member.read, daemon=True).start()
    return member


def settle(members: Sequence[Member], timeout_s: float = 30.0) -> str:
    """Wait until every member reports the same protocol; return it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        chosen = {m.protocol() for m in members}
        if len(chosen) == 1 and None not in chosen:
            time.sleep(1.0)  # and stays so
            if {m.protocol() for m in members} == chosen:
                return str(chosen.pop())
        time.sleep(0.1)
    raise TimeoutError(f"members did not agree: { {m.name: m.protocol() for m in members} }")


def spoken(release: int) -> set[str]:
    return {p.replace(":", ".v") for p in RELEASES[release]}


def main() -> int:
    work = Path("demo-output/rolling-upgrade")
    work.mkdir(parents=True, exist_ok=True)
    with run_coordinator(log=work / "coordinator.log") as coordinator:
        members = {n: start(coordinator.bootstrap, n, 1) for n in MEMBERS}
        try:
            chosen = settle(list(members.values()))
            print(f"all on release 1: the group speaks {chosen}")
            for release in (2, 3):
                for name in MEMBERS:
                    members[name].process.terminate()
                    members[name].process.wait(20)
                    members[name] = start(coordinator.bootstrap, name, release)
                    chosen = settle(list(members.values()))
                    releases = ", ".join(f"{m.name}={m.release}" for m in members.values())
                    print(f"{name} on release {release} ({releases}): the group speaks {chosen}")
                    for member in members.values():
                        if chosen not in spoken(member.release):
                            print(f"error: {member.name} does not speak {chosen}")
                            return 1
            if chosen != "cooperative-sticky.v2":
                print(f"error: the upgrade ended on {chosen}")
                return 1
            print("upgraded: every member on release 3, the group on cooperative-sticky.v2")
            return 0
        finally:
            for member in members.values():
                member.process.terminate()
            for member in members.values():
                member.process.wait(20)


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        try:
            sys.exit(main())
        except KeyboardInterrupt:  # the members were stopped on the way out
            sys.exit(130)
