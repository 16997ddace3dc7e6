"""Read-side benchmarks: ``e2e`` (write → visible), ``temporal`` (as-of and changes
latency), ``rebuild`` (events/s). Each measures the raw engine beside memledger's path."""

import argparse
import asyncio
import os
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import nats
import numpy as np
import orjson
import psycopg
from psycopg import sql

from memledger_cli.bench import corpus, searchable
from memledger_cli.bench import cpu as processes
from memledger_cli.bench.common import Scenario, Steps, measured, percentile, private_server
from memledger_cli.bench.load import load, post
from memledger_cli.bench.settle import busy_limit, pause_enricher, settled
from memledger_cli.progress import Bar
from memledger_platform.crypto import Opener
from memledger_platform.embedding.embedder import LocalMiniLmEmbedder
from memledger_platform.eventstore.opened import OpenedEventStore
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.keyring_postgres import keyring_for, with_home_master_key
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_platform.settings import Settings
from memledger_projector.core import rebuild

SPACE = "bench"
BASE = datetime(2020, 1, 1, tzinfo=UTC)


def _ms(values: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 50), 2), "p99": round(percentile(values, 99), 2)}


# --- e2e: write acknowledged -> visible in the bi-temporal model ---------------------------

def _e2e_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=500.0, help="writes per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sample-every", type=int, default=5,
                        help="read back every Nth write (1: every write)")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="seconds at the same rate before measuring")
    searchable.add_arguments(parser)


async def _measure_e2e(args: argparse.Namespace) -> dict[str, Any]:
    with Steps(total=5) as steps, private_server({"MEMLEDGER_EMBEDDER": "local"}) as server:
        async with aiohttp.ClientSession(server.url) as http:
            await post(http, "/v1/spaces", {"space_id": SPACE})
            steps.step(f"warm-up: {args.rate:g} writes/s for {args.warmup:g}s")
            await _steady(http, args.rate, args.warmup, args.sample_every)
            steps.step(f"{args.rate:g} writes/s for {args.seconds:g}s, read back sampled")
            before = processes.snapshot(server.pid)
            visible, acks = await _steady(http, args.rate, args.seconds, args.sample_every)
            # the window's CPU, less moved by the machine's load than latency: the writes,
            # the sampled reads' waits, and what the services did meanwhile
            spent = processes.used(before, processes.snapshot(server.pid))
        steps.step("raw JetStream publish -> consume")
        raw = await _raw_jetstream_latency(server.nats_url, int(args.rate * 2))
        steps.step(f"write -> found by search at {args.search_rate:g} writes/s (local model)")
        found = await searchable.phase(server.url, server.nats_url, SPACE, args)
    return {"scenario": "e2e", "rate_per_s": args.rate, "writes": len(acks),
            "read_back": len(visible),
            "visible_p50_ms": _ms(visible)["p50"], "visible_p99_ms": _ms(visible)["p99"],
            "ack_p50_ms": _ms(acks)["p50"], "ack_p99_ms": _ms(acks)["p99"],
            "cpu_ms_per_write": processes.per_fact_ms(spent, len(acks)),
            "raw_jetstream_p50_ms": _ms(raw)["p50"], "raw_jetstream_p99_ms": _ms(raw)["p99"],
            **found, "cpus": os.cpu_count()}


async def _steady(http: aiohttp.ClientSession, rate: float, seconds: float, sample: int
                  ) -> tuple[list[float], list[float]]:
    """Open loop: a write every 1/rate s; every ``sample``-th, once acknowledged, is read back
    with min_position, timing how long after the ack it was visible."""
    visible: list[float] = []
    acks: list[float] = []
    tasks = []

    async def one(i: int) -> None:
        sent = time.perf_counter()
        result = await post(http, f"/v1/spaces/{SPACE}/memories",
                            {"kind": "fact", "content": f"steady fact {i}"})
        acked = time.perf_counter()
        acks.append((acked - sent) * 1000)
        if i % sample:
            return
        item = result["ids"]["item_id"]
        async with http.get(f"/v1/spaces/{SPACE}/items/{item}",
                            params={"min_position": str(result["position"]),
                                    "wait_ms": "10000"}) as response:
            await response.read()
            if response.status != 200:
                raise RuntimeError(f"read back failed: {response.status}")
        visible.append((time.perf_counter() - acked) * 1000)

    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return visible, acks


