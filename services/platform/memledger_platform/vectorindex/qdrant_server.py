"""``VectorIndex`` on a Qdrant server (distributed mode) through ``qdrant-client``. The same
adapter runs against qdrant-client's local mode (``location=":memory:"``) in tests, and
against a real Qdrant where Docker exists."""

from collections.abc import Sequence

from qdrant_client import QdrantClient, models

from memledger_platform.vectorindex.port import (
    Condition,
    Hit,
    IndexedPoint,
    Scope,
    VectorIndex,
    conditions,
)


class QdrantServerVectorIndex(VectorIndex):
    def __init__(self, client: QdrantClient, collection: str, dims: int) -> None:
        self._client = client
        self._collection = collection
        if not client.collection_exists(collection):
            client.create_collection(collection, vectors_config=models.VectorParams(
                size=dims, distance=models.Distance.COSINE))

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        if points:
            self._client.upsert(self._collection, wait=True, points=[
                models.PointStruct(id=p.point_id, vector=list(p.vector), payload=p.payload)
                for p in points])

    def delete(self, point_ids: Sequence[str]) -> None:
        if point_ids:
            self._client.delete(self._collection, wait=True,
                                points_selector=models.PointIdsList(points=list(point_ids)))

    def search(self, vector: Sequence[float], scope: Scope, k: int) -> list[Hit]:
        found = self._client.query_points(self._collection, query=list(vector), limit=k,
                                          query_filter=_filter(scope), with_payload=True)
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in found.points]

    def count(self) -> int:
        return int(self._client.count(self._collection, exact=True).count)

    def close(self) -> None:
        self._client.close()


def _filter(scope: Scope) -> models.Filter:
    return models.Filter(must=[_condition(c) for c in conditions(scope)])


def _condition(c: Condition) -> models.FieldCondition:
    if c.op == "eq":
        return models.FieldCondition(key=c.key, match=models.MatchValue(value=c.value))
    if c.op == "any":
        return models.FieldCondition(key=c.key, match=models.MatchAny(any=c.value))
    bound = models.Range(lte=c.value) if c.op == "lte" else models.Range(gt=c.value)
    return models.FieldCondition(key=c.key, range=bound)
