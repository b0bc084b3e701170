"""Load for the keyspace mode: Zipf(1.1) requests over a million users, the hot spot moving.

    python -m examples.sharded_service.load --seconds 60 --move-every-s 20

Key ranks follow Zipf(``--exponent``) over ``--keys`` users; rank ``r`` is the
user ``user-<(r + offset) % keys>``, and every ``--move-every-s`` the offset
jumps, so the hottest users become others (a trending topic, a viral post).
Each request is routed to its key's owner with :class:`~.users.Router`; every
second the generator prints the share of requests each process answered
(busiest / mean, ideally near 1.0 once the leader has re-balanced), the 421s
and the slice count.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sys
import time
from collections import Counter

import aiohttp

import workgroup
from examples.sharded_service.users import GROUP, KEYSPACE, Router
from workgroup.errors import ConfigError


class ZipfKeys:
    """Keys drawn with Zipf(``exponent``) over ``count`` users, the hottest at ``offset``."""

    def __init__(self, count: int, exponent: float, seed: int = 1) -> None:
        if count < 1 or exponent <= 0:
            raise ConfigError(f"Zipf needs count >= 1 and exponent > 0, not {count}, {exponent}")
        self.count = count
        self.cumulative = list(itertools.accumulate(r**-exponent for r in range(1, count + 1)))
        self.random = random.Random(seed)
        self.offset = 0

    def move(self) -> None:
        """Move the hot spot: the hottest ranks land on other users."""
        self.offset = self.random.randrange(self.count)

    def ranks(self, n: int) -> list[int]:
        """``n`` ranks (0 the hottest)."""
        population = range(self.count)
        return self.random.choices(population, cum_weights=self.cumulative, k=n)

    def user(self, rank: int) -> str:
        return f"user-{(rank + self.offset) % self.count}"

    def keys(self, n: int) -> list[int]:
        """``n`` keys drawn (int keys, the hottest at ``offset``)."""
        return [(rank + self.offset) % self.count for rank in self.ranks(n)]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--exponent", type=float, default=1.1)
    parser.add_argument("--rate", type=int, default=500, help="requests per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--move-every-s", type=float, default=20.0)
    args = parser.parse_args()
    keys = ZipfKeys(args.keys, args.exponent)
    async with (
        workgroup.Directory(args.bootstrap, GROUP, refresh_ms=500) as directory,
        aiohttp.ClientSession() as session,
    ):
        router = Router(directory, session)
        started = time.monotonic()
        moved_at = started
        while (now := time.monotonic()) - started < args.seconds:
            if now - moved_at >= args.move_every_s:
                keys.move()
                moved_at = now
                print(f"hot spot moved: rank 0 is now {keys.user(0)}", flush=True)
            refused_before = router.misdirected
            replies = await asyncio.gather(
                *(router.get(keys.user(rank)) for rank in keys.ranks(args.rate))
            )
            served = Counter(str(reply["served_by"]) for reply in replies)
            mean = sum(served.values()) / max(len(served), 1)
            smap = directory.keyspaces().get(KEYSPACE)
            print(
                f"{now - started:6.1f}s  busiest/mean {max(served.values()) / mean:5.2f}  "
                f"421s {router.misdirected - refused_before:4d}  "
                f"slices {len(smap) if smap else 0:4d}  "
                + "  ".join(f"{name} {n}" for name, n in sorted(served.items())),
                flush=True,
            )
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - now)))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except workgroup.WorkgroupError as exc:  # one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
