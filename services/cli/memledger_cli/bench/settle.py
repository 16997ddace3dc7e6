"""Waiting for a private server to settle before measuring it: the vector index at a
position, its background work (projection, HNSW building) done, the enricher paused.

"Done" is read from the CPU time of this process' descendants (the server and its children,
from ``/proc``), not from the machine's load: other work on the same machine must not keep a
bench waiting, and must not make it measure too early either.
"""

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import nats
from nats.js.api import ConsumerInfo
from nats.js.manager import JetStreamManager

from memledger_enricher.service import DURABLE as ENRICHER
from memledger_schemas.subjects import Subjects

_PROC = Path("/proc")


def parse_stat(text: str) -> tuple[int, int, int]:
    """(pid, parent pid, user + system clock ticks) from a ``/proc/<pid>/stat`` line (the
    command name, in parentheses, may itself contain spaces and parentheses)."""
    pid, rest = text.split(" (", 1)
    fields = rest.rsplit(") ", 1)[1].split()
    return int(pid), int(fields[1]), int(fields[11]) + int(fields[12])


def reaped_ticks(text: str) -> int:
    """The user + system clock ticks of a process's children it has waited for, from its
    ``/proc/<pid>/stat`` line."""
    fields = text.rsplit(") ", 1)[1].split()
    return int(fields[13]) + int(fields[14])


def descendants_ticks(root: int, stats: list[tuple[int, int, int]]) -> int:
    """The CPU ticks of every descendant of ``root`` (not ``root`` itself)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for pid, parent, ticks in stats:
        children.setdefault(parent, []).append((pid, ticks))
    total, todo = 0, [root]
    while todo:
        for pid, ticks in children.get(todo.pop(), ()):
            total += ticks
            todo.append(pid)
    return total


def _stats() -> list[tuple[int, int, int]]:
    found = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            try:
                found.append(parse_stat((entry / "stat").read_text()))
            except (OSError, ValueError, IndexError):
                continue  # the process ended while we looked
    return found


def server_cpu_seconds() -> float | None:
    """CPU seconds used so far by this process' descendants; ``None`` without ``/proc``."""
    if not _PROC.is_dir():
        return None
    return descendants_ticks(os.getpid(), _stats()) / os.sysconf("SC_CLK_TCK")


BUILD_S_PER_POINT = 0.001
"""About what an HNSW build costs a point here (the raw index's own build at one million)."""


def busy_limit(points: int) -> float:
    """How long a server loaded with ``points`` vectors may stay busy before it counts as hung:
    the index builds its graph once the load ends, and the build under way as it ended may be
    followed by another, so well past a build's time (at least 15 minutes)."""
    return max(900.0, points * BUILD_S_PER_POINT * 3)


async def wait_quiet(cores: float = 0.15, window: float = 2.0, limit: float = 900.0) -> float:
    """Seconds until the server used under ``cores`` CPUs over a ``window``; a server that
    stays busy for ``limit`` seconds is an error (without ``/proc``: waits one window)."""
    start = time.monotonic()
    before = server_cpu_seconds()
    while time.monotonic() - start < limit:
        await asyncio.sleep(window)
        after = server_cpu_seconds()
        if before is None or after is None or (after - before) / window < cores:
            return time.monotonic() - start
        before = after
    raise RuntimeError(f"the server stayed busy for {limit:.0f}s")


