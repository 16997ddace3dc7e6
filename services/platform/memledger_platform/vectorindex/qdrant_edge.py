"""``VectorIndex`` on Qdrant Edge (``qdrant-edge-py``): the Qdrant engine in process, HNSW for
the dense vector and an inverted index with IDF for the keywords, under a directory of its own."""

import fcntl
import logging
import struct
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import qdrant_edge as qe

from memledger_platform.vectorindex.port import (
    KEYWORD_FIELDS,
    RANGE_FIELDS,
    SYS_UNTIL,
    Condition,
    GraphState,
    Hit,
    IndexedPoint,
    Scope,
    SparseVector,
    Vector,
    VectorIndex,
    complete_payloads,
    conditions,
    item_conditions,
    oldest_first,
    session_conditions,
    stored_payload,
    subject_conditions,
)

log = logging.getLogger(__name__)

DENSE, KEYWORDS = "dense", "keywords"
_PAGE = 256


GRAPH = qe.HnswIndexConfig(m=16, ef_construct=64, full_scan_threshold=10_000)
"""The dense graph: Edge's defaults but for ``ef_construct`` (100), a cheaper build whose
recall the search makes up for by walking it wider (``RESCORED``; ADR 0024)."""
QUANTIZED = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, always_ram=True)
"""Dense vectors are also kept as int8, which the graph is built and walked with (ADR 0024)."""
RESCORED = qe.SearchParams(hnsw_ef=128, quantization=qe.QuantizationSearchParams(
    rescore=True, oversampling=2.0))
"""A dense search takes twice the hits asked for by their int8 score and ranks them by their
float32 vectors: the scores a search returns are exact cosines. It walks the graph with 128
candidates, not ``ef_construct``'s 64, under which recall at a million points falls short of
what search promises (ADR 0024)."""

LOCK_SECONDS = 30.0
"""How long opening a shard waits for another process to let go of it."""


class ShardInUse(RuntimeError):
    """Another process holds the shard."""


