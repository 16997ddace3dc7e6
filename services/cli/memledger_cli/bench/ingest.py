"""``memledger bench ingest``: write throughput and acknowledgement latency.

Measured in one run against a private server: the HTTP batch endpoint (sustained), single
writes from many concurrent clients (throughput and ack latency), NATS intake, and beside them
the raw engines: async JetStream publishes of the same payload size and batched PostgreSQL
inserts of the same rows.
"""

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

import aiohttp
import nats
import orjson
import psycopg

from memledger_cli.bench import cpu
from memledger_cli.bench.common import (
    Scenario,
    Steps,
    measured,
    percentile,
    private_server,
    wait_projected,
    wait_relayed,
)
from memledger_schemas.subjects import HDR_REPLY_TO, Subjects

SPACE = "bench"


def _fact(i: int, worker: int) -> dict[str, Any]:
    return {"kind": "fact", "content": f"Worker {worker} observed fact number {i}: the build "
            f"cache for service {i % 97} was warm and the deploy took {i % 300} seconds.",
            "tags": ["bench", f"w{worker}"], "importance": 0.5}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="duration of each sustained phase (default 10)")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--batch-clients", type=int, default=4)
    parser.add_argument("--clients", type=int, default=32, help="concurrent single writers")
    parser.add_argument("--intake-count", type=int, default=20_000)
    parser.add_argument("--raw-count", type=int, default=50_000)


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    with Steps(total=7) as steps, private_server() as server:
        steps.step("creating the bench space")
        async with aiohttp.ClientSession(server.url) as http:
            await _post(http, "/v1/spaces", {"space_id": SPACE})
            steps.step(f"HTTP batch writes for {args.seconds:g}s")
            batch_rate = await _batch_phase(http, args)
            # Each phase on its own: the relay publishes the batch phase's backlog first.
            batch_catchup = await asyncio.to_thread(wait_relayed, server.url)
            steps.step(f"single writes, {args.clients} clients, {args.seconds:g}s")
            before = cpu.cpu_seconds(server.pid)
            single_rate, latencies = await _single_phase(http, args)
        steps.step("waiting for the relay to catch up")
        catchup = await asyncio.to_thread(wait_relayed, server.url)
        await asyncio.to_thread(wait_projected, server.url)
        cpu_per_fact = cpu.ms_per_operation(before, cpu.cpu_seconds(server.pid), len(latencies))
        steps.step(f"NATS intake, {args.intake_count} commands")
        intake_rate = await _intake_phase(server.nats_url, args.intake_count)
        steps.step(f"raw JetStream publishes, {args.raw_count}")
        raw_js = await _raw_jetstream(server.nats_url, args.raw_count)
        steps.step("raw PostgreSQL batched inserts")
        raw_pg = await asyncio.to_thread(_raw_postgres, server.postgres_dsn, args)
    return {
        "scenario": "ingest",
        "facts_per_s_batch": round(batch_rate, 1),
        "facts_per_s_single": round(single_rate, 1),
        "ack_p50_ms": round(percentile(latencies, 50), 2),
        "ack_p99_ms": round(percentile(latencies, 99), 2),
        "intake_facts_per_s": round(intake_rate, 1),
        "raw_jetstream_publish_per_s": round(raw_js, 1),
        "raw_postgres_insert_per_s": round(raw_pg, 1),
        "batch_vs_raw_postgres": round(batch_rate / raw_pg, 3),
        "relay_catchup_s_after_batch": round(batch_catchup, 2),
        "relay_catchup_s_after_single": round(catchup, 2),
        "batch_size": args.batch_size, "batch_clients": args.batch_clients,
        "single_clients": args.clients, "seconds_per_phase": args.seconds,
        "cpu_ms_per_fact_single": cpu_per_fact,
        "cpus": os.cpu_count(),
    }


async def _post(http: aiohttp.ClientSession, path: str, body: Any) -> dict[str, Any]:
    async with http.post(path, data=orjson.dumps(body),
                         headers={"content-type": "application/json"}) as response:
        payload: dict[str, Any] = await response.json(loads=orjson.loads)
        if response.status >= 300:
            raise RuntimeError(f"POST {path} -> {response.status}: {payload}")
        return payload


