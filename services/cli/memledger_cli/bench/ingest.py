"""``memledger bench ingest``: write throughput, acknowledgement latency, and where the CPU goes.

Measured in one run against a private server: the HTTP batch endpoint (sustained), then single
writes from many concurrent clients (throughput and ack latency), first with the enricher
running (embedding what is written, on the same cores: the headline figures) and then with it
paused (``enricher_paused``); then NATS intake, and beside them the raw engines: async
JetStream publishes of the same payload size, and batched PostgreSQL inserts of the same rows
from as many clients and for as long as the batch phase. For each write phase, the CPU each of
the server's processes used from the phase's start until its backlog was worked off, per
fact acknowledged (``cpu_ms_per_fact_batch``, ``cpu_ms_per_fact_single``), and how many events
were committed meanwhile per fact (``events_per_fact_…``: above 1 while the enricher records
embeddings).

A phase's backlog (the relay, the read models, the enricher's embeddings and their commits,
the vector index's writes and graph building) is worked off before the next phase starts, and
how long that took after its last acknowledgement is reported (``backlog_s_after_…``): one
phase's work is never charged to, nor competes with, the next one's window.
"""

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import nats
import orjson

from memledger_cli.bench import cpu
from memledger_cli.bench.common import (
    Scenario,
    Server,
    Steps,
    measured,
    percentile,
    private_server,
    wait_projected,
    wait_relayed,
)
from memledger_cli.bench.ingest_raw import SPACE, fact, raw_jetstream, raw_postgres
from memledger_cli.bench.settle import pause_enricher, wait_enriched, wait_quiet
from memledger_schemas.subjects import HDR_REPLY_TO, Subjects


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="duration of each sustained phase (default 10)")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--batch-clients", type=int, default=4)
    parser.add_argument("--clients", type=int, default=32, help="concurrent single writers")
    parser.add_argument("--intake-count", type=int, default=20_000)
    parser.add_argument("--raw-count", type=int, default=50_000)


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    with Steps(total=10) as steps, private_server() as server:
        async with aiohttp.ClientSession(server.url) as http:
            steps.step("creating the bench space")
            await _post(http, "/v1/spaces", {"space_id": SPACE})
            await wait_quiet(limit=600)  # start-up (the enricher loading its model) is no phase's
            running = await _write_phases(http, server, args, steps, "enricher running")
            steps.step("pausing the enricher; waiting for the server to go quiet")
            await pause_enricher(server.nats_url)
            await wait_quiet(limit=600)
            paused = await _write_phases(http, server, args, steps, "enricher paused")
        steps.step(f"NATS intake, {args.intake_count} commands")
        intake_rate, intake_failed = await _intake_phase(server.nats_url, args.intake_count)
        steps.step(f"raw JetStream publishes, {args.raw_count}")
        raw_js = await raw_jetstream(server.nats_url, args.raw_count)
        steps.step(f"raw PostgreSQL batched inserts, {args.batch_clients} clients")
        raw_pg = await asyncio.to_thread(raw_postgres, server.postgres_dsn, args)
    return {
        "scenario": "ingest", **running,
        "intake_facts_per_s": round(intake_rate, 1), "intake_failed": intake_failed,
        "raw_jetstream_publish_per_s": round(raw_js, 1),
        "raw_postgres_insert_per_s": round(raw_pg, 1),
        "batch_vs_raw_postgres": round(running["facts_per_s_batch"] / raw_pg, 3),
        "enricher_paused": {**paused, "batch_vs_raw_postgres": round(
            paused["facts_per_s_batch"] / raw_pg, 3)},
        "batch_size": args.batch_size, "batch_clients": args.batch_clients,
        "single_clients": args.clients, "seconds_per_phase": args.seconds,
        "cpus": os.cpu_count(),
    }


async def _write_phases(http: aiohttp.ClientSession, server: Server, args: argparse.Namespace,
                        steps: Steps, label: str) -> dict[str, Any]:
    """The batch phase, then the single-write phase; their figures."""
    steps.step(f"HTTP batch writes for {args.seconds:g}s ({label})")
    (batched, batch_s), batch_cost = await _costed(http, server, lambda: _batch_phase(http, args))
    steps.step(f"single writes, {args.clients} clients, {args.seconds:g}s ({label})")
    (single, single_s, latencies), single_cost = await _costed(
        http, server, lambda: _single_phase(http, args))
    return {
        "facts_per_s_batch": round(batched / batch_s, 1),
        "facts_per_s_single": round(single / single_s, 1),
        "ack_p50_ms": round(percentile(latencies, 50), 2),
        "ack_p99_ms": round(percentile(latencies, 99), 2),
        "relay_catchup_s_after_batch": round(batch_cost.catchup, 2),
        "relay_catchup_s_after_single": round(single_cost.catchup, 2),
        "backlog_s_after_batch": round(batch_cost.backlog, 2),
        "backlog_s_after_single": round(single_cost.backlog, 2),
        "events_per_fact_batch": round(batch_cost.events / max(batched, 1), 3),
        "events_per_fact_single": round(single_cost.events / max(single, 1), 3),
        "cpu_ms_per_fact_batch": cpu.per_fact_ms(batch_cost.seconds, batched),
        "cpu_ms_per_fact_single": cpu.per_fact_ms(single_cost.seconds, single),
    }


