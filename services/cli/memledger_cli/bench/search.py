"""``memledger bench search``: ``POST /v1/search`` latency and HNSW recall at 100k memories,
beside the same dense searches straight on a Qdrant Edge index holding the same points.

How the server is loaded (fast, and every write through the public API):

- each item is imported with its vector (``import_memory`` in ``/v1/batch``, 500 a batch):
  the server records ``memory.asserted`` then ``memory.embedded``, the events a write and the
  enricher would record, so its path from there on is the real one: the vector projector,
  Qdrant Edge, its HNSW build. ``load_items_per_s`` is that rate, until the last batch
  committed; ``indexed_items_per_s`` until the vector index holds the last item too, beside
  ``raw_upsert_items_per_s``, the same points upserted straight into a Qdrant Edge index;
- the vectors are not the model's embedding of each item (100k texts at the model's few
  hundred texts/s would take minutes): ~2,000 distinct base sentences are embedded by the
  local MiniLM model, and each item's vector is its base vector plus gaussian noise,
  renormalised (``"vectors": "minilm+noise"`` in the result);
- the enricher's JetStream consumer is paused for the run: it would not embed the imports
  again, but it would read each for entity mentions and preferences, sharing the machine's
  cores with the load; ``bench embed`` measures the enricher;
- search is measured once the vector index has reached the last write, says no graph build
  is under way (``GET /v1/query/vectors/graph``; ``graph_points`` and ``graph_indexed`` are
  what it then says: the engine counts a point's dense and keyword vectors apart, so twice the
  points is all indexed) and the server has gone
  quiet (projection and the HNSW build done, see ``settle``).

Queries are distinct texts (the server caches query embeddings), embedded by the server on
each request as a client's would be. Recall: the top 10 of Edge's HNSW asked for 10
(``ann_recall_at_10``) and of the API with dense-only weights, which fetches 40 candidates and
ranks them (``search_recall_at_10``), against the exact top 10 by brute force (every point is
inside the searches' scope). ``raw_index_p50_ms`` is the server's dense fetch (40 hits with
their payload, without vectors: collapse looks up the few it needs) on the raw index;
``search_raw`` times the other parts of a search too. ``search_server_cpu_ms`` is the CPU of
every server process per search, steadier than wall time on a shared machine
(``search_cpu_ms_by_process``: the same by process), and
``load_server_cpu_ms_per_item`` theirs per item from the load's start until it is indexed
(``load_cpu_ms_per_item_by_process``: the same by process, ingest, relay, projector, vectors
with its index process, the engines).
The default 100k run takes several minutes (loading, then an HNSW build in the server and
another in the raw index).
"""

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

import aiohttp
import numpy as np

from memledger_cli.bench import corpus
from memledger_cli.bench import cpu as processes
from memledger_cli.bench.common import (
    Scenario,
    Server,
    Steps,
    measured,
    percentile,
    private_server,
)
from memledger_cli.bench.load import post
from memledger_cli.bench.search_raw import SPACE, WARMUP, raw_phase
from memledger_cli.bench.settle import (
    busy_limit,
    pause_enricher,
    server_cpu_seconds,
    wait_built,
    wait_indexed,
    wait_quiet,
    wait_searchable,
)
from memledger_platform.embedding.embedder import LocalMiniLmEmbedder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--bases", type=int, default=2_000, help="distinct base sentences")
    parser.add_argument("--noise", type=float, default=0.03,
                        help="gaussian noise per vector component (0.03: cosine ~0.86 to base)")
    parser.add_argument("--clients", type=int, default=2, help="concurrent batch writers")


