"""``memledger bench scale``: the same mixed load (single writes, searches, as-of reads of items)
against 1 and 2 query replicas and 1 and 2 ingest replicas of one clustered deployment (the one
``memledger cluster up`` runs), each phase for ``--seconds``: throughput, p50/p99 by operation,
and the CPU each process used per operation (from the phase's start until the read models had
everything, so the relay's, projector's and vectors' work on the phase's writes is counted).

Beside them, in the same run, the raw engines doing the same operations from as many clients:
single-row PostgreSQL inserts (the writes), primary-key selects (the as-of reads) and JetStream
publishes. Afterwards a checker lists every space the phases wrote to: an acknowledged write
missing or present twice, or an as-of read that answered other content, fails the run (exit 1,
``"ok": false``)."""

import argparse
import asyncio
import os
import random
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from memledger_cli.bench import cpu
from memledger_cli.bench.common import Scenario, Steps, emit, percentile
from memledger_cli.bench.ingest_raw import fact, raw_jetstream
from memledger_cli.bench.scale_check import Acked, check
from memledger_cli.bench.scale_raw import raw_postgres_ops
from memledger_cli.cluster import Cluster, Topology
from memledger_platform.settings import Settings

OPS = ("write", "search", "as_of")
SEED = 200
"""Memories written before the phases, for the as-of reads to name."""
LIST_PAGE = 1_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0, help="each phase (default 10)")
    parser.add_argument("--warmup", type=float, default=3.0,
                        help="seconds of the largest shape's load first, not reported "
                        "(default 3: the first phase is then not the one that warms up)")
    parser.add_argument("--writers", type=int, default=4, help="concurrent writing clients")
    parser.add_argument("--searchers", type=int, default=2, help="concurrent searching clients")
    parser.add_argument("--readers", type=int, default=2, help="concurrent as-of readers")
    parser.add_argument("--nats-nodes", type=int, default=3, help="JetStream cluster size")
    parser.add_argument("--configs", default="1x1,1x2,2x1,2x2",
                        help="ingest x query replicas of each phase (default 1x1,1x2,2x1,2x2)")
    parser.add_argument("--embedder", default="hashing",
                        help="the services' embedder (default hashing: the replicas' cost, "
                        "not the model's)")


def configs(text: str) -> list[tuple[int, int]]:
    """``"1x1,2x2"`` → ``[(1, 1), (2, 2)]`` (ingest, query replicas)."""
    found = []
    for part in text.split(","):
        ingest, _, query = part.strip().partition("x")
        if not (ingest.isdigit() and query.isdigit() and int(ingest) >= 1 and int(query) >= 1):
            raise argparse.ArgumentTypeError(f"--configs: {part!r} is not INGESTxQUERY")
        found.append((int(ingest), int(query)))
    return found