async def _raw_jetstream_latency(url: str, count: int) -> list[float]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="BENCH_E2E", subjects=["bench.e2e"])
    sub = await js.pull_subscribe("bench.e2e", durable="bench-e2e", stream="BENCH_E2E")
    latencies = []
    for _ in range(count):
        sent = time.perf_counter()
        await js.publish("bench.e2e", b"x" * 600)
        msgs = await sub.fetch(1, timeout=5)
        await msgs[0].ack()
        latencies.append((time.perf_counter() - sent) * 1000)
    await js.delete_stream("BENCH_E2E")
    await nc.close()
    return latencies


# --- temporal: as-of and changes latency over HTTP ----------------------------------------

def _temporal_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--versions", type=int, default=100_000, help="item versions loaded")
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--load", choices=("import", "write"), default="import",
                        help="import: each version with its embedding (import_memory, "
                        "import_revision); write: assert_memory and revise_memory, embedded "
                        "by the enricher (default import)")


def _history_commands(versions: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Items with four versions each: an assertion and three corrections with valid times."""
    items = _items(versions)
    return [_version_command(i, items) for i in range(len(items) * 4)], items


def _items(versions: int) -> list[str]:
    return [str(uuid.UUID(int=i + 1)) for i in range(max(1, versions // 4))]


def _version_command(index: int, items: list[str]) -> dict[str, Any]:
    """The ``index``-th command of the history: every item's assertion, then every item's
    first correction, and so on (so a batch never holds two versions of one item)."""
    version, n = divmod(index, len(items))
    if version == 0:
        return {"command": "assert_memory", "space_id": SPACE, "item_id": items[n],
                "kind": "fact", "content": f"item {n} version 0",
                "valid_from": BASE.isoformat(), "tags": [f"t{n % 10}"]}
    return {"command": "revise_memory", "space_id": SPACE, "item_id": items[n],
            "content": f"item {n} version {version}",
            "valid_from": (BASE + timedelta(days=365 * version)).isoformat(), "reason": "bench"}


class _Imports:
    """The history as imports: each version with an embedding of the server's model (a base
    vector, one of a few hundred the local model embedded, plus noise: what the reads measure
    does not depend on the vectors; the index still holds one per item)."""

    def __init__(self, items: list[str]) -> None:
        model = LocalMiniLmEmbedder()
        self.items, self.model, self.dims = items, model.model_id, model.dims
        self.bases = np.asarray(model.embed_documents(corpus.base_sentences(256)),
                                dtype=np.float32)

    def batch(self, start: int, stop: int) -> list[dict[str, Any]]:
        vectors = corpus.noisy(self.bases, stop - start, 0.03, seed=start)
        # Four decimals: the JSON stays short and the norm stays within the accepted range.
        rounded = np.round(vectors.astype(np.float64), 4)
        return [self._one(i, rounded[i - start]) for i in range(start, stop)]

    def _one(self, index: int, vector: Any) -> dict[str, Any]:
        command = _version_command(index, self.items)
        name = "import_memory" if command["command"] == "assert_memory" else "import_revision"
        return {**command, "command": name, "model": self.model, "dims": self.dims,
                "vector": vector, "idempotency_key": f"bench/{index}"}


async def _import_history(http: aiohttp.ClientSession, imports: _Imports, total: int,
                          bar: Bar) -> tuple[int, int]:
    """Every version imported in batches of 500 by two clients; (the last position, how many
    batches were answered 503/504 and sent again: every command has an idempotency key)."""
    starts = iter(range(0, total, IMPORT_BATCH))
    last = retried = done = 0

    async def client() -> None:
        nonlocal last, retried, done
        for start in starts:
            stop = min(start + IMPORT_BATCH, total)
            body = orjson.dumps({"commands": imports.batch(start, stop)},
                                option=orjson.OPT_SERIALIZE_NUMPY)
            while (answer := await _posted(http, body)) is None:
                retried += 1
            last = max(last, int(answer["position"]))
            done += stop - start
            bar.update(done)

    await asyncio.gather(*(client() for _ in range(2)))
    return last, retried


IMPORT_BATCH = 500


async def _posted(http: aiohttp.ClientSession, body: bytes) -> dict[str, Any] | None:
    """The batch's answer, or ``None`` if the server answered 503 or 504 (sent again)."""
    async with http.post("/v1/batch", data=body,
                         headers={"content-type": "application/json"}) as response:
        payload: dict[str, Any] = await response.json(loads=orjson.loads)
        if response.status in (503, 504):
            await asyncio.sleep(1.0 if response.status == 503 else 0.0)
            return None
        if response.status >= 300:
            raise RuntimeError(f"POST /v1/batch -> {response.status}: {payload}")
        return payload


