"""When the vector projector flushes its index: not after every batch it catches up on (under
a trickle of writes that is nearly every batch), but once what was written has waited
``IDLE_FLUSH_SECONDS``; and always as it stops. Each flush records the durable position a
restart resumes from."""

from types import SimpleNamespace

import pytest

from memledger_platform.consumer import Consumer, Subscription
from memledger_platform.crypto import Opener
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_schemas.subjects import Subjects
from memledger_vectors import consumer as vectors
from memledger_vectors.consumer import IDLE_FLUSH_SECONDS, IndexWriter
from tests.unit.test_vector_projector_position import asserted


class CountedIndex(InMemoryVectorIndex):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1


class SavedPositions:
    """Where the durable position goes (PostgreSQL, in production)."""

    def __init__(self) -> None:
        self.saved: list[int] = []

    def save(self, durable: str, stream_seq: int) -> None:
        self.saved.append(stream_seq)

    def record_written(self, durable: str, position: int) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()  # the projector's own clock: the event loop keeps the real one
    monkeypatch.setattr(vectors, "time", SimpleNamespace(monotonic=clock))
    return clock


def _writer(index: CountedIndex, positions: SavedPositions) -> tuple[IndexWriter, Consumer]:
    subjects = Subjects("t")
    writer = IndexWriter(subjects, index, HashingEmbedder.model_id, durable="vectors",
                         opener=Opener(None), on_erased=None,
                         positions=positions)  # type: ignore[arg-type]
    spec = Subscription(name="vectors", stream=subjects.events_stream, durable="vectors",
                        subject=subjects.all_events)
    return writer, Consumer(None, subjects, spec, writer)


async def test_caught_up_after_each_of_a_trickle_of_batches_it_flushes_once_they_waited(
        clock: Clock) -> None:
    index, positions = CountedIndex(), SavedPositions()
    writer, consumer = _writer(index, positions)
    for position in (1, 2, 3):
        await consumer.handle([asserted(position)])  # type: ignore[list-item]
        clock.now += IDLE_FLUSH_SECONDS / 4
        await writer.idle()
    assert (index.flushes, positions.saved) == (0, [])
    clock.now += IDLE_FLUSH_SECONDS
    await writer.idle()
    assert (index.flushes, positions.saved) == (1, [3])
    await writer.idle()  # nothing new: nothing to flush
    assert index.flushes == 1


async def test_what_was_written_since_the_last_flush_is_flushed_as_it_stops(
        clock: Clock) -> None:
    index, positions = CountedIndex(), SavedPositions()
    writer, consumer = _writer(index, positions)
    await consumer.handle([asserted(1)])  # type: ignore[list-item]
    await writer.idle()
    assert index.flushes == 0
    await writer.stopping()
    assert (index.flushes, positions.saved) == (1, [1])