class Corpus:
    """The items' texts and vectors, and the queries' texts and vectors (same model)."""

    def __init__(self, args: argparse.Namespace) -> None:
        model = LocalMiniLmEmbedder()
        self.bases = corpus.base_sentences(args.bases)
        base = np.asarray(model.embed_documents(self.bases), dtype=np.float32)
        # Six decimals: what is sent is exactly what the raw index and the ground truth hold.
        self.vectors = np.round(corpus.noisy(base, args.items, args.noise).astype(np.float64), 6)
        self.queries = corpus.query_texts(args.queries + WARMUP)
        self.query_vectors = np.asarray(model.embed_documents(self.queries), dtype=np.float32)
        self.ids = [str(uuid.UUID(int=i + 1)) for i in range(args.items)]
        self.model = model.model_id
        self.embedder = model

    def text(self, i: int) -> str:
        return corpus.item_text(i, self.bases[i % len(self.bases)])

    def imports(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Items ``start..stop`` with their vectors, as imports (``/v1/batch`` bodies)."""
        dims = self.vectors.shape[1]
        return [{"command": "import_memory", "space_id": SPACE, "item_id": self.ids[i],
                 "kind": "fact", "content": self.text(i), "model": self.model, "dims": dims,
                 "vector": self.vectors[i].tolist(), "idempotency_key": f"bench/{self.ids[i]}"}
                for i in range(start, stop)]


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    with Steps(total=8) as steps:
        steps.step("embedding base sentences and queries with the local model")
        data = Corpus(args)
        exact = corpus.exact_top_k(data.vectors.astype(np.float32),
                                   data.query_vectors[WARMUP:], 10)
        with private_server({"MEMLEDGER_EMBEDDER": "local"}) as server:
            await pause_enricher(server.nats_url)
            async with aiohttp.ClientSession(server.url) as http:
                result = await _server_phases(http, data, exact, args, steps, server)
        steps.step(f"raw Qdrant Edge: {args.items} points, HNSW, the same dense searches")
        result.update(raw_phase(data, exact))
        result["raw_upsert_items_per_s"] = round(args.items / max(result["raw_upsert_s"], 0.1))
    return {"scenario": "search", "items": args.items, "queries": args.queries,
            "vectors": "minilm+noise", "noise_sigma": args.noise, "bases": args.bases,
            "enricher": "paused", **result, "cpus": os.cpu_count(),
            "loadavg_1m": round(os.getloadavg()[0], 2)}


async def _server_phases(http: aiohttp.ClientSession, data: Corpus, exact: list[list[int]],
                         args: argparse.Namespace, steps: Steps,
                         server: Server) -> dict[str, Any]:
    await post(http, "/v1/spaces", {"space_id": SPACE})
    steps.step(f"importing {args.items} items with their vectors (/v1/batch, import_memory)")
    started, cpu_before = time.monotonic(), server_cpu_seconds()
    roles_before = processes.snapshot(server.pid)
    last, timeouts = await _load(http, data, args.clients)
    load_s = time.monotonic() - started
    steps.step(f"loaded in {load_s:.0f} s ({args.items / load_s:.0f} items/s); waiting for "
               "the vector index, then for the server to go quiet")
    indexed_s = await wait_indexed(http, last)
    load_cpu = _per_query_ms(cpu_before, server_cpu_seconds(), args.items)
    load_cpu_by_process = processes.per_fact_ms(
        processes.used(roles_before, processes.snapshot(server.pid)), args.items)
    steps.step(f"indexed {indexed_s:.0f} s after the load "
               f"({args.items / (load_s + indexed_s):.0f} items/s searchable)")
    # The index builds its HNSW graph once the projector is idle, answering no search
    # meanwhile: quiet before that build began is not quiet yet.
    building = busy_limit(args.items)
    quiet_s = await wait_quiet(limit=building)
    quiet_s += await wait_searchable(http)
    built_s, graph = await wait_built(http, limit=building)
    quiet_s += built_s + await wait_quiet(limit=building)
    steps.step(f"{args.queries} searches over HTTP (after {WARMUP} warm-up)")
    cpu, roles = server_cpu_seconds(), processes.snapshot(server.pid)
    latencies = [await _timed_search(http, q) for q in data.queries]
    cpu_ms = _per_query_ms(cpu, server_cpu_seconds(), len(latencies))
    cpu_by_process = processes.per_fact_ms(
        processes.used(roles, processes.snapshot(server.pid)), len(latencies))
    steps.step("recall through the API (dense only)")
    found = [await _dense_top(http, q) for q in data.queries[WARMUP:]]
    measured_ms = latencies[WARMUP:]
    return {"search_p50_ms": round(percentile(measured_ms, 50), 2),
            "search_p99_ms": round(percentile(measured_ms, 99), 2),
            "search_server_cpu_ms": cpu_ms,
            "search_cpu_ms_by_process": cpu_by_process,
            "search_recall_at_10": round(corpus.recall(found, exact), 4),
            "load_s": round(load_s, 1), "load_items_per_s": round(args.items / load_s, 1),
            "indexed_items_per_s": round(args.items / (load_s + indexed_s), 1),
            "load_server_cpu_ms_per_item": load_cpu,
            "load_cpu_ms_per_item_by_process": load_cpu_by_process,
            "load_batches_timed_out": timeouts,
            "indexed_s_after_load": round(indexed_s, 1),
            "settled_s_after_indexed": round(quiet_s, 1),
            "graph_points": graph.get("points"), "graph_indexed": graph.get("indexed")}


def _per_query_ms(before: float | None, after: float | None, count: int) -> float | None:
    """CPU of the whole server (all its processes) per search, or per item loaded: steadier
    than wall time when other work shares the machine."""
    if before is None or after is None:
        return None
    return round((after - before) * 1000 / count, 2)


async def _load(http: aiohttp.ClientSession, data: Corpus, clients: int) -> tuple[int, int]:
    """Import every item in batches of 500; (the last position, how many batches timed out
    or were given up on, and were sent again: every command has an idempotency key)."""
    starts = iter(range(0, len(data.ids), 500))
    last = timeouts = 0

    async def client() -> None:
        nonlocal last, timeouts
        for start in starts:
            body = {"commands": data.imports(start, min(start + 500, len(data.ids)))}
            while (answer := await _batch(http, body)) is None:
                timeouts += 1
            last = max(last, int(answer["position"]))

    await asyncio.gather(*(client() for _ in range(clients)))
    return last, timeouts


async def _batch(http: aiohttp.ClientSession, body: dict[str, Any]) -> dict[str, Any] | None:
    """The batch's answer, or ``None`` when the server answered 504 (no answer in time) or
    503 (its commit was given up on, e.g. on a machine other work overloads): sent again after
    a second, with the same idempotency keys."""
    try:
        return await post(http, "/v1/batch", body)
    except RuntimeError as error:
        if "-> 504" in str(error):
            return None
        if "-> 503" in str(error):
            await asyncio.sleep(1.0)
            return None
        raise


async def _timed_search(http: aiohttp.ClientSession, query: str) -> float:
    started = time.perf_counter()
    await post(http, "/v1/search", {"query": query, "spaces": [SPACE], "k": 10})
    return (time.perf_counter() - started) * 1000


async def _dense_top(http: aiohttp.ClientSession, query: str) -> list[int]:
    answer = await post(http, "/v1/search", {
        "query": query, "spaces": [SPACE], "k": 10, "threshold": 0,
        "weights": {"dense": 1, "keyword": 0}})
    return [int(uuid.UUID(hit["item_id"])) - 1 for hit in answer["results"]]


SCENARIO = Scenario("search", "POST /v1/search latency and HNSW recall at 100k memories, "
                    "beside the same searches on a raw Qdrant Edge index", add_arguments,
                    measured(_measure))
