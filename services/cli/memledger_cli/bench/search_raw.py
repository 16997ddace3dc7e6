"""The raw side of ``bench search``: the same points in a Qdrant Edge index of this process
(the adapter the server uses, its HNSW built), searched without HTTP or ranking, and the
parts of a search timed one by one, so the server's latency can be read against them."""

import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memledger_cli.bench import corpus
from memledger_cli.bench.common import percentile
from memledger_platform.readmodel.temporal import Version, attrs_of
from memledger_platform.vectorindex import sparse
from memledger_platform.vectorindex.port import OPEN, IndexedPoint, Scope
from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex
from memledger_query.core.ranking import MODES, Recipe
from memledger_query.core.semantic import Layer, search
from memledger_vectors.fold import point_of

if TYPE_CHECKING:
    from memledger_cli.bench.search import Corpus

TENANT, SPACE = "default", "bench"
WARMUP = 20
FETCH = 40
"""What the server fetches from each of dense and keyword search for k=10 (``semantic``)."""


def raw_phase(data: "Corpus", exact: list[list[int]]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memledger-bench-edge-") as home:
        index = QdrantEdgeVectorIndex(Path(home), data.vectors.shape[1])
        try:
            started = time.monotonic()
            for start in range(0, len(data.ids), 1_000):
                index.upsert([_point(data, i) for i in range(
                    start, min(start + 1_000, len(data.ids)))])
            upsert_s = time.monotonic() - started
            index.optimize()
            built_s = time.monotonic() - started - upsert_s
            return {**_searches(index, data, exact), "raw_upsert_s": round(upsert_s, 1),
                    "raw_hnsw_build_s": round(built_s, 1)}
        finally:
            index.close()


def _searches(index: QdrantEdgeVectorIndex, data: "Corpus", exact: list[list[int]]
              ) -> dict[str, Any]:
    scope = Scope(tenant=TENANT, valid_at=datetime.now(UTC).timestamp(), spaces=(SPACE,))
    times: dict[str, list[float]] = {k: [] for k in ("dense", "sparse", "embed", "whole")}
    found = []
    for text, vector in zip(data.queries, data.query_vectors.tolist(), strict=True):
        _timed(times["dense"], partial(index.search, vector, scope, FETCH))
        found.append([int(uuid.UUID(h.point_id)) - 1 for h in index.search(vector, scope, 10)])
        _timed(times["sparse"], partial(_keyword, index, text, scope))
        _timed(times["embed"], partial(data.embedder.embed_query, text))
        _timed(times["whole"], partial(_in_process, index, data, text, scope))
    ms = {k: v[WARMUP:] for k, v in times.items()}
    return {"raw_index_p50_ms": _p(ms["dense"], 50), "raw_index_p99_ms": _p(ms["dense"], 99),
            "ann_recall_at_10": round(corpus.recall(found[WARMUP:], exact), 4),
            "raw_keyword_p50_ms": _p(ms["sparse"], 50),
            "raw_query_embedding_p50_ms": _p(ms["embed"], 50),
            "in_process_search_p50_ms": _p(ms["whole"], 50),
            "in_process_search_p99_ms": _p(ms["whole"], 99)}


def _keyword(index: QdrantEdgeVectorIndex, text: str, scope: Scope) -> Any:
    return index.search_sparse(sparse.encode_query(text), scope, FETCH)


def _in_process(index: QdrantEdgeVectorIndex, data: "Corpus", text: str, scope: Scope) -> Any:
    """What the server does for a search, minus HTTP: embed, fetch, rank, collapse."""
    vector = data.embedder.embed_query(text)
    return search(index, vector, text, [Layer("filtered", scope, 10)], Recipe(),
                  threshold=MODES["planning"].threshold, now=time.time())


def _timed(into: list[float], work: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = work()
    into.append((time.perf_counter() - started) * 1000)
    return result


def _p(values: list[float], p: float) -> float:
    return round(percentile(values, p), 2)


def _point(data: "Corpus", i: int) -> IndexedPoint:
    now = datetime.now(UTC)
    attrs = attrs_of({"kind": "fact", "content": data.text(i), "tags": (), "importance": 0.5,
                      "confidence": 1.0, "triple": None, "space": SPACE, "session": None,
                      "agent": None, "content_version": 1, "content_at": now.timestamp()})
    row = Version(valid_from=now, valid_to=None, sys_from=i + 2, sys_to=None, attrs=attrs)
    return point_of((TENANT, data.ids[i]), OPEN, row, data.ids[i], data.vectors[i].tolist())
