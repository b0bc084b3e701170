"""Feed the sharded ETL: JSON event files arriving in every shard's input directory.

Each file appears whole (written aside, then renamed in), as an upstream
system's output would.  Event ids are unique over the whole run, so the output
can be checked for every event exactly once.

    python -m examples.sharded_etl.feed --seconds 60 --rate 2000
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

import click

from examples.sharded_etl import layout

CUSTOMERS = [f"customer-{i:02d}" for i in range(20)]


class Feeder:
    """Writes event files into each shard's input, ``rate`` events a second in total.

    ``skew`` > 0 splits the rate unevenly, as real shards are (a big tenant, a
    hot partition): shard *i* gets a share proportional to ``1 / (i + 1) ** skew``
    (Zipf); 0 splits it evenly.
    """

    def __init__(
        self, data: Path, shards: int, *, rate: int, files_per_s: float = 4.0, skew: float = 0.0
    ) -> None:
        self.data = data
        self.shards = layout.shard_names(shards)
        self.rate = rate
        weights = [1 / (i + 1) ** skew for i in range(len(self.shards))]
        #: Events a second for each shard.
        self.rates = {s: rate * w / sum(weights) for s, w in zip(self.shards, weights, strict=True)}
        self.files_per_s = files_per_s
        self.written = 0
        self.files = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._staging = data / "input" / ".staging"
        self._random = random.Random(int.from_bytes(os.urandom(4), "big"))
        self._next_id = self._resume_id()

    def _resume_id(self) -> int:
        """Continue after the highest id already written (a feeder started again)."""
        marker = self.data / "input" / ".next-id"
        return int(marker.read_text()) if marker.exists() else 0

    def write_round(self) -> int:
        """One file per shard with this round's share of events; returns events written."""
        self._staging.mkdir(parents=True, exist_ok=True)
        written = 0
        for shard in self.shards:
            per_file = max(int(self.rates[shard] / self.files_per_s), 1)
            written += per_file
            lines = []
            for _ in range(per_file):
                lines.append(
                    json.dumps(
                        {
                            "id": self._next_id,
                            "shard": shard,
                            "customer": self._random.choice(CUSTOMERS),
                            "amount_cents": self._random.randint(1, 100_000),
                            "created_at": time.time(),
                        }
                    )
                )
                self._next_id += 1
            name = f"events-{time.time_ns()}.json"
            staged = self._staging / name
            staged.write_text("\n".join(lines) + "\n")
            target = layout.input_dir(self.data, shard)
            target.mkdir(parents=True, exist_ok=True)
            os.rename(staged, target / name)
            self.written += len(lines)
            self.files += 1
        (self.data / "input" / ".next-id").write_text(str(self._next_id))
        return written

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        interval = 1 / self.files_per_s
        next_round = time.monotonic()
        while not self._stop.is_set() and time.monotonic() < deadline:
            self.write_round()
            next_round += interval
            self._stop.wait(max(next_round - time.monotonic(), 0))

    def start(self, seconds: float) -> None:
        self._thread = threading.Thread(target=self.run, args=(seconds,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def run_until_interrupted(feeder: Feeder, seconds: float) -> bool:
    """Feed for ``seconds``; Ctrl-C stops early (every file written is whole). True if so."""
    try:
        feeder.run(seconds)
    except KeyboardInterrupt:
        return True
    return False


@click.command()
@click.option("--seconds", type=float, default=60.0, show_default=True)
@click.option("--rate", type=int, default=2_000, show_default=True, help="Events a second.")
@click.option(
    "--skew",
    type=float,
    default=0.0,
    show_default=True,
    help="Zipf exponent of the shards' shares.",
)
def main(seconds: float, rate: int, skew: float) -> None:
    """Write event files into every shard's input directory."""
    feeder = Feeder(layout.data_dir(), layout.shard_count(), rate=rate, skew=skew)
    interrupted = run_until_interrupted(feeder, seconds)
    click.echo(f"wrote {feeder.written} events in {feeder.files} files")
    if interrupted:
        raise SystemExit(130)


if __name__ == "__main__":
    main()