async def pause_enricher(nats_url: str, seconds: float = 24 * 3600,
                         limit: float = 60.0) -> str:
    """Pause the enricher's JetStream consumer (it delivers nothing until resumed or
    ``seconds`` pass), once the enricher has created it; its name."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jsm()
        name = await _enricher(js, limit)
        until = (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        await js.pause_consumer(Subjects().events_stream, name, until)
        return name
    finally:
        await nc.close()


async def wait_enriched(nats_url: str, limit: float = 900.0) -> float:
    """Seconds until the enricher has worked off what was written: its consumer has nothing
    left to deliver or to settle (at once while it is paused)."""
    start = time.monotonic()
    nc = await nats.connect(nats_url)
    try:
        js = nc.jsm()
        name = await _enricher(js, limit)
        while time.monotonic() - start < limit:
            if not enricher_behind(await js.consumer_info(Subjects().events_stream, name)):
                return time.monotonic() - start
            await asyncio.sleep(0.2)
    finally:
        await nc.close()
    raise RuntimeError(f"the enricher was still behind after {limit:.0f}s")


def enricher_behind(info: ConsumerInfo) -> bool:
    """Whether the enricher's consumer still has events to deliver or settle (never while
    paused: it delivers nothing then)."""
    return not info.paused and bool(info.num_pending or info.num_ack_pending)


async def _enricher(js: JetStreamManager, limit: float) -> str:
    """The enricher's consumer's name, once the enricher has created it."""
    stream = Subjects().events_stream
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        # Named "enricher" or "enricher-<model>", depending on the version.
        names = [c.name for c in await js.consumers_info(stream)
                 if c.name == ENRICHER or c.name.startswith(f"{ENRICHER}-")]
        if names:
            return names[0]
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the enricher created no consumer in {limit:.0f}s")


async def wait_indexed(http: aiohttp.ClientSession, position: int, limit: float = 900.0
                       ) -> float:
    """Seconds until the vector index reached ``position`` (a search with min_position)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        async with http.post("/v1/search", json={
                "query": "settled?", "min_position": position, "wait_ms": 20_000,
                "k": 1}) as response:
            await response.read()
            if response.status == 200:
                return time.monotonic() - start
            if response.status not in (503, 504):  # not yet; or the request timed out
                raise RuntimeError(f"search -> {response.status}")
    raise RuntimeError(f"the vector index did not reach position {position} in {limit:.0f}s")


async def wait_searchable(http: aiohttp.ClientSession, limit: float = 900.0) -> float:
    """Seconds until a search is answered (the server answers 504 to one it could not answer
    in time, e.g. while the index builds its graph)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        async with http.post("/v1/search", json={"query": "searchable?", "k": 1}) as response:
            await response.read()
            if response.status == 200:
                return time.monotonic() - start
            if response.status not in (503, 504):
                raise RuntimeError(f"search -> {response.status}")
    raise RuntimeError(f"no search was answered in {limit:.0f}s")


async def wait_built(http: aiohttp.ClientSession, limit: float = 900.0, every: float = 2.0
                     ) -> tuple[float, dict[str, Any]]:
    """Seconds until the vector index has no graph build under way, seen twice ``every``
    seconds apart (a build may follow another at once), and its graph then. A server that
    does not say (a key without the admin role, or no such route) is not waited on: ``{}``.
    CPU quiet alone is not enough: a build's copy being opened, or its catch-up between
    builder and swap, can look quiet for a window."""
    start = time.monotonic()
    idle = 0
    while time.monotonic() - start < limit:
        async with http.get("/v1/query/vectors/graph") as response:
            if response.status in (401, 403, 404):
                return time.monotonic() - start, {}
            if response.status == 200:
                graph: dict[str, Any] = await response.json()
                idle = 0 if graph["building"] else idle + 1
                if idle == 2:
                    return time.monotonic() - start, graph
            elif response.status not in (503, 504):
                raise RuntimeError(f"vectors graph -> {response.status}")
        await asyncio.sleep(every)
    raise RuntimeError(f"the vector index was still building its graph after {limit:.0f}s")


async def settled(http: aiohttp.ClientSession, limit: float = 900.0) -> float:
    """Seconds until the vector index holds everything written so far, no graph build is
    under way and the server went quiet (each wait at most ``limit``)."""
    start = time.monotonic()
    async with http.get("/health") as health:
        await wait_indexed(http, (await health.json())["position"], limit)
    await wait_quiet(limit=limit)
    await wait_built(http, limit)
    await wait_quiet(limit=limit)
    return time.monotonic() - start
