"""``memledger bench soak --minutes N``: a sustained mixed load against a private server, to show
that throughput, latency and memory stay flat over time.

Four operations, each at its own rate (open loop: started on a schedule, not after the previous
one answers, with at most ``--max-in-flight`` of each kind outstanding; a start skipped for that
reason is counted): writes (one memory each), searches (``POST /v1/search``), as-of reads of an
earlier write (``GET`` the item with ``as_of_position`` = its position) and one follower per space
paging the changes feed. Reported per operation, overall and per minute: count, errors, skipped,
throughput, p50 and p99 latency; and the resident memory of every process of the server at the
start and the end, with its slope (``soak_memory``).
"""

import argparse
import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from memledger_cli.bench.common import Scenario, Steps, measured, percentile, private_server
from memledger_cli.bench.soak_memory import MemoryTrace

SPACES = ("soak-a", "soak-b", "soak-c", "soak-d")
OPERATIONS = ("write", "search", "as_of_read", "changes_page")
MEMORY_EVERY_SECONDS = 10.0
MEMORY_NOTE = ("RSS in MB per role; postgres sums the postmaster and its backends, so shared "
               "buffers count once per backend that touched them (it grows until they are warm)")
_WORDS = ("invoice", "deploy", "cache", "latency", "budget", "meeting", "router", "tenant",
          "billing", "schedule", "ticket", "release", "backup", "replica", "index", "quota",
          "refund", "vendor", "laptop", "badge", "printer", "network", "coffee", "onboarding",
          "contract", "renewal", "audit", "alert", "pager", "rotation", "holiday")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (default 10)")
    parser.add_argument("--write-rate", type=float, default=20.0, help="writes/s (default 20)")
    parser.add_argument("--search-rate", type=float, default=5.0, help="searches/s (default 5)")
    parser.add_argument("--read-rate", type=float, default=10.0,
                        help="as-of reads/s (default 10)")
    parser.add_argument("--changes-rate", type=float, default=4.0,
                        help="changes-feed pages/s, over all followers (default 4)")
    parser.add_argument("--max-in-flight", type=int, default=32,
                        help="per operation; a start beyond it is skipped and counted")
    parser.add_argument("--warmup", type=float, default=20.0,
                        help="seconds of the same load before measuring (default 20)")
    parser.add_argument("--embedder", default="local", choices=("local", "hashing"),
                        help="the server's embedding model (default: local, as deployed)")


@dataclass
class Samples:
    """Latencies (ms) by operation and minute, errors and skipped starts."""

    latencies: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    errors: dict[tuple[str, int], int] = field(default_factory=dict)
    skipped: dict[tuple[str, int], int] = field(default_factory=dict)
    first_errors: list[str] = field(default_factory=list)

    def add(self, op: str, minute: int, ms: float) -> None:
        self.latencies.setdefault((op, minute), []).append(ms)

    def fail(self, op: str, minute: int, what: str) -> None:
        self.errors[(op, minute)] = self.errors.get((op, minute), 0) + 1
        if len(self.first_errors) < 5:
            self.first_errors.append(f"{op}: {what}"[:300])

    def skip(self, op: str, minute: int) -> None:
        self.skipped[(op, minute)] = self.skipped.get((op, minute), 0) + 1


@dataclass
class Soak:
    http: aiohttp.ClientSession
    started: float
    samples: Samples = field(default_factory=Samples)
    written: list[tuple[str, str, int]] = field(default_factory=list)
    """(space, item_id, position) of every acknowledged write."""
    cursors: dict[str, str] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(7))

    def minute(self) -> int:
        return int((time.monotonic() - self.started) // 60)

    async def timed(self, op: str, call: Callable[[], Awaitable[tuple[int, bytes]]]) -> None:
        minute, sent = self.minute(), time.perf_counter()
        try:
            status, body = await call()
        except (aiohttp.ClientError, TimeoutError) as error:
            self.samples.fail(op, minute, repr(error))
            return
        if status >= 400:
            self.samples.fail(op, minute, f"{status} {body[:200]!r}")
            return
        self.samples.add(op, minute, (time.perf_counter() - sent) * 1000)

    async def request(self, method: str, path: str, body: Any = None,
                      params: dict[str, str] | None = None) -> tuple[int, bytes]:
        data = None if body is None else orjson.dumps(body)
        async with self.http.request(method, path, data=data, params=params, headers={
                "content-type": "application/json"}) as response:
            return response.status, await response.read()

    # --- the four operations -------------------------------------------------------------

    async def write(self) -> None:
        space = self.rng.choice(SPACES)
        content = f"{self._words(6)} (soak write {len(self.written)})"

        async def call() -> tuple[int, bytes]:
            status, body = await self.request("POST", f"/v1/spaces/{space}/memories",
                                              {"kind": "fact", "content": content})
            if status < 300:
                answer = orjson.loads(body)
                self.written.append((space, answer["ids"]["item_id"], answer["position"]))
            return status, body

        await self.timed("write", call)

    async def search(self) -> None:
        query = {"query": self._words(3), "spaces": [self.rng.choice(SPACES)], "k": 10}
        await self.timed("search", lambda: self.request("POST", "/v1/search", query))

    async def as_of_read(self) -> None:
        if not self.written:
            return
        space, item, position = self.rng.choice(self.written)
        await self.timed("as_of_read", lambda: self.request(
            "GET", f"/v1/spaces/{space}/items/{item}",
            params={"as_of_position": str(position)}))

    async def changes_page(self) -> None:
        space = self.rng.choice(SPACES)

        async def call() -> tuple[int, bytes]:
            params = {"limit": "100"}
            if space in self.cursors:
                params["after"] = self.cursors[space]
            status, body = await self.request("GET", f"/v1/spaces/{space}/changes",
                                              params=params)
            if status < 300 and (cursor := orjson.loads(body).get("next_cursor")):
                self.cursors[space] = cursor
            return status, body

        await self.timed("changes_page", call)

    def _words(self, n: int) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(n))