@dataclass
class Phase:
    """What one phase's clients saw."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {o: [] for o in OPS})
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPS, 0))
    acked: list[Acked] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


def run(args: argparse.Namespace, _: Settings) -> int:
    result = asyncio.run(_measure(args))
    emit(result, args.json)
    return 0 if result["ok"] else 1


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    wanted = configs(args.configs)
    top = Topology(nats_nodes=args.nats_nodes,
                   ingest_replicas=max(i for i, _ in wanted),
                   query_replicas=max(q for _, q in wanted))
    with (Steps(total=len(wanted) + 5) as steps,
          tempfile.TemporaryDirectory(prefix="memledger-scale-",
                                      ignore_cleanup_errors=True) as home):
        cluster = Cluster(Path(home), top, embedder=args.embedder)
        try:
            steps.step(f"starting the cluster ({top.nats_nodes} NATS nodes, "
                       f"{top.ingest_replicas} ingest, {top.query_replicas} query)")
            await asyncio.to_thread(cluster.start)
            seeds = await _seed(cluster)
            phases: list[dict[str, Any]] = []
            acked: list[Acked] = []
            wrong: list[str] = []
            largest = (top.ingest_replicas, top.query_replicas)
            runs = [(True, largest, args.warmup)] if args.warmup > 0 else []
            for warmup, shape, seconds in [*runs, *((False, s, args.seconds) for s in wanted)]:
                steps.step(f"mixed load, {shape[0]} ingest x {shape[1]} query, {seconds:g}s"
                           f"{' (warm-up)' if warmup else ''}")
                figures, phase = await _phase(cluster, args, shape, seeds, seconds)
                if not warmup:
                    phases.append(figures)
                acked += phase.acked
                wrong += phase.wrong
            steps.step("checking every acknowledged write")
            checked = await _checked(cluster, acked, wrong)
            steps.step("the raw engines: PostgreSQL inserts and selects, JetStream publishes")
            raw = await asyncio.to_thread(raw_postgres_ops, cluster.dsn, args)
            raw["jetstream_publish_per_s"] = round(
                await raw_jetstream(cluster.nats_url.split(",")[0], 20_000), 1)
        finally:
            await asyncio.to_thread(cluster.close)
    return {"scenario": "scale", "ok": checked["ok"], "phases": phases, "raw": raw,
            "check": checked, "scaling": _scaling(phases), "embedder": args.embedder,
            "nats_nodes": args.nats_nodes, "writers": args.writers,
            "searchers": args.searchers, "readers": args.readers,
            "seconds_per_phase": args.seconds, "warmup_seconds": args.warmup,
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


async def _seed(cluster: Cluster) -> list[Acked]:
    """``SEED`` memories in a space of their own, projected before the phases begin."""
    async with aiohttp.ClientSession(cluster.ingest_url) as http:
        await _send(http, "POST", "/v1/spaces", {"space_id": "scale-seed"})
        answer = await _send(http, "POST", "/v1/batch", {"commands": [
            {"command": "assert_memory", "space_id": "scale-seed", **fact(i, 0)}
            for i in range(SEED)]})
    seeds = [Acked("scale-seed", str(r["ids"]["item_id"]), int(r["position"]),
                   fact(i, 0)["content"]) for i, r in enumerate(answer["results"])]
    await _projected(cluster, max(s.position for s in seeds))
    return seeds


async def _phase(cluster: Cluster, args: argparse.Namespace, shape: tuple[int, int],
                 seeds: list[Acked], seconds: float) -> tuple[dict[str, Any], Phase]:
    ingest_urls, query_urls = cluster.ingest_urls[:shape[0]], cluster.query_urls[:shape[1]]
    space = f"scale-{uuid.uuid4().hex[:8]}-i{shape[0]}q{shape[1]}"
    async with aiohttp.ClientSession() as http:
        await _send(http, "POST", f"{ingest_urls[0]}/v1/spaces", {"space_id": space})
    phase, before = Phase(), _cpu(cluster)
    start = time.monotonic()
    deadline = start + seconds
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        clients = ([_loop(deadline, _writer(http, ingest_urls[w % len(ingest_urls)], space, w,
                                            phase), phase, "write")
                    for w in range(args.writers)] +
                   [_loop(deadline, _searcher(http, query_urls[s % len(query_urls)], space),
                          phase, "search") for s in range(args.searchers)] +
                   [_loop(deadline, _reader(http, query_urls[r % len(query_urls)], seeds,
                                            phase), phase, "as_of")
                    for r in range(args.readers)])
        await asyncio.gather(*clients)
    elapsed = time.monotonic() - start
    await _projected(cluster, max((a.position for a in phase.acked), default=0))
    spent = cpu.used(before, _cpu(cluster))
    ops = sum(len(v) for v in phase.latencies.values())
    return {"ingest_replicas": shape[0], "query_replicas": shape[1],
            "ops_per_s": round(ops / elapsed, 1),
            "ops": {op: _figures(phase.latencies[op], phase.errors[op], elapsed) for op in OPS},
            "cpu_ms_per_op": cpu.per_fact_ms(spent, ops)}, phase


Op = Callable[[], Awaitable[None]]


async def _loop(deadline: float, op: Op, phase: Phase, name: str) -> None:
    """``op`` again and again until ``deadline``: each success timed, each failure counted."""
    while time.monotonic() < deadline:
        sent = time.perf_counter()
        try:
            await op()
        except (aiohttp.ClientError, TimeoutError, Refused):
            phase.errors[name] += 1
            await asyncio.sleep(0.05)
            continue
        phase.latencies[name].append((time.perf_counter() - sent) * 1000)


def _writer(http: aiohttp.ClientSession, url: str, space: str, worker: int, phase: Phase
            ) -> Op:
    count = 0

    async def write() -> None:
        nonlocal count
        body = fact(count, worker)
        count += 1
        answer = await _send(http, "POST", f"{url}/v1/spaces/{space}/memories", body)
        phase.acked.append(Acked(space, str(answer["ids"]["item_id"]), int(answer["position"]),
                                 body["content"]))
    return write


def _searcher(http: aiohttp.ClientSession, url: str, space: str) -> Op:
    async def search() -> None:
        await _send(http, "POST", f"{url}/v1/search", {
            "query": f"deploy time of service {random.randrange(97)}",
            "spaces": [space, "scale-seed"], "k": 5})
    return search


def _reader(http: aiohttp.ClientSession, url: str, seeds: list[Acked], phase: Phase) -> Op:
    async def read() -> None:
        seed = random.choice(seeds)
        answer = await _send(http, "GET", f"{url}/v1/spaces/{seed.space}/items/{seed.item_id}",
                             params={"as_of_position": str(seed.position)})
        if answer["item"]["content"] != seed.content:
            phase.wrong.append(f"{seed.item_id} as of {seed.position}: "
                               f"{answer['item']['content']!r}")
    return read


class Refused(RuntimeError):
    """A request answered with an error status."""


async def _send(http: aiohttp.ClientSession, method: str, url: str, body: Any = None,
                params: dict[str, str] | None = None) -> dict[str, Any]:
    async with http.request(method, url, params=params, data=None if body is None else
                            orjson.dumps(body),
                            headers={"content-type": "application/json"}) as response:
        payload: dict[str, Any] = await response.json(loads=orjson.loads, content_type=None)
        if response.status >= 300:
            raise Refused(f"{method} {url} -> {response.status}: {payload}")
        return payload


def _figures(latencies: list[float], errors: int, seconds: float) -> dict[str, Any]:
    return {"count": len(latencies), "per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(percentile(latencies, 50), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "errors": errors}


def _cpu(cluster: Cluster) -> cpu.Snapshot:
    """CPU ticks so far of every process of the cluster, by its service's name (replicas
    apart: ``query-1``) or engine."""
    procs = cpu.processes()
    found: cpu.Snapshot = {}
    roots = [(s.name, s.proc.pid) for s in cluster.services.values() if s.proc is not None]
    roots.append(("postgres", cluster.postgres.pid or 0))
    nodes = getattr(cluster.nats, "nodes", [cluster.nats])
    roots += [("nats", node.pid or 0) for node in nodes]
    for name, pid in roots:
        for child, (_, ticks) in cpu.tree(pid, procs).items():
            found[child] = (name, ticks)
    return found


async def _projected(cluster: Cluster, position: int, seconds: float = 300.0) -> None:
    """Until every query replica's read models reach ``position``."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as http:
        for url in cluster.query_urls:
            while True:
                health = await _send(http, "GET", f"{url}/v1/query/health")
                if int(health.get("projected_position") or 0) >= position:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} still behind position {position}: {health}")
                await asyncio.sleep(0.1)