class QdrantEdgeVectorIndex(VectorIndex):
    """The shard at ``path``, held (``hold``) while open; ``locked=False``: its caller holds
    it already (``aside.AsideVectorIndex``, which opens it again at each swap)."""

    def __init__(self, path: Path, dims: int, *, lock_seconds: float = LOCK_SECONDS,
                 locked: bool = True) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._path, self._dims = str(path), dims
        self._held = hold(path, lock_seconds) if locked else None
        try:
            # Load what is there, else create: falling back to create after any failed load
            # would bury the real error (an incompatible shard) under "path has segments".
            opened = qe.EdgeShard.load if any(path.iterdir()) else qe.EdgeShard.create
            self._shard = opened(self._path, _config(dims))
        except BaseException:
            if self._held is not None:
                self._held.close()
            raise
        # Every call holds the GIL, so this lock costs no parallelism; it keeps callers off
        # the shard while an erasure reopens it.
        self._lock = threading.Lock()
        self._index_payload()
        self._closed = False
        rewritten = complete_payloads(self._without_sys_until, self.upsert)
        if rewritten:
            # Rewritten points left their graphs: index them now, once, before any search
            # (the projector would only optimize after its next thousand points).
            self.optimize()
            self.flush()
            log.info("vector index %s: %d points given sys_until", path, rewritten)

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        if points:
            with self._lock:
                self._shard.update(qe.UpdateOperation.upsert_points(
                    [qe.Point(id=p.point_id, vector=_vectors(p),
                              payload=stored_payload(p.payload)) for p in points]))

    def delete(self, point_ids: Sequence[str]) -> None:
        if point_ids:
            with self._lock:
                self._shard.update(qe.UpdateOperation.delete_points(list(point_ids)))

    def search(self, vector: Sequence[float], scope: Scope, k: int,
               fields: Sequence[str] | None = None) -> list[Hit]:
        found = self._query(qe.Query.Nearest(list(vector), using=DENSE), scope, k, fields,
                            RESCORED)
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in found]

    def search_sparse(self, query: SparseVector, scope: Scope, k: int,
                      fields: Sequence[str] | None = None) -> list[Hit]:
        if not query.indices:
            return []
        named = qe.SparseVector(list(query.indices), list(query.values))
        found = self._query(qe.Query.Nearest(named, using=KEYWORDS), scope, k, fields)
        return [Hit(str(p.id), float(p.score), dict(p.payload or {}))
                for p in found if p.score > 0]

    def vectors(self, point_ids: Sequence[str]) -> dict[str, Vector]:
        if not point_ids:
            return {}
        with self._lock:
            found = self._shard.retrieve(list(point_ids), False, [DENSE])
        return {str(r.id): _packed(vector) for r in found
                if (vector := _named(r.vector).get(DENSE)) is not None}

    def payloads(self, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not point_ids:
            return {}
        with self._lock:
            found = self._shard.retrieve(list(point_ids), True, False)
        return {str(r.id): dict(r.payload or {}) for r in found}

    def points(self, tenant: str, item_id: str) -> list[IndexedPoint]:
        where = _filter(item_conditions(tenant, item_id))
        with self._lock:
            found, offset = self._scroll(where, None)
            while offset is not None:
                more, offset = self._scroll(where, offset)
                found += more
        return sorted((_point(r) for r in found), key=lambda p: p.point_id)

    def session_messages(self, tenant: str, session: str, before: int) -> list[IndexedPoint]:
        where = _filter(session_conditions(tenant, session, before))
        with self._lock:
            found, offset = self._scroll(where, None)
            while offset is not None:
                more, offset = self._scroll(where, offset)
                found += more
        return oldest_first([_point(r) for r in found])

    def delete_subject(self, tenant: str, subject_id: str) -> int:
        where = _filter(subject_conditions(tenant, subject_id))
        with self._lock:
            found = int(self._shard.count(qe.CountRequest(filter=where, exact=True)))
            if found:
                self._shard.update(qe.UpdateOperation.delete_points_by_filter(where))
                self._vacuum()
        return found

    def flush(self) -> None:
        with self._lock:
            self._shard.flush()

    def count(self) -> int:
        with self._lock:
            return int(self._shard.count(qe.CountRequest(filter=None, exact=True)))

    def indexed(self) -> int:
        """How many vectors are in an HNSW graph (the rest are searched one by one)."""
        with self._lock:
            return int(self._shard.info().indexed_vectors_count)

    def graph(self) -> GraphState:
        return GraphState(self.count(), self.indexed(), building=False)

    def optimize(self) -> None:
        """Build the HNSW graph for what was added (search is exact until then)."""
        with self._lock:
            self._shard.optimize()

    def close(self) -> None:
        with self._lock:
            if self._closed:  # closing twice is harmless (a test may close before its fixture)
                return
            self._closed = True
            try:
                self._shard.flush()
                self._shard.close()
            finally:
                if self._held is not None:  # the files are let go of: another may open them
                    self._held.close()

    def _vacuum(self) -> None:
        """Rewrite every segment that holds a deleted point, so erased payloads leave the
        files. The shard is reopened for it with a vacuum-at-once configuration and then
        with the usual one: at all times, a vacuum would rewrite a segment (and rebuild its
        graph, holding the GIL, which stalls the whole process) for each handful of points
        moved by an update (ADR 0006)."""
        self._shard.flush()
        self._shard.close()
        strict = qe.EdgeShard.load(self._path, _config(self._dims, vacuum_at_once=True))
        try:
            strict.optimize()
            strict.flush()
        finally:
            strict.close()
            self._shard = qe.EdgeShard.load(self._path, _config(self._dims))

    def _query(self, query: qe.Query, scope: Scope, k: int, fields: Sequence[str] | None,
               params: qe.SearchParams | None = None) -> list[qe.ScoredPoint]:
        request = qe.QueryRequest(limit=k, query=query, filter=_filter(conditions(scope)),
                                  with_payload=True if fields is None else list(fields),
                                  with_vector=False, params=params)
        with self._lock:
            return self._shard.query(request)

    def _without_sys_until(self, offset: Any) -> tuple[list[IndexedPoint], Any]:
        with self._lock:
            found, offset = self._scroll(qe.Filter(must=[qe.IsEmptyCondition(SYS_UNTIL)]),
                                         offset)
        return [_point(r) for r in found], offset

    def _scroll(self, where: qe.Filter, offset: Any) -> tuple[list[qe.Record], Any]:
        return self._shard.scroll(qe.ScrollRequest(
            offset=offset, limit=_PAGE, filter=where, with_payload=True, with_vector=True))

    def _index_payload(self) -> None:
        """Index the scope's fields that are not yet indexed (a reopened shard has them)."""
        indexed = self._shard.info().payload_schema
        wanted: dict[str, Any] = {
            **{key: qe.KeywordIndexParams(is_tenant=key == "tenant") for key in KEYWORD_FIELDS},
            **dict.fromkeys(RANGE_FIELDS, qe.PayloadSchemaType.Float)}
        for key, schema in wanted.items():
            if key not in indexed:
                self._shard.update(qe.UpdateOperation.create_field_index(key, schema))


def _config(dims: int, *, vacuum_at_once: bool = False) -> qe.EdgeConfig:
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dims, distance=qe.Distance.Cosine,
                                            quantization_config=QUANTIZED)},
        hnsw_config=GRAPH,
        sparse_vectors={KEYWORDS: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        # Vacuum-at-once (a segment with any deleted point is rewritten): only for an
        # erasure, whose points must leave the files (``_vacuum``). Otherwise Edge's defaults,
        # given explicitly: an unspecified setting would keep what the shard has persisted.
        optimizers=qe.EdgeOptimizersConfig(deleted_threshold=0.0001,
                                           vacuum_min_vector_number=1)
        if vacuum_at_once else qe.EdgeOptimizersConfig(deleted_threshold=0.2,
                                                       vacuum_min_vector_number=1_000),
        # No write-ahead log: it would keep erased payloads on disk until it rotates. The
        # projector flushes each batch before acknowledging it instead (``flush``), and an
        # unflushed batch is redelivered and rewritten (the writes are idempotent).
        wal_enabled=False)


