"""``VectorIndex`` on a Qdrant server (distributed mode) through ``qdrant-client``. The same
adapter runs against qdrant-client's local mode (``location=":memory:"``) in tests, and
against a real Qdrant where Docker exists."""

from collections.abc import Sequence
from typing import Any

from qdrant_client import QdrantClient, models

from memledger_platform.vectorindex.port import OPEN, Hit, IndexedPoint, Scope, VectorIndex


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
    position = OPEN - 1 if scope.position is None else scope.position
    must: list[Any] = [
        _match("tenant", scope.tenant),
        models.FieldCondition(key="valid_from", range=models.Range(lte=scope.valid_at)),
        models.FieldCondition(key="valid_to", range=models.Range(gt=scope.valid_at)),
        models.FieldCondition(key="sys_from", range=models.Range(lte=position)),
        models.FieldCondition(key="sys_to", range=models.Range(gt=position))]
    for key, values in (("space", scope.spaces), ("kind", scope.kinds), ("tags", scope.tags)):
        if values:
            must.append(models.FieldCondition(key=key, match=models.MatchAny(any=list(values))))
    for key, value in (("session", scope.session), ("agent", scope.agent)):
        if value is not None:
            must.append(_match(key, value))
    return models.Filter(must=must)


def _match(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))
