"""The embedded vector index in a process of its own (``ProcessVectorIndex``): the VectorIndex
contract, errors and restarts across the pipe, and the reason it exists: an HNSW build in the
index's process leaves this process's threads running. Then the vector projector's side of a
restart: what the index lost since its last flush is derived again from the log."""

import asyncio
import contextlib
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg_pool import ConnectionPool

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.consumer_positions import ConsumerPositions
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.vectorindex import process, wire
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import (
    OPEN,
    GraphState,
    IndexedPoint,
    IndexReopened,
    IndexUnavailable,
    Scope,
    VectorIndex,
)
from memledger_platform.vectorindex.process import ProcessVectorIndex, VectorProcessEnded
from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex, ShardInUse
from memledger_platform.vectorindex.remote import SocketVectorIndex
from memledger_relay.relay import Relay
from memledger_schemas import commands as c
from memledger_schemas.subjects import Subjects
from memledger_vectors.consumer import DURABLE, Batching, VectorProjector
from tests.support import eventually
from tests.unit.test_vector_index import NOW, VectorIndexContract, X, Y, ids, now, point


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[ProcessVectorIndex]:
    """The index with its process (the vectors service's, in production)."""
    made = ProcessVectorIndex(tmp_path / "vectors", dims=3)
    yield made
    made.close()


@pytest.fixture
def index(owner: ProcessVectorIndex) -> ProcessVectorIndex:
    return owner


class TestInItsOwnProcess(VectorIndexContract):
    @pytest.fixture
    def index(self, index: ProcessVectorIndex) -> VectorIndex:
        return index


def test_an_engine_error_comes_back_as_raised_and_the_process_goes_on_serving(
        index: ProcessVectorIndex) -> None:
    index.upsert([point("1")])
    with pytest.raises(Exception, match="dim"):
        index.search([1.0, 0.0], now(), 5)
    assert ids(index, now()) == ["1"]


def test_a_shard_opened_again_after_close_keeps_what_was_written(tmp_path: Path) -> None:
    first = ProcessVectorIndex(tmp_path / "vectors", dims=3)
    first.upsert([point("1"), point("2", vector=Y)])
    first.close()
    first.close()  # twice is harmless
    with pytest.raises(VectorProcessEnded):
        first.count()
    again = ProcessVectorIndex(tmp_path / "vectors", dims=3)
    try:
        assert again.count() == 2
        assert ids(again, now(), Y)[0] == "2"
    finally:
        again.close()


def test_a_shard_that_cannot_open_says_why(tmp_path: Path) -> None:
    (tmp_path / "vectors").write_text("not a directory")
    with pytest.raises(FileExistsError):
        ProcessVectorIndex(tmp_path / "vectors", dims=3)


def test_a_shard_held_by_another_process_is_not_opened_until_let_go(tmp_path: Path) -> None:
    held = ProcessVectorIndex(tmp_path / "vectors", dims=3)
    try:
        held.upsert([point("1")])
        with pytest.raises(ShardInUse, match="held by another process"):
            QdrantEdgeVectorIndex(tmp_path / "vectors", dims=3, lock_seconds=0.3)
    finally:
        held.close()
    again = QdrantEdgeVectorIndex(tmp_path / "vectors", dims=3, lock_seconds=0.3)
    try:
        assert again.count() == 1
    finally:
        again.close()


_STUCK_INDEX = """
import sys, time
from memledger_platform.vectorindex import process, qdrant_edge
qdrant_edge.QdrantEdgeVectorIndex.close = lambda self: time.sleep(3600)  # a build never ending
sys.exit(process.main(sys.argv[1:]))
"""