async def _checked(cluster: Cluster, acked: list[Acked], wrong: list[str]) -> dict[str, Any]:
    """Every space the phases wrote to, listed through a query replica, against what was
    acknowledged."""
    found: dict[str, list[str]] = {}
    last = max((a.position for a in acked), default=0)
    async with aiohttp.ClientSession() as http:
        for space in sorted({a.space for a in acked}):
            found[space] = await _listed(http, cluster.query_url, space, last)
    return check(acked, found, wrong)


async def _listed(http: aiohttp.ClientSession, url: str, space: str, position: int
                  ) -> list[str]:
    ids: list[str] = []
    after: str | None = None
    while True:
        params = {"limit": str(LIST_PAGE), "min_position": str(position), "wait_ms": "10000",
                  **({"after": after} if after else {})}
        page = await _send(http, "GET", f"{url}/v1/spaces/{space}/items", params=params)
        ids += [item["item_id"] for item in page["items"]]
        if len(page["items"]) < LIST_PAGE:
            return ids
        after = ids[-1]


def _scaling(phases: list[dict[str, Any]]) -> dict[str, float]:
    """Each phase's throughput over the 1 x 1 phase's (absent without one)."""
    base = next((p["ops_per_s"] for p in phases
                 if (p["ingest_replicas"], p["query_replicas"]) == (1, 1)), None)
    if not base:
        return {}
    return {f"{p['ingest_replicas']}x{p['query_replicas']}": round(p["ops_per_s"] / base, 3)
            for p in phases}


SCENARIO = Scenario("scale", "mixed writes, searches and as-of reads against 1 and 2 ingest "
                    "and query replicas of a clustered deployment: throughput, p50/p99 and CPU "
                    "per operation by process, beside raw PostgreSQL and JetStream",
                    add_arguments, run)