def _vectors(point: IndexedPoint) -> dict[str, Any]:
    """The named vectors of ``point``: a missing one is left out (an empty sparse vector too)."""
    named: dict[str, Any] = {}
    if point.vector is not None:
        named[DENSE] = list(point.vector)
    if point.sparse is not None and point.sparse.indices:
        named[KEYWORDS] = qe.SparseVector(list(point.sparse.indices), list(point.sparse.values))
    return named


def _point(record: qe.Record) -> IndexedPoint:
    sparse = _named(record.vector).get(KEYWORDS)
    return IndexedPoint(
        str(record.id), _dense(record.vector), dict(record.payload or {}),
        SparseVector(tuple(sparse.indices), tuple(float(v) for v in sparse.values))
        if sparse is not None else None)


def _dense(vectors: Any) -> list[float] | None:
    found = _named(vectors).get(DENSE)
    return list(found) if found is not None else None


def _packed(values: Sequence[float]) -> Vector:
    """``values`` as float32 in one buffer: ``struct`` packs a list of floats in a third of
    numpy's time, and the array then crosses the index's socket as bytes."""
    layout = _LAYOUTS.get(len(values))
    if layout is None:
        layout = _LAYOUTS.setdefault(len(values), struct.Struct(f"={len(values)}f"))
    return np.frombuffer(layout.pack(*values), np.float32)


_LAYOUTS: dict[int, struct.Struct] = {}
"""A packing layout by vector length (one a model)."""


def _named(vectors: Any) -> dict[str, Any]:
    return vectors if isinstance(vectors, dict) else {}


def _filter(found: list[Condition]) -> qe.Filter:
    return qe.Filter(must=[_condition(c) for c in found])


def _condition(c: Condition) -> qe.FieldCondition:
    if c.op == "eq":
        return qe.FieldCondition(key=c.key, match=qe.MatchValue(c.value))
    if c.op == "any":
        return qe.FieldCondition(key=c.key, match=qe.MatchAny(c.value))
    bound = qe.RangeFloat(lte=c.value) if c.op == "lte" else qe.RangeFloat(gt=c.value)
    return qe.FieldCondition(key=c.key, range=bound)


def hold(path: Path, seconds: float) -> IO[bytes]:
    """An exclusive lock on the shard at ``path`` (on ``<path>.lock`` beside it), waiting up to
    ``seconds`` for another holder. Edge takes none, and two processes writing one shard would
    corrupt it: a query service started again can open it while the index process of the one
    before is still closing it."""
    handle = path.with_name(path.name + ".lock").open("ab")
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                raise ShardInUse(f"the vector index at {path} is held by another process "
                                 f"(waited {seconds:g} s); stop it first") from None
            time.sleep(0.1)