_OWNER = """
import subprocess, sys, time
from memledger_platform.vectorindex import process
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert child.stdout is not None
assert process._read(child.stdout) == ("ok", None)
print(child.pid, flush=True)
time.sleep(3600)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # ended; a zombie waits for a reaper that is not ours


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_index_whose_owner_died_ends_though_its_close_would_never_end(
        tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, _STUCK_INDEX, str(tmp_path / "vectors"), "3", "info",
         "json", str(tmp_path / "vectors.sock")], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    index_pid = int(owner.stdout.readline())
    owner.kill()
    owner.wait()
    try:
        deadline = time.monotonic() + 6 * process.ORPHAN_GRACE_SECONDS
        while not _gone(index_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(index_pid), "the orphaned index process is still running"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(index_pid, signal.SIGKILL)


def test_after_the_process_dies_a_search_starts_it_again_and_the_next_write_is_told(
        index: ProcessVectorIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    index.upsert([point("1")])
    index.flush()
    index.upsert([point("2")])  # not flushed: may be lost with the process
    monkeypatch.setattr(process, "RESTART_SECONDS", 3600.0)  # however slow the start was
    os.kill(index._process.pid, signal.SIGKILL)
    index._process.wait()
    with pytest.raises(VectorProcessEnded, match="exit code -9"):
        index.search(X, now(), 5)  # too soon after its start to start it again
    with pytest.raises(VectorProcessEnded):
        index.search(X, now(), 5)  # the pipe is not read again
    monkeypatch.setattr(process, "RESTART_SECONDS", 0.0)
    assert "1" in ids(index, now())  # reads are answered by the new process
    with pytest.raises(IndexReopened):
        index.upsert([point("3")])
    index.upsert([point("3")])  # told once; the writer writes again what it wrote
    assert "3" in ids(index, now())


def test_while_the_index_builds_its_graph_this_process_keeps_running(
        tmp_path: Path) -> None:
    # 8,000 points of 384 dimensions pass Edge's indexing threshold (10 MB), so ``optimize``
    # builds an HNSW graph: seconds in which an in-process shard holds the GIL throughout.
    dims, count = 384, 8_000
    index = ProcessVectorIndex(tmp_path / "vectors", dims=dims)
    rng = random.Random(7)
    payload = {"tenant": "acme", "space": "s", "kind": "fact", "tags": [], "item_id": "1",
               "valid_from": 0.0, "valid_to": OPEN, "sys_from": 1, "sys_to": OPEN}
    try:
        for start in range(0, count, 1_000):
            index.upsert([IndexedPoint(str(uuid.UUID(int=n + 1)),
                                       [rng.random() for _ in range(dims)], payload)
                          for n in range(start, start + 1_000)])
        ticks, done = 0, threading.Event()

        def tick() -> None:
            nonlocal ticks
            while not done.wait(0.01):
                ticks += 1

        ticker = threading.Thread(target=tick)
        ticker.start()
        started = time.monotonic()
        index.optimize()
        took = time.monotonic() - started
        done.set()
        ticker.join()
        # In process: 2 ticks in a 1.8 s build. Here the ticker runs all along (180 ticks).
        assert ticks >= int(took / 0.01) // 4, (ticks, took)
        assert len(index.search([1.0] * dims, Scope("acme", NOW), 5)) == 5
    finally:
        index.close()


class LosingIndex(InMemoryVectorIndex):
    """An index whose engine can die during a flush, losing what was written since the last
    one, and come back: the next call of a writer is then told so (``IndexReopened``)."""

    def __init__(self) -> None:
        super().__init__()
        self._flushed: dict[str, IndexedPoint] = {}
        self.hold: threading.Event | None = None
        self.flushing = threading.Event()
        self._dead = self._reopened = False

    def die_and_come_back(self) -> None:
        self._points, self._dead, self._reopened = dict(self._flushed), True, True
        assert self.hold is not None
        self.hold.set()

    def flush(self) -> None:
        if self.hold is not None:
            self.flushing.set()
            assert self.hold.wait(20), "the test never let the flush end"
            self.hold = None
        if self._dead:
            self._dead = False
            raise IndexUnavailable("the engine died while flushing")
        self._flushed = dict(self._points)

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        self._told()
        super().upsert(points)

    def count(self) -> int:
        self._told()
        return super().count()

    def _told(self) -> None:
        if self._reopened:
            self._reopened = False
            raise IndexReopened("restarted")


async def _assert_and_relay(writer: GroupCommitWriter, relay: Relay, first: int) -> None:
    for n in range(first, first + 6):
        await writer.submit("acme", [c.AssertMemory(space_id="main", kind="fact",
                                                    content=f"fact number {n}")])
    while await relay.relay_once():
        pass


async def test_a_projector_whose_index_lost_its_unflushed_writes_derives_them_again(
        engines: Endpoints, pg_schema: str, event_store: PostgresEventStore,
        subjects: Subjects, nats_js: tuple[Client, JetStreamContext]) -> None:
    _, js = nats_js
    writer = GroupCommitWriter(event_store)
    writer.start()
    relay = Relay(event_store, js, subjects)
    relay.cursor = await relay.resume()
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        engines.postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    index, stop = LosingIndex(), asyncio.Event()
    positions = ConsumerPositions(pool, pg_schema)
    vectors = VectorProjector(subjects, index, HashingEmbedder.model_id, batching=Batching(4),
                              positions=positions)
    running = asyncio.create_task(vectors.run(js, stop))
    try:
        await writer.submit("acme", [c.CreateSpace(space_id="main")])
        await _assert_and_relay(writer, relay, 0)
        flushed = (await js.stream_info(subjects.events_stream)).state.last_seq

        async def durable_at(seq: int) -> None:
            assert await asyncio.to_thread(positions.load, DURABLE) == seq

        await eventually(lambda: durable_at(flushed), timeout=20)
        index.hold = threading.Event()  # the next flush waits: the engine dies during it
        await _assert_and_relay(writer, relay, 6)
        assert await asyncio.to_thread(index.flushing.wait, 20)
        last = event_store.max_position()
        assert vectors.position == last
        assert len(_everything(index)) == 12
        index.die_and_come_back()
        assert len(_everything(index)) == 6

        async def whole_again() -> None:
            assert len(_everything(index)) == 12
            await durable_at((await js.stream_info(subjects.events_stream)).state.last_seq)

        await eventually(whole_again, timeout=30)
        assert vectors.position == last  # it never went back
        assert await asyncio.to_thread(positions.written, DURABLE) == last
    finally:
        stop.set()
        await asyncio.wait_for(running, 20)
        writer.stop()
        pool.close()
    # The same points as a projector that never lost anything.
    fresh, stop = InMemoryVectorIndex(), asyncio.Event()
    reference = VectorProjector(subjects, fresh, HashingEmbedder.model_id, durable="reference")
    again = asyncio.create_task(reference.run(js, stop))
    await eventually(lambda: _at(reference, last), timeout=20)
    stop.set()
    await asyncio.wait_for(again, 20)
    assert _everything(fresh) == _everything(index)


def _everything(index: InMemoryVectorIndex) -> dict[str, IndexedPoint]:
    return dict(index._points)


async def _at(projector: VectorProjector, position: int) -> None:
    assert projector.position == position


def test_a_call_interrupted_half_way_leaves_its_connection_and_the_next_call_gets_a_new_one(
        index: ProcessVectorIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    index.upsert([point("1")])
    index.flush()
    pid = index._process.pid

    def interrupted(sock: Any) -> Any:
        raise KeyboardInterrupt  # as a signal would, between the request and its answer

    monkeypatch.setattr(wire, "receive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        index.count()
    monkeypatch.undo()
    # The answer to the interrupted call is never read as another's: the process is the same.
    assert ids(index, now()) == ["1"]
    assert index.count() == 1
    assert index._process.pid == pid


def test_closing_an_index_whose_process_died_mid_call_is_harmless(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not started again, however slowly it started on a loaded machine: it stays ended.
    monkeypatch.setattr(process, "RESTART_SECONDS", 3_600.0)
    index = ProcessVectorIndex(tmp_path / "vectors", dims=3)
    os.kill(index._process.pid, signal.SIGKILL)
    index._process.wait()
    with pytest.raises(VectorProcessEnded):
        index.upsert([point("1")])
    index.close()
    index.close()


# --- readers: the index served to other processes over its socket ------------------------------


class TestReadThroughItsSocket(VectorIndexContract):
    @pytest.fixture
    def index(self, owner: ProcessVectorIndex) -> Iterator[VectorIndex]:
        reader = SocketVectorIndex(owner.address)
        yield reader
        reader.close()


_READER = """
import sys
from pathlib import Path
from memledger_platform.vectorindex.port import Scope
from memledger_platform.vectorindex.remote import SocketVectorIndex
reader = SocketVectorIndex(Path(sys.argv[1]))
hits = reader.search([0.0, 1.0, 0.0], Scope("acme", float(sys.argv[2])), 5)
print(" ".join(hit.payload["item_id"] for hit in hits))
"""


def test_other_processes_read_the_index_its_owner_writes_over_its_socket(
        owner: ProcessVectorIndex) -> None:
    owner.upsert([point("1"), point("2", vector=Y)])
    readers = [subprocess.Popen([sys.executable, "-c", _READER, str(owner.address), str(NOW)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    answers = [reader.communicate(timeout=60) for reader in readers]
    assert [out.split() for out, _ in answers] == [ids(owner, now(), Y)] * 3, answers


def test_a_reader_is_told_how_much_of_the_index_its_graph_covers(
        owner: ProcessVectorIndex) -> None:
    owner.upsert([point("1"), point("2", vector=Y)])
    reader = SocketVectorIndex(owner.address)
    try:
        assert reader.graph() == GraphState(2, 0, building=False)  # too few for a graph
    finally:
        reader.close()


def test_the_socket_is_served_to_its_owner_only(owner: ProcessVectorIndex) -> None:
    assert owner.address.is_socket()
    assert stat.S_IMODE(owner.address.stat().st_mode) == 0o600


def test_a_reader_finds_the_index_gone_until_its_owner_starts_it_again(
        owner: ProcessVectorIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = SocketVectorIndex(owner.address)
    owner.upsert([point("1")])
    owner.flush()
    assert ids(reader, now()) == ["1"]
    os.kill(owner._process.pid, signal.SIGKILL)
    owner._process.wait()
    with pytest.raises(IndexUnavailable):
        reader.search(X, now(), 5)
    monkeypatch.setattr(process, "RESTART_SECONDS", 0.0)
    owner.ensure_running()
    assert ids(reader, now()) == ["1"]  # a new connection, to the new process
    with pytest.raises(IndexReopened):  # the owner, which writes, is told
        owner.upsert([point("2")])
    reader.close()


def test_a_reader_idle_while_the_index_restarted_is_answered_on_a_new_connection(
        owner: ProcessVectorIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = SocketVectorIndex(owner.address)
    owner.upsert([point("1")])
    owner.flush()
    assert reader.count() == 1
    os.kill(owner._process.pid, signal.SIGKILL)
    owner._process.wait()
    monkeypatch.setattr(process, "RESTART_SECONDS", 0.0)
    owner.ensure_running()
    assert reader.count() == 1
    reader.close()


def test_a_reader_lets_go_of_its_connection_and_never_of_the_index(
        owner: ProcessVectorIndex) -> None:
    reader = SocketVectorIndex(owner.address)
    assert reader.count() == 0
    reader.close()
    with pytest.raises(IndexUnavailable):
        reader.count()
    owner.upsert([point("1")])
    assert owner.count() == 1


def test_a_reader_with_no_index_served_says_what_serves_it(tmp_path: Path) -> None:
    reader = SocketVectorIndex(tmp_path / "vectors.sock")
    with pytest.raises(IndexUnavailable, match="memledger vectors"):
        reader.count()


def test_an_index_deeper_than_a_socket_path_can_name_is_served_all_the_same(
        tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    owner = ProcessVectorIndex(deep / "vectors", dims=3)
    try:
        assert len(str(owner.address)) > 108
        owner.upsert([point("1")])
        reader = SocketVectorIndex(owner.address)
        assert reader.count() == 1
        reader.close()
    finally:
        owner.close()
