"""The vector projector's position is what the index holds, not what it has folded: a search
names that position as its basis and read-your-writes waits on it, while a batch is written
in a worker thread and searches are served meanwhile."""

import asyncio
import threading
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import orjson

from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import IndexedPoint
from memledger_schemas.subjects import HDR_EVENT_TYPE, HDR_POSITION, Subjects
from memledger_vectors.consumer import VectorProjector

ITEM = "0190a000-0000-7000-8000-0000000000a1"


class HeldIndex(InMemoryVectorIndex):
    """Upserts wait until released, as a slow engine's write would."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = threading.Event()
        self.release = threading.Event()

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        self.writing.set()
        assert self.release.wait(10), "the test never released the write"
        super().upsert(points)


class Message(SimpleNamespace):
    """What the projector reads of a JetStream message, and its settling calls."""

    async def ack(self) -> None:
        self.acked = True

    async def in_progress(self) -> None:
        pass


def asserted(position: int) -> Message:
    document: dict[str, Any] = {
        "global_position": position, "recorded_at": "2026-01-01T00:00:00+00:00",
        "event_type": "memory.asserted", "event_id": f"evt-{position}", "tenant_id": "acme",
        "space_id": "notes", "actor": "tester", "session_id": None, "agent_id": None,
        "valid_from": None, "valid_to": None, "stream_version": 1,
        "payload": {"item_id": ITEM, "kind": "fact", "content": "Alice works at Acme",
                    "tags": [], "importance": 0.5, "confidence": 1.0}}
    return Message(data=orjson.dumps(document), acked=False,
                   headers={HDR_EVENT_TYPE: "memory.asserted", HDR_POSITION: str(position)},
                   metadata=SimpleNamespace(sequence=SimpleNamespace(stream=position)))


async def test_the_position_moves_only_once_the_batch_is_in_the_index() -> None:
    index = HeldIndex()
    projector = VectorProjector(Subjects("t"), index, HashingEmbedder.model_id)
    message = asserted(7)
    handling = asyncio.create_task(projector.handle([message]))  # type: ignore[list-item]
    try:
        assert await asyncio.to_thread(index.writing.wait, 10)
        # Folded, being written: a search now must not name position 7 as its basis, and a
        # reader waiting for its own write at 7 must still be waiting.
        assert projector.position == 0
        assert not await projector.wait_for(7, 0.05)
        assert index.count() == 0
    finally:
        index.release.set()
    await handling
    assert projector.position == 7
    assert await projector.wait_for(7, 0.05)
    assert index.count() == 1
    assert message.acked


async def test_a_position_already_reached_answers_at_once_even_with_no_time_to_wait() -> None:
    """``wait_ms: 0`` asks "is it there now?": once the index holds position 7, yes."""
    projector = VectorProjector(Subjects("t"), InMemoryVectorIndex(), HashingEmbedder.model_id)
    await projector.handle([asserted(7)])  # type: ignore[list-item]
    assert await projector.wait_for(7, 0)
    assert not await projector.wait_for(8, 0)


class RecordedPositions:
    """Where the projector records the position it has written (PostgreSQL, in production),
    with what the index held at each record."""

    def __init__(self, index: InMemoryVectorIndex) -> None:
        self.index = index
        self.written: list[tuple[int, int]] = []

    def record_written(self, durable: str, position: int) -> None:
        self.written.append((position, self.index.count()))


async def test_the_position_written_is_recorded_for_every_query_process_after_each_batch() -> None:
    index = InMemoryVectorIndex()
    positions = RecordedPositions(index)
    projector = VectorProjector(Subjects("t"), index, HashingEmbedder.model_id,
                                positions=positions)  # type: ignore[arg-type]
    await projector.handle([asserted(7)])  # type: ignore[list-item]
    await projector.handle([asserted(8)])  # type: ignore[list-item]
    # recorded once the batch is in the index, never before
    assert positions.written == [(7, 1), (8, 2)]
    assert await projector.reached() == 8
