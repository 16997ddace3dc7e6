"""``VectorIndex`` on a Qdrant server (distributed mode) through ``qdrant-client``. The same
adapter runs against qdrant-client's local mode (``location=":memory:"``) in tests, and
against a real Qdrant where Docker exists."""

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from qdrant_client import QdrantClient, models

from memledger_platform.vectorindex.port import (
    KEYWORD_FIELDS,
    RANGE_FIELDS,
    SYS_UNTIL,
    Condition,
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

DENSE, KEYWORDS = "dense", "keywords"
_PAGE = 256


class QdrantServerVectorIndex(VectorIndex):
    def __init__(self, client: QdrantClient, collection: str, dims: int) -> None:
        self._client = client
        self._collection = collection
        if not client.collection_exists(collection):
            client.create_collection(
                collection,
                vectors_config={DENSE: models.VectorParams(
                    size=dims, distance=models.Distance.COSINE)},
                sparse_vectors_config={KEYWORDS: models.SparseVectorParams(
                    modifier=models.Modifier.IDF)},
                # Vacuum a segment as soon as it holds a deleted point, so an erased subject's
                # points leave the server's segment files (its WAL rotates on its own).
                optimizers_config=models.OptimizersConfigDiff(
                    deleted_threshold=0.0001, vacuum_min_vector_number=1))
        self._index_payload()
        complete_payloads(self._without_sys_until, self.upsert)

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        if points:
            self._client.upsert(self._collection, wait=True, points=[
                models.PointStruct(id=p.point_id, vector=_vectors(p),
                                   payload=stored_payload(p.payload))
                for p in points])

    def delete(self, point_ids: Sequence[str]) -> None:
        if point_ids:
            self._client.delete(self._collection, wait=True,
                                points_selector=models.PointIdsList(points=list(point_ids)))

    def search(self, vector: Sequence[float], scope: Scope, k: int,
               fields: Sequence[str] | None = None) -> list[Hit]:
        found = self._query(list(vector), DENSE, scope, k, fields)
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in found]

    def search_sparse(self, query: SparseVector, scope: Scope, k: int,
                      fields: Sequence[str] | None = None) -> list[Hit]:
        if not query.indices:
            return []
        named = models.SparseVector(indices=list(query.indices), values=list(query.values))
        return [Hit(str(p.id), float(p.score), dict(p.payload or {}))
                for p in self._query(named, KEYWORDS, scope, k, fields) if p.score > 0]

    def vectors(self, point_ids: Sequence[str]) -> dict[str, Vector]:
        if not point_ids:
            return {}
        found = self._client.retrieve(self._collection, list(point_ids), with_payload=False,
                                      with_vectors=[DENSE])
        return {str(r.id): np.asarray(vector, np.float32) for r in found
                if (vector := _dense(r.vector)) is not None}

    def payloads(self, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not point_ids:
            return {}
        found = self._client.retrieve(self._collection, list(point_ids), with_payload=True,
                                      with_vectors=False)
        return {str(r.id): dict(r.payload or {}) for r in found}

    def points(self, tenant: str, item_id: str) -> list[IndexedPoint]:
        where = _filter(item_conditions(tenant, item_id))
        found, offset = self._scroll(where, None)
        while offset is not None:
            more, offset = self._scroll(where, offset)
            found += more
        return sorted((_point(r) for r in found), key=lambda p: p.point_id)

    def session_messages(self, tenant: str, session: str, before: int) -> list[IndexedPoint]:
        where = _filter(session_conditions(tenant, session, before))
        found, offset = self._scroll(where, None)
        while offset is not None:
            more, offset = self._scroll(where, offset)
            found += more
        return oldest_first([_point(r) for r in found])

    def delete_subject(self, tenant: str, subject_id: str) -> int:
        where = _filter(subject_conditions(tenant, subject_id))
        found = int(self._client.count(self._collection, count_filter=where, exact=True).count)
        if found:
            self._client.delete(self._collection, wait=True,
                                points_selector=models.FilterSelector(filter=where))
        return found

    def count(self) -> int:
        return int(self._client.count(self._collection, exact=True).count)

    def close(self) -> None:
        self._client.close()

    def _query(self, query: Any, using: str, scope: Scope, k: int,
               fields: Sequence[str] | None = None) -> list[models.ScoredPoint]:
        return self._client.query_points(
            self._collection, query=query, using=using, limit=k,
            query_filter=_filter(conditions(scope)),
            with_payload=True if fields is None else list(fields), with_vectors=False).points

    def _without_sys_until(self, offset: Any) -> tuple[list[IndexedPoint], Any]:
        found, offset = self._scroll(models.Filter(must=[models.IsEmptyCondition(
            is_empty=models.PayloadField(key=SYS_UNTIL))]), offset)
        return [_point(r) for r in found], offset

    def _scroll(self, where: models.Filter, offset: Any) -> tuple[list[models.Record], Any]:
        return self._client.scroll(self._collection, scroll_filter=where, limit=_PAGE,
                                   offset=offset, with_payload=True, with_vectors=True)

    def _index_payload(self) -> None:
        """Index the scope's fields that are not yet indexed (an existing collection has them)."""
        indexed = self._client.get_collection(self._collection).payload_schema
        wanted: dict[str, models.PayloadSchemaType | models.KeywordIndexParams] = {
            "tenant": models.KeywordIndexParams(
                type=models.KeywordIndexType.KEYWORD, is_tenant=True),
            **dict.fromkeys(KEYWORD_FIELDS[1:], models.PayloadSchemaType.KEYWORD),
            **dict.fromkeys(RANGE_FIELDS, models.PayloadSchemaType.FLOAT)}
        with warnings.catch_warnings():
            # Local mode warns that it has no payload indexes (it filters by scanning): true,
            # and nothing to act on, since the same calls index a real server.
            warnings.filterwarnings("ignore", "Payload indexes have no effect", UserWarning)
            for key, schema in wanted.items():
                if key not in indexed:
                    self._client.create_payload_index(
                        self._collection, key, field_schema=schema, wait=True)


def _vectors(point: IndexedPoint) -> dict[str, Any]:
    """The named vectors of ``point``: a missing one is left out (an empty sparse vector too)."""
    named: dict[str, Any] = {}
    if point.vector is not None:
        named[DENSE] = list(point.vector)
    if point.sparse is not None and point.sparse.indices:
        named[KEYWORDS] = models.SparseVector(indices=list(point.sparse.indices),
                                              values=list(point.sparse.values))
    return named


def _point(record: models.Record) -> IndexedPoint:
    sparse = _named(record.vector).get(KEYWORDS)
    return IndexedPoint(
        str(record.id), _dense(record.vector), dict(record.payload or {}),
        SparseVector(tuple(sparse.indices), tuple(sparse.values))
        if isinstance(sparse, models.SparseVector) else None)


def _dense(vectors: Any) -> list[float] | None:
    found = _named(vectors).get(DENSE)
    return [float(x) for x in found] if isinstance(found, list) else None


def _named(vectors: Any) -> dict[str, Any]:
    return vectors if isinstance(vectors, dict) else {}


def _filter(found: list[Condition]) -> models.Filter:
    return models.Filter(must=[_condition(c) for c in found])


def _condition(c: Condition) -> models.FieldCondition:
    if c.op == "eq":
        return models.FieldCondition(key=c.key, match=models.MatchValue(value=c.value))
    if c.op == "any":
        return models.FieldCondition(key=c.key, match=models.MatchAny(any=c.value))
    bound = models.Range(lte=c.value) if c.op == "lte" else models.Range(gt=c.value)
    return models.FieldCondition(key=c.key, range=bound)