async def _schedule(soak: Soak, op: str, rate: float, until: float, limit: int) -> None:
    """Start ``op`` every 1/``rate`` s until ``until``, at most ``limit`` outstanding."""
    if rate <= 0:
        return
    run = getattr(soak, op)
    in_flight: set[asyncio.Task[None]] = set()
    next_at = time.monotonic()
    while next_at < until:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        next_at += 1 / rate
        if len(in_flight) >= limit:
            soak.samples.skip(op, soak.minute())
            continue
        task = asyncio.create_task(run())
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    await asyncio.gather(*in_flight)


async def _load(soak: Soak, rates: dict[str, float], seconds: float, limit: int) -> None:
    until = time.monotonic() + seconds
    await asyncio.gather(*(_schedule(soak, op, rate, until, limit) for op, rate in rates.items()))


async def _memory(trace: MemoryTrace, until: float) -> None:
    while time.monotonic() < until:
        await asyncio.to_thread(trace.sample)
        await asyncio.sleep(min(MEMORY_EVERY_SECONDS, max(0.0, until - time.monotonic())))
    await asyncio.to_thread(trace.sample)


def _stats(values: list[float], errors: int, skipped: int, seconds: float) -> dict[str, Any]:
    return {"count": len(values), "errors": errors, "skipped": skipped,
            "per_s": round(len(values) / seconds, 2) if seconds > 0 else 0.0,
            "p50_ms": _ms(values, 50), "p99_ms": _ms(values, 99)}


def _ms(values: list[float], p: float) -> float | None:
    return round(percentile(values, p), 2) if values else None


def _report(samples: Samples, minutes: float) -> dict[str, Any]:
    whole = max(1, int(-(-minutes // 1)))  # minutes, rounded up
    per_minute = []
    for minute in range(whole):
        seconds = min(60.0, minutes * 60 - minute * 60)
        per_minute.append({"minute": minute + 1, **{op: _stats(
            samples.latencies.get((op, minute), []), samples.errors.get((op, minute), 0),
            samples.skipped.get((op, minute), 0), seconds) for op in OPERATIONS}})
    totals = {op: _stats([v for (o, _), vs in samples.latencies.items() if o == op for v in vs],
                         sum(n for (o, _), n in samples.errors.items() if o == op),
                         sum(n for (o, _), n in samples.skipped.items() if o == op),
                         minutes * 60) for op in OPERATIONS}
    return {"totals": totals, "per_minute": per_minute}


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    rates = {"write": args.write_rate, "search": args.search_rate,
             "as_of_read": args.read_rate, "changes_page": args.changes_rate}
    with Steps(total=3) as steps, private_server({"MEMLEDGER_EMBEDDER": args.embedder}) as server:
        steps.step(f"creating the soak spaces, warm-up for {args.warmup:g}s")
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(server.url, timeout=timeout) as http:
            soak = Soak(http, time.monotonic())
            for space in SPACES:
                await soak.request("POST", "/v1/spaces", {"space_id": space})
            await _load(soak, rates, args.warmup, args.max_in_flight)
            steps.step(f"mixed load for {args.minutes:g} min")
            soak.samples, trace = Samples(), MemoryTrace()
            soak.started = trace.started
            await asyncio.gather(_memory(trace, soak.started + args.minutes * 60), _load(
                soak, rates, args.minutes * 60, args.max_in_flight))
            steps.step("done")
    return {"scenario": "soak", "minutes": args.minutes, "embedder": args.embedder,
            "rates_per_s": rates, **_report(soak.samples, args.minutes),
            "memory": trace.summary(), "memory_samples": len(trace.samples),
            "memory_note": MEMORY_NOTE,
            "first_errors": soak.samples.first_errors, "cpus": os.cpu_count()}


SCENARIO = Scenario("soak", "sustained mixed load (writes, searches, as-of reads, changes feed): "
                    "throughput and p50/p99 per minute, memory per process and its slope",
                    add_arguments, measured(_measure))
