"""One member of the group ``indexers`` (the README's "A member in Python").

    python examples/member.py [BOOTSTRAP [INSTANCE_ID]]

BOOTSTRAP defaults to ``$WORKGROUP_BOOTSTRAP``, else ``127.0.0.1:9092`` (start a
coordinator there with ``workgroup coordinator``).  INSTANCE_ID defaults to
``$WORKGROUP_INSTANCE_ID``; without one the member is dynamic.  Start several
copies: they share the 12 shards between them.

Ctrl-C or SIGTERM revokes what the member owns, leaves the group and exits 0
(as ``workgroup member``; 130 if Ctrl-C comes before the member started).  A
fatal error (another copy running with the same instance id, say) prints
``error: ...`` and exits 1.
"""

import asyncio
import os
import signal
import sys

from workgroup import Resource, WorkgroupError
from workgroup.log import configure
from workgroup.member import GroupMember
from workgroup.protocol import Protocol


async def start(resources: tuple[Resource, ...], generation: int) -> None:
    # May also be a plain function: it then runs in a worker thread.
    print("now own", sorted(resources), "generation", generation, flush=True)


async def stop(resources: tuple[Resource, ...], generation: int) -> None:
    print("give up", sorted(resources), flush=True)


async def main(bootstrap: str, instance_id: str | None) -> None:
    stopping = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stopping.set)
    async with GroupMember(
        bootstrap,  # the embedded coordinator or any Kafka cluster
        "indexers",
        [Protocol.of("cooperative-sticky")],  # most preferred first
        resources={"shard": range(12)},  # kind -> ordered keys (or a callable source)
        instance_id=instance_id,  # optional: static membership
        on_assigned=start,  # what was added (member.assignment: everything owned)
        on_revoked=stop,  # what is taken away in a rebalance
        on_lost=stop,  # what was lost without a revocation: stop at once
    ) as member:
        await member.wait_stable()
        print("stable: generation", member.generation, "owns", len(member.assignment), flush=True)
        # Work until Ctrl-C or SIGTERM; a fatal error of the member interrupts
        # this and leaves the block with that error.
        await stopping.wait()


if __name__ == "__main__":
    configure("warning")  # workgroup's structured log, on stderr
    arguments = sys.argv[1:]
    bootstrap = arguments[0] if arguments else os.environ.get("WORKGROUP_BOOTSTRAP")
    instance_id = arguments[1] if len(arguments) > 1 else os.environ.get("WORKGROUP_INSTANCE_ID")
    try:
        asyncio.run(main(bootstrap or "127.0.0.1:9092", instance_id or None))
    except WorkgroupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
