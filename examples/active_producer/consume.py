"""Read ``orders`` as a fenced reader would and check it.

Records come in order within the topic's partition.  A record whose lease token
is older than the newest token seen so far is a zombie's and is dropped; a
sequence number seen before is a replay (a writer that died between sending
and committing its checkpoint) and is dropped.  What remains must be
1, 2, 3, ... without a gap.

    python -m examples.active_producer.consume --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field

import click
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from examples.active_producer.app import TOPIC


@dataclass
class Reading:
    accepted: list[int] = field(default_factory=list)
    zombie: int = 0
    replayed: int = 0
    tokens: list[int] = field(default_factory=list)

    @property
    def gaps(self) -> list[int]:
        expected = range(1, (max(self.accepted) if self.accepted else 0) + 1)
        return sorted(set(expected) - set(self.accepted))


def fence(records: list[dict[str, int]]) -> Reading:
    reading = Reading()
    newest = 0
    seen: set[int] = set()
    for record in records:
        if record["token"] < newest:
            reading.zombie += 1
            continue
        if record["token"] > newest:
            newest = record["token"]
            reading.tokens.append(newest)
        if record["seq"] in seen:
            reading.replayed += 1
            continue
        seen.add(record["seq"])
        reading.accepted.append(record["seq"])
    return reading


async def read_all(bootstrap: str, idle_s: float = 2.0) -> list[dict[str, int]]:
    consumer = AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",  # aborted transactions are not read
    )
    records = []
    try:
        await consumer.start()
        while True:
            batch = await consumer.getmany(timeout_ms=int(idle_s * 1000))
            if not batch:
                return records
            for messages in batch.values():
                records.extend(json.loads(m.value) for m in messages)
    finally:
        await consumer.stop()


@click.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
def main(bootstrap: str) -> None:
    """Read the topic with token fencing and report."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # its errors are reported below
    try:
        reading = fence(asyncio.run(read_all(bootstrap)))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except KafkaError as exc:
        raise click.ClickException(f"cannot read {TOPIC!r} from {bootstrap}: {exc}") from None
    click.echo(
        f"{len(reading.accepted)} records accepted from writers with tokens {reading.tokens}; "
        f"{reading.zombie} zombie records and {reading.replayed} replays dropped; "
        f"gaps: {reading.gaps or 'none'}"
    )
    raise SystemExit(1 if reading.gaps else 0)


if __name__ == "__main__":
    main()
