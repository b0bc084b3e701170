"""A single active producer: one process of the group writes ``orders`` at a time.

Every daemon runs the app; the ``writer`` leader runs in one of them.  When it
dies or stops, another takes over where it stopped (the sequence number is the
lease's checkpoint), and a zombie (the old writer, paused past its session,
then resumed) cannot write on:

* on a Kafka cluster with transactions, ``lease.producer()`` is a transactional
  producer whose id is the same for every writer: the new writer's
  InitProducerId bumps the epoch, and the zombie's next transaction fails with
  ``ProducerFenced``;
* on a broker without transactions (Tansu), each record carries the writer's
  lease token, and readers drop records whose token is older than one they have
  already seen (``consume.py``): fencing on the read side.

    export WORKGROUP_BOOTSTRAP=KAFKA:9092   # the daemons' --bootstrap, and the writer's
    workgroup run examples.active_producer.app:app --instance-id w1 &
    workgroup run examples.active_producer.app:app --instance-id w2 &
    python -m examples.active_producer.consume --bootstrap KAFKA:9092
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

import workgroup

TOPIC = os.environ.get("ACTIVE_TOPIC", "orders")
BATCH = 20  # records per transaction
#: One ordered sequence lives in one partition: readers fence by the order of the
#: log, and records spread over several partitions would be read interleaved.
PARTITION = 0
PAUSE_S = float(os.environ.get("ACTIVE_PAUSE_S", "0.1"))

app = workgroup.App("orders-writer", session_timeout_ms=6_000, grace_ms=2_000)


async def open_producer(lease: workgroup.Lease, bootstrap: str) -> tuple[Any, bool]:
    """The lease's transactional producer, or an idempotent one where the broker has
    no transactions (then readers fence by token)."""
    try:
        producer = await lease.producer()
        async with producer.transaction():  # InitProducerId completes here, or fails
            pass
        return producer, True
    except (workgroup.WorkgroupError, KafkaError) as exc:
        print(f"writer: no transactions here ({exc}); fencing by token on read", flush=True)
        # Without transactions there is no InitProducerId either (Tansu): no idempotence;
        # the reader drops the duplicates a retried send may leave.
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        return producer, False


@app.leader("writer")
async def write_orders(lease: workgroup.Lease) -> None:
    bootstrap = os.environ.get("WORKGROUP_BOOTSTRAP", "127.0.0.1:9092")
    sequence = int(await lease.checkpoint() or 0)  # where the previous writer stopped
    print(f"writer: active, token {lease.token}, from sequence {sequence}", flush=True)
    producer, transactional = await open_producer(lease, bootstrap)
    headers = [("token", str(lease.token).encode())]
    try:
        while not lease.revoked:
            records = []
            for _ in range(BATCH):
                sequence += 1
                records.append(json.dumps({"seq": sequence, "token": lease.token}).encode())
            if transactional:
                async with producer.transaction():  # ProducerFenced for a zombie
                    for record in records:
                        await producer.send(TOPIC, record, headers=headers, partition=PARTITION)
            else:
                sent = [
                    await producer.send(TOPIC, record, headers=headers, partition=PARTITION)
                    for record in records
                ]
                await asyncio.gather(*sent)
            await lease.commit(str(sequence))  # refused once the lease is lost
            await asyncio.sleep(PAUSE_S)
    finally:
        if not transactional:
            await producer.stop()  # the lease closes its transactional producer itself
