"""The raw engines beside ``bench ingest``: async JetStream publishes of a stored event's size,
and batched PostgreSQL inserts of rows shaped like the event store's, from as many clients and
for as long as the HTTP batch phase."""

import argparse
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import nats
import orjson
import psycopg

from memledger_schemas.event_types import EventType

SPACE = "bench"


def fact(i: int, worker: int) -> dict[str, Any]:
    """A fact as the bench writes it (``i``: its number, ``worker``: the client's)."""
    return {"kind": "fact", "content": f"Worker {worker} observed fact number {i}: the build "
            f"cache for service {i % 97} was warm and the deploy took {i % 300} seconds.",
            "tags": ["bench", f"w{worker}"], "importance": 0.5}


async def raw_jetstream(nats_url: str, count: int) -> float:
    """Async publishes per second of ``count`` stored-event-sized messages."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream(publish_async_max_pending=4_000)
    await js.add_stream(name="BENCH_RAW", subjects=["bench.raw.>"])
    payload = stored_event_bytes(0)
    start = time.monotonic()
    for _ in range(count):
        await js.publish_async(f"bench.raw.default.{SPACE}.memory.asserted", payload,
                               headers={"Nats-Msg-Id": str(uuid.uuid4())})
    await js.publish_async_completed()
    elapsed = time.monotonic() - start
    await js.delete_stream("BENCH_RAW")
    await nc.drain()
    return count / elapsed


def stored_event_bytes(i: int) -> bytes:
    """About the size of a stored memory.asserted envelope."""
    envelope = {"event_id": str(uuid.uuid4()), "event_type": EventType.MEMORY_ASSERTED,
                "schema_version": 1, "stream_id": str(uuid.uuid4()), "stream_version": 1,
                "tenant_id": "default", "space_id": SPACE, "actor": "http",
                "payload": {"item_id": str(uuid.uuid4()), **fact(i, 0)}}
    return orjson.dumps(envelope)


_CREATE = ("CREATE TABLE bench_raw (id uuid, version bigint, topic text, state bytea, "
           "position bigserial, recorded_at timestamptz DEFAULT clock_timestamp(), "
           "PRIMARY KEY (id, version))")
_INSERT = ("INSERT INTO bench_raw (id, version, topic, state) SELECT * FROM "
           "unnest(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[])")


def raw_postgres(dsn: str, args: argparse.Namespace) -> float:
    """Rows per second inserted by ``args.batch_clients`` connections at once, each one
    transaction per batch of ``args.batch_size``, for ``args.seconds``: the HTTP batch phase's
    concurrency and duration."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_CREATE)
        conn.execute("CREATE UNIQUE INDEX ON bench_raw (position)")
        conn.execute("CREATE INDEX ON bench_raw (recorded_at)")
        try:
            return _insert_concurrently(dsn, args)
        finally:
            conn.execute("DROP TABLE bench_raw")


def _insert_concurrently(dsn: str, args: argparse.Namespace) -> float:
    payloads = [stored_event_bytes(i) for i in range(args.batch_size)]
    start: list[float] = []
    # Every client connected before the clock starts (the barrier's action runs first).
    ready = threading.Barrier(args.batch_clients, action=lambda: start.append(time.monotonic()))

    def client() -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            ready.wait()
            inserted = 0
            while time.monotonic() < start[0] + args.seconds:
                _insert(conn, payloads)
                inserted += len(payloads)
            return inserted

    with ThreadPoolExecutor(args.batch_clients) as pool:
        inserted = sum(pool.map(lambda _: client(), range(args.batch_clients)))
    return inserted / (time.monotonic() - start[0])


def _insert(conn: psycopg.Connection[Any], payloads: list[bytes]) -> None:
    rows = len(payloads)
    with conn.transaction():
        conn.execute(_INSERT, ([uuid.uuid4() for _ in range(rows)], [1] * rows,
                               [EventType.MEMORY_ASSERTED] * rows, payloads))