async def _load_history(http: aiohttp.ClientSession, items: list[str], how: str
                        ) -> tuple[int, int]:
    """Load the history one way or the other; (the last position, batches sent again)."""
    total = len(items) * 4
    if how == "import":
        imports = _Imports(items)
        with Bar("import", total) as bar:
            return await _import_history(http, imports, total, bar)
    commands = [_version_command(i, items) for i in range(total)]
    with Bar("load", total) as bar:
        results = await load(http, commands, progress=bar.update)
    return max(r["position"] for r in results), 0


async def _measure_temporal(args: argparse.Namespace) -> dict[str, Any]:
    items = _items(args.versions)
    versions = len(items) * 4
    with Steps(total=6) as steps, private_server({"MEMLEDGER_EMBEDDER": "local"}) as server:
        async with aiohttp.ClientSession(server.url) as http:
            await post(http, "/v1/spaces", {"space_id": SPACE})
            if args.load == "import":
                # Nothing for it to embed; its reading of every version for names would share
                # the cores with the load (as in bench search).
                await pause_enricher(server.nats_url)
            steps.step(f"loading {versions} versions ({args.load})")
            started, before = time.monotonic(), processes.snapshot(server.pid)
            last, retried = await _load_history(http, items, args.load)
            load_s = time.monotonic() - started
            steps.step(f"loaded in {load_s:.0f} s ({versions / load_s:.0f} versions/s); "
                       "waiting for the read models")
            await _projected(http, last)
            projected_s = time.monotonic() - started - load_s
            spent = processes.used(before, processes.snapshot(server.pid))
            loaded_memory = processes.resident_mb(server.pid)
            # The server's digestion of the load (the enricher embedding what was written,
            # the vector index building its graph) is not the reads' work: the enricher is
            # paused, and the reads start once the index has no build under way and the
            # server has gone quiet (CPU alone can look quiet between two chained builds).
            await pause_enricher(server.nats_url)
            steps.step("waiting for the server to go quiet")
            before = processes.snapshot(server.pid)
            quiet_s = await settled(http, limit=busy_limit(versions))
            settling = processes.used(before, processes.snapshot(server.pid))
            steps.step(f"{args.queries} as-of reads, {args.queries} change-feed pages")
            as_of = await _as_of_reads(http, items, last, args.queries)
            changes = await _change_pages(http, last, args.queries)
            read_memory = processes.resident_mb(server.pid)
        steps.step("the same as-of query straight to PostgreSQL")
        raw = _raw_as_of(server.postgres_dsn, items, last, args.queries)
    return {"scenario": "temporal", "versions": versions, "items": len(items),
            "load": args.load, "as_of_p50_ms": _ms(as_of)["p50"],
            "as_of_p99_ms": _ms(as_of)["p99"],
            "changes_p50_ms": _ms(changes)["p50"], "changes_p99_ms": _ms(changes)["p99"],
            "raw_postgres_as_of_p50_ms": _ms(raw)["p50"],
            "raw_postgres_as_of_p99_ms": _ms(raw)["p99"],
            "load_s": round(load_s, 1), "load_versions_per_s": round(versions / load_s, 1),
            "projected_s_after_load": round(projected_s, 1),
            "projected_versions_per_s": round(versions / (load_s + projected_s), 1),
            "load_cpu_ms_per_version_by_process": processes.per_fact_ms(spent, versions),
            "load_batches_retried": retried, "settled_s_before_reads": round(quiet_s, 1),
            "settle_cpu_s_by_process": {k: round(v, 1) for k, v in sorted(settling.items())},
            "memory_mb_by_process_after_load": loaded_memory,
            "memory_mb_by_process_after_reads": read_memory,
            "cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)}


async def _get(http: aiohttp.ClientSession, path: str, params: dict[str, str]) -> Any:
    async with http.get(path, params=params) as response:
        body = await response.json(loads=orjson.loads)
        if response.status != 200:
            raise RuntimeError(f"GET {path} -> {response.status}: {body}")
        return body


async def _projected(http: aiohttp.ClientSession, position: int, limit_s: float = 600) -> None:
    """Wait until the read models have reached ``position`` (30 s per request at most)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        async with http.get(f"/v1/spaces/{SPACE}/items", params={
                "min_position": str(position), "wait_ms": "30000", "limit": "1"}) as response:
            await response.read()
            if response.status == 200:
                return
    raise RuntimeError(f"the read models did not reach position {position}")


def _probe(rng: random.Random, last: int) -> tuple[str, int]:
    valid_at = BASE + timedelta(days=rng.randrange(0, 365 * 5))
    return valid_at.isoformat(), rng.randrange(2, last + 1)


async def _as_of_reads(http: aiohttp.ClientSession, items: list[str], last: int, count: int
                       ) -> list[float]:
    rng, latencies = random.Random(7), []
    for _ in range(count):
        valid_at, position = _probe(rng, last)
        item = rng.choice(items)
        started = time.perf_counter()
        async with http.get(f"/v1/spaces/{SPACE}/items/{item}", params={
                "valid_at": valid_at, "as_of_position": str(position)}) as response:
            body = await response.read()
            # 404 is an answer too: the item was not yet known at that position
            if response.status not in (200, 404):
                raise RuntimeError(f"as-of read -> {response.status}: {body[:300]!r}")
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def _change_pages(http: aiohttp.ClientSession, last: int, count: int) -> list[float]:
    rng, latencies = random.Random(11), []
    for _ in range(count):
        started = time.perf_counter()
        page = await _get(http, f"/v1/spaces/{SPACE}/changes", {"limit": "100"})
        after = page["next_cursor"] if rng.random() < 0.5 else None
        if after:
            await _get(http, f"/v1/spaces/{SPACE}/changes", {"limit": "100", "after": after})
        latencies.append((time.perf_counter() - started) * 1000 / (2 if after else 1))
    return latencies


def _raw_as_of(dsn: str, items: list[str], last: int, count: int) -> list[float]:
    rng, latencies = random.Random(7), []
    with psycopg.connect(dsn, autocommit=True) as conn:
        s = schema.Names().schema(schema.live_version(conn, schema.Names()))
        query = sql.SQL(
            "SELECT attrs, lower(valid), upper(valid) FROM {}.item_versions WHERE "
            "tenant_id = 'default' AND item_id = %s::uuid AND valid @> %s::timestamptz "
            "AND sys_from <= %s AND (sys_to IS NULL OR sys_to > %s)").format(sql.Identifier(s))
        for _ in range(count):
            valid_at, position = _probe(rng, last)
            started = time.perf_counter()
            conn.execute(query, (rng.choice(items), valid_at, position, position)).fetchall()
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


# --- rebuild: events/s from the event store into new read models -------------------------

def _rebuild_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=_at_least_one, default=3,
                        help="full rebuilds, one after another; the median is reported")


def _at_least_one(value: str) -> int:
    try:
        runs = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number is needed, not {value!r}") from None
    if runs < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {runs}")
    return runs


async def _measure_rebuild(args: argparse.Namespace) -> dict[str, Any]:
    with Steps(total=4) as steps, private_server() as server:
        async with aiohttp.ClientSession(server.url) as http:
            await post(http, "/v1/spaces", {"space_id": SPACE})
            commands, _ = _history_commands(args.events)  # (a space.created precedes them)
            steps.step(f"loading {len(commands)} events")
            with Bar("load", len(commands)) as bar:
                results = await load(http, commands, progress=bar.update)
            # The live projector catches up first: it would compete with the rebuild for the
            # CPU, and the rebuilt model can then be compared with the live one.
            await _projected(http, max(r["position"] for r in results))
            # The enricher would append events during the rebuild: paused, as for search.
            await pause_enricher(server.nats_url)
            # Then the server's own digestion of the load (the vector index building its
            # graph over the embeddings, vacuum) finishes first: it is not the rebuild's work.
            steps.step("waiting for the server to go quiet")
            quiet_s = await settled(http)
        steps.step("rebuilding, and reading the same events raw")
        result = await asyncio.to_thread(_time_rebuilds, server.postgres_dsn,
                                         Path(server.home), args.runs)
        return {**result, "settled_s_before_rebuild": round(quiet_s, 1),
                "loadavg_1m": round(os.getloadavg()[0], 2)}


def _time_rebuilds(dsn: str, home: Path, runs: int) -> dict[str, Any]:
    """Rebuild ``runs`` times, each on a vacuumed database and beside a raw read of the same
    log; the medians, and every run (a shared machine's speed varies from minute to
    minute)."""
    done, vacuumed = [], []
    for run in range(1, runs + 1):
        vacuumed.append(_vacuum(dsn))
        done.append(_time_rebuild(dsn, home, run, runs))
    rates = [d["events_per_s"] for d in done]
    middle = sorted(range(runs), key=lambda i: rates[i])[runs // 2]
    return {**done[middle], "runs": runs, "events_per_s_runs": rates,
            "vacuumed_s_before_runs": vacuumed,
            "raw_postgres_read_per_s": percentile([d["raw_postgres_read_per_s"] for d in done],
                                                  50),
            "raw_postgres_read_per_s_runs": [d["raw_postgres_read_per_s"] for d in done],
            "rebuilt_equals_live": _all_equal([d["rebuilt_equals_live"] for d in done])}


def _vacuum(dsn: str) -> float:
    """VACUUM (ANALYZE) the database; how long it took. Autovacuum would do it on its own
    within a minute or so: of the load at first, then of the model the previous run built,
    in the middle of the next run, skewing what it measures."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    return round(time.perf_counter() - started, 2)


def _all_equal(checks: list[bool | None]) -> bool | None:
    """``False`` if any rebuilt model differed, ``None`` if none could be compared."""
    if False in checks:
        return False
    return None if None in checks else True


def _time_rebuild(dsn: str, home: Path, run: int, runs: int) -> dict[str, Any]:
    """Rebuild through the subjects' keys, as ``memledger rebuild`` does (the log is sealed);
    the raw read beside it reads the same rows without opening them."""
    raw_store = PostgresEventStore(datastore_from_dsn(dsn, pool_size=1))
    settings = with_home_master_key(Settings(home=home))
    keyring, pool = keyring_for(settings, dsn)
    store = OpenedEventStore(raw_store, Opener(keyring))
    try:
        count = sum(1 for _ in _read_everything(raw_store))
        started = time.perf_counter()
        count = sum(1 for _ in _read_everything(raw_store))
        raw = count / (time.perf_counter() - started)
        with psycopg.connect(dsn, autocommit=True) as conn, \
                Bar(f"rebuild {run}/{runs}", count) as bar:
            started = time.perf_counter()
            done = rebuild.rebuild(conn, store, schema.Names(), bar.update)
            elapsed = time.perf_counter() - started
            equal = _same_model(conn, done.version, done.previous)
    finally:
        raw_store.close()
        if pool is not None:
            pool.close()
    return {"scenario": "rebuild", "events": done.events,
            "events_per_s": round(done.events / elapsed, 1),
            "raw_postgres_read_per_s": round(raw, 1), "seconds": round(elapsed, 2),
            "processes": done.processes, "rebuilt_equals_live": equal, "cpus": os.cpu_count()}


def _same_model(conn: psycopg.Connection[Any], new: int, old: int) -> bool | None:
    """Whether the rebuilt model equals the one it replaced (``None``: the old one had not
    projected everything yet, so there is nothing to compare)."""
    names = schema.Names()
    new_cp = read_checkpoint(conn, names.schema(new)).position
    if read_checkpoint(conn, names.schema(old)).position != new_cp:
        return None
    return rebuild.model_hash(conn, names.schema(new)) == rebuild.model_hash(
        conn, names.schema(old))


def _read_everything(store: PostgresEventStore) -> Any:
    after = 0
    while batch := store.read_all(after, 5_000):
        yield from batch
        after = batch[-1].position


E2E = Scenario("e2e", "write acknowledged -> visible through min_position, at a steady rate",
               _e2e_arguments, measured(_measure_e2e))
TEMPORAL = Scenario("temporal", "as-of and change-feed latency over HTTP on loaded history",
                    _temporal_arguments, measured(_measure_temporal))
REBUILD = Scenario("rebuild", "full blue/green rebuild of the PostgreSQL read models",
                   _rebuild_arguments, measured(_measure_rebuild))
