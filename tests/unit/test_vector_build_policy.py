"""When the vector projector has the index build its HNSW graph: once caught up with at least
``OPTIMIZE_AFTER_POINTS`` new points, either after a quiet spell or, while writes go on, once
the shard has doubled since the last build (a build costs the whole shard's graph)."""

from types import SimpleNamespace
from typing import Any

import orjson

from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_schemas.subjects import HDR_EVENT_TYPE, HDR_POSITION, Subjects
from memledger_vectors.consumer import QUIET_IDLES, VectorProjector


class CountedIndex(InMemoryVectorIndex):
    """Holds ``before`` points written earlier (counted, not kept), and counts builds."""

    def __init__(self, before: int) -> None:
        super().__init__()
        self.before = before
        self.builds = 0

    def count(self) -> int:
        return self.before + super().count()

    def optimize(self) -> None:
        self.builds += 1


class Message(SimpleNamespace):
    async def ack(self) -> None:
        pass


def asserted(position: int) -> Message:
    document: dict[str, Any] = {
        "global_position": position, "recorded_at": "2026-01-01T00:00:00+00:00",
        "event_type": "memory.asserted", "event_id": f"evt-{position}", "tenant_id": "acme",
        "space_id": "notes", "actor": "tester", "session_id": None, "agent_id": None,
        "valid_from": None, "valid_to": None, "stream_version": 1,
        "payload": {"item_id": f"0190a000-0000-7000-8000-{position:012d}", "kind": "fact",
                    "content": f"fact number {position}", "tags": [], "importance": 0.5,
                    "confidence": 1.0}}
    return Message(data=orjson.dumps(document),
                   headers={HDR_EVENT_TYPE: "memory.asserted", HDR_POSITION: str(position)},
                   metadata=SimpleNamespace(sequence=SimpleNamespace(stream=position)))


async def _projector(before: int) -> tuple[VectorProjector, CountedIndex]:
    index = CountedIndex(before)
    projector = VectorProjector(Subjects("t"), index, HashingEmbedder.model_id)
    await projector._writer.start()
    return projector, index


async def _write(projector: VectorProjector, first: int, count: int) -> None:
    await projector.handle([asserted(p) for p in range(first, first + count)])  # type: ignore[misc]


async def test_a_busy_stream_builds_no_graph_until_the_shard_doubles_or_goes_quiet() -> None:
    projector, index = await _projector(before=4_000)
    await _write(projector, 1, 1_500)
    for _ in range(QUIET_IDLES - 1):  # gaps between a load's batches
        await projector._writer.idle()
    assert index.builds == 0
    await projector._writer.idle()  # quiet: what arrived is built
    assert index.builds == 1
    await projector._writer.idle()
    assert index.builds == 1  # nothing new since


async def test_a_doubled_shard_is_built_at_the_first_pause() -> None:
    projector, index = await _projector(before=2_000)
    await _write(projector, 1, 1_999)
    await projector._writer.idle()
    assert index.builds == 0
    await _write(projector, 2_000, 1)
    await projector._writer.idle()
    assert index.builds == 1
    await _write(projector, 2_001, 3_000)  # the shard held 4,000 at that build
    await projector._writer.idle()
    assert index.builds == 1
    await _write(projector, 5_001, 1_000)
    await projector._writer.idle()
    assert index.builds == 2


async def test_few_new_points_are_searched_exactly_however_quiet() -> None:
    projector, index = await _projector(before=0)
    await _write(projector, 1, 999)
    for _ in range(QUIET_IDLES * 2):
        await projector._writer.idle()
    assert index.builds == 0