async def _batch_phase(http: aiohttp.ClientSession, args: argparse.Namespace) -> float:
    deadline = time.monotonic() + args.seconds
    counts = [0] * args.batch_clients

    async def client(worker: int) -> None:
        while time.monotonic() < deadline:
            commands = [{"command": "assert_memory", "space_id": SPACE,
                         **_fact(counts[worker] + i, worker)} for i in range(args.batch_size)]
            await _post(http, "/v1/batch", {"commands": commands})
            counts[worker] += args.batch_size

    start = time.monotonic()
    await asyncio.gather(*(client(w) for w in range(args.batch_clients)))
    return sum(counts) / (time.monotonic() - start)


async def _single_phase(http: aiohttp.ClientSession, args: argparse.Namespace
                        ) -> tuple[float, list[float]]:
    deadline = time.monotonic() + args.seconds
    latencies: list[float] = []

    async def client(worker: int) -> None:
        i = 0
        while time.monotonic() < deadline:
            sent = time.perf_counter()
            await _post(http, f"/v1/spaces/{SPACE}/memories", _fact(i, worker))
            latencies.append((time.perf_counter() - sent) * 1000)
            i += 1

    start = time.monotonic()
    await asyncio.gather(*(client(w) for w in range(args.clients)))
    return len(latencies) / (time.monotonic() - start), latencies


async def _intake_phase(nats_url: str, count: int) -> float:
    subjects = Subjects()
    nc = await nats.connect(nats_url)
    js = nc.jetstream(publish_async_max_pending=4_000)
    inbox = nc.new_inbox()
    done, replies = asyncio.Event(), 0

    async def on_reply(_: Any) -> None:
        nonlocal replies
        replies += 1
        if replies == count:
            done.set()

    await nc.subscribe(inbox, cb=on_reply)
    subject = subjects.intake("default", "assert_memory")
    start = time.monotonic()
    for i in range(count):
        await js.publish_async(subject, orjson.dumps({"space_id": SPACE, **_fact(i, 99)}),
                               headers={HDR_REPLY_TO: inbox})
    await js.publish_async_completed()
    await asyncio.wait_for(done.wait(), timeout=300)
    elapsed = time.monotonic() - start
    await nc.drain()
    return count / elapsed


async def _raw_jetstream(nats_url: str, count: int) -> float:
    nc = await nats.connect(nats_url)
    js = nc.jetstream(publish_async_max_pending=4_000)
    await js.add_stream(name="BENCH_RAW", subjects=["bench.raw.>"])
    payload = _stored_event_bytes(0)
    start = time.monotonic()
    for _ in range(count):
        await js.publish_async(f"bench.raw.default.{SPACE}.memory.asserted", payload,
                               headers={"Nats-Msg-Id": str(uuid.uuid4())})
    await js.publish_async_completed()
    elapsed = time.monotonic() - start
    await js.delete_stream("BENCH_RAW")
    await nc.drain()
    return count / elapsed


def _stored_event_bytes(i: int) -> bytes:
    # About the size of a stored memory.asserted envelope.
    envelope = {"event_id": str(uuid.uuid4()), "event_type": "memory.asserted",
                "schema_version": 1, "stream_id": str(uuid.uuid4()), "stream_version": 1,
                "tenant_id": "default", "space_id": SPACE, "actor": "http",
                "payload": {"item_id": str(uuid.uuid4()), **_fact(i, 0)}}
    return orjson.dumps(envelope)


def _raw_postgres(dsn: str, args: argparse.Namespace) -> float:
    """Batched inserts of rows shaped like the event store's, one transaction per batch."""
    rows = args.batch_size
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_raw (id uuid, version bigint, topic text, state bytea, "
                     "position bigserial, recorded_at timestamptz DEFAULT clock_timestamp(), "
                     "PRIMARY KEY (id, version))")
        conn.execute("CREATE UNIQUE INDEX ON bench_raw (position)")
        conn.execute("CREATE INDEX ON bench_raw (recorded_at)")
        payloads = [_stored_event_bytes(i) for i in range(rows)]
        inserted, start = 0, time.monotonic()
        while time.monotonic() - start < max(2.0, args.seconds / 2):
            ids = [uuid.uuid4() for _ in range(rows)]
            with conn.transaction():
                conn.execute("INSERT INTO bench_raw (id, version, topic, state) SELECT * FROM "
                             "unnest(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[])",
                             (ids, [1] * rows, ["memory.asserted"] * rows, payloads))
            inserted += rows
        elapsed = time.monotonic() - start
        conn.execute("DROP TABLE bench_raw")
    return inserted / elapsed


SCENARIO = Scenario("ingest", "write throughput and ack latency (HTTP, NATS intake) beside "
                    "raw JetStream and raw PostgreSQL", add_arguments, measured(_measure))
