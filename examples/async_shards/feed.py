"""Write event files into the async_shards example's input (``ASYNC_DATA``).

python -m examples.async_shards.feed --seconds 30 --rate 500
"""

from __future__ import annotations

import click

from examples.async_shards.app import DATA, SHARDS
from examples.sharded_etl.feed import Feeder, run_until_interrupted


@click.command()
@click.option("--seconds", type=float, default=30.0, show_default=True)
@click.option("--rate", type=int, default=500, show_default=True, help="Events a second.")
def main(seconds: float, rate: int) -> None:
    """Write event files into every shard's input directory."""
    feeder = Feeder(DATA, SHARDS, rate=rate)
    interrupted = run_until_interrupted(feeder, seconds)
    click.echo(f"wrote {feeder.written} events in {feeder.files} files")
    if interrupted:
        raise SystemExit(130)


if __name__ == "__main__":
    main()