T = TypeVar("T")


@dataclass(frozen=True)
class _Cost:
    """What a phase cost, from its start until its backlog was worked off."""

    seconds: dict[str, float]
    """CPU seconds by role."""
    events: int
    """Events committed meanwhile: the phase's, and those others wrote (the enricher's)."""
    catchup: float
    """Seconds from the phase's end until the relay had published everything."""
    backlog: float
    """Seconds from the phase's end until everything it caused was done: the read models had
    everything, the enricher nothing left to embed, and the server was quiet (the vector
    index's writes and graph building done)."""


async def _costed(http: aiohttp.ClientSession, server: Server,
                  phase: Callable[[], Awaitable[T]]) -> tuple[T, _Cost]:
    """The phase's outcome, and what it cost."""
    before, start = cpu.snapshot(server.pid), await _position(http)
    outcome = await phase()
    ended = time.monotonic()
    catchup = await asyncio.to_thread(wait_relayed, server.url)
    await _worked_off(server)
    backlog = time.monotonic() - ended
    seconds = cpu.used(before, cpu.snapshot(server.pid))
    return outcome, _Cost(seconds, await _position(http) - start, catchup, backlog)


async def _worked_off(server: Server) -> None:
    """Until what the phase caused is done: its events projected, the enricher's embeddings
    of them committed and projected, and the server quiet (the vector index's writes and any
    graph building, which follow the embeddings, done)."""
    await asyncio.to_thread(wait_projected, server.url, 600.0)
    await wait_enriched(server.nats_url)
    await asyncio.to_thread(wait_projected, server.url, 600.0)
    await wait_quiet(limit=600)


async def _position(http: aiohttp.ClientSession) -> int:
    async with http.get("/health") as response:
        position: int = (await response.json(loads=orjson.loads))["position"]
        return position


async def _post(http: aiohttp.ClientSession, path: str, body: Any) -> dict[str, Any]:
    async with http.post(path, data=orjson.dumps(body),
                         headers={"content-type": "application/json"}) as response:
        payload: dict[str, Any] = await response.json(loads=orjson.loads)
        if response.status >= 300:
            raise RuntimeError(f"POST {path} -> {response.status}: {payload}")
        return payload


async def _batch_phase(http: aiohttp.ClientSession, args: argparse.Namespace
                       ) -> tuple[int, float]:
    """Facts acknowledged through ``/v1/batch`` while clients sent for ``args.seconds``, and
    the seconds until the last was acknowledged."""
    start = time.monotonic()
    deadline = start + args.seconds
    counts = [0] * args.batch_clients

    async def client(worker: int) -> None:
        while time.monotonic() < deadline:
            commands = [{"command": "assert_memory", "space_id": SPACE,
                         **fact(counts[worker] + i, worker)} for i in range(args.batch_size)]
            await _post(http, "/v1/batch", {"commands": commands})
            counts[worker] += args.batch_size

    await asyncio.gather(*(client(w) for w in range(args.batch_clients)))
    return sum(counts), time.monotonic() - start


async def _single_phase(http: aiohttp.ClientSession, args: argparse.Namespace
                        ) -> tuple[int, float, list[float]]:
    """Single writes acknowledged while clients sent for ``args.seconds``, the seconds until
    the last was, and each one's latency (ms)."""
    start = time.monotonic()
    deadline = start + args.seconds
    latencies: list[float] = []

    async def client(worker: int) -> None:
        i = 0
        while time.monotonic() < deadline:
            sent = time.perf_counter()
            await _post(http, f"/v1/spaces/{SPACE}/memories", fact(i, worker))
            latencies.append((time.perf_counter() - sent) * 1000)
            i += 1

    await asyncio.gather(*(client(w) for w in range(args.clients)))
    return len(latencies), time.monotonic() - start, latencies


async def _intake_phase(nats_url: str, count: int) -> tuple[float, int]:
    """Commands per second committed through NATS intake (a reply holding an error is not
    counted), and how many were refused."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream(publish_async_max_pending=4_000)
    inbox = nc.new_inbox()
    done, replies, failed = asyncio.Event(), 0, 0

    async def on_reply(msg: Any) -> None:
        nonlocal replies, failed
        replies += 1
        failed += "error" in orjson.loads(msg.data)
        if replies == count:
            done.set()

    await nc.subscribe(inbox, cb=on_reply)
    subject = Subjects().intake("default", "assert_memory")
    start = time.monotonic()
    for i in range(count):
        await js.publish_async(subject, orjson.dumps({"space_id": SPACE, **fact(i, 99)}),
                               headers={HDR_REPLY_TO: inbox})
    await js.publish_async_completed()
    await asyncio.wait_for(done.wait(), timeout=300)
    elapsed = time.monotonic() - start
    await nc.drain()
    return (count - failed) / elapsed, failed


SCENARIO = Scenario("ingest", "write throughput, ack latency and CPU per fact by process "
                    "(HTTP, NATS intake; enricher running and paused) beside raw JetStream "
                    "and raw PostgreSQL", add_arguments, measured(_measure))
