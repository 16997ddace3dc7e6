"""The vector index's graph built aside (``AsideVectorIndex``), on real Qdrant Edge shards: a
build is held at a gate (its builder waits for a file) so that what happens during it is
certain, not timed. Writes and searches are answered during a build and none is lost or undone
by the swap; an erasure abandons the build and leaves its payloads in no file; a kill during a
build, or between the swap's renames, leaves a shard that reopens whole."""

import os
import random
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memledger_platform.vectorindex.aside import AsideVectorIndex, aside
from memledger_platform.vectorindex.port import OPEN, GraphState, IndexedPoint, Scope
from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex
from tests.integration.test_erasure_files import file_hits
from tests.support import eventually_sync

NOW = 1.0e9
STARTING = 300.0
"""How long a builder may take to start (or to die) on a loaded machine: a wait, not a limit."""
TOKEN = "zqxasidetoken4471"
"""Subject u7's, in the copy a build takes and in no file once u7 is erased."""
GATED = """
import os, pathlib, sys, time
from memledger_platform.vectorindex import aside
gate = pathlib.Path(sys.argv[1])
pathlib.Path(sys.argv[1] + ".pid").write_text(str(os.getpid()))
with open(sys.argv[1] + ".runs", "a") as runs:
    print("run", file=runs)
while not gate.exists():
    time.sleep(0.01)
sys.exit(aside.main(sys.argv[2:]))
"""
"""A builder that waits for its gate file (having written its pid beside it, and a line to
``<gate>.runs``), then builds."""


def _gated(gate: Path) -> list[str]:
    return [sys.executable, "-c", GATED, str(gate)]


def _points(numbers: range, subject: str = "u8", dims: int = 8, version: int = 1,
            seed: int = 7) -> list[IndexedPoint]:
    rng = random.Random(f"{seed}-{version}-{numbers.start}")
    word = TOKEN if subject == "u7" else "kept"
    return [IndexedPoint(str(uuid.UUID(int=n + 1)), [rng.random() for _ in range(dims)], {
        "tenant": "acme", "space": "main", "kind": "fact", "item_id": f"item-{n}",
        "subject_id": subject, "tags": [], "content": f"{subject} {word} v{version} #{n}",
        "valid_from": 0.0, "valid_to": OPEN, "sys_from": float(version), "sys_to": OPEN})
        for n in numbers]


def _leftovers(shard: Path) -> list[Path]:
    return [p for p in (aside(shard, ".build"), aside(shard, ".old")) if p.exists()]


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "gate"
    (tmp_path / "gate").touch()  # a builder still waiting ends with its test


def test_writes_and_searches_are_answered_during_a_build_and_the_swap_keeps_them(
        tmp_path: Path, gate: Path) -> None:
    # 8,000 points of 384 dimensions pass Edge's indexing threshold: the build makes a graph.
    dims, shard = 384, tmp_path / "vectors"
    index = AsideVectorIndex(shard, dims, builder=_gated(gate))
    try:
        for first in range(0, 8_000, 1_000):
            index.upsert(_points(range(first, first + 1_000), dims=dims))
        index.flush()
        assert index.indexed() == 0
        index.optimize()
        # the builder waits at its gate
        eventually_sync(lambda: _assert(Path(f"{gate}.pid").exists()), STARTING)
        assert index.building

        fresh = _points(range(8_000, 8_050), dims=dims)
        index.upsert(fresh)
        index.upsert(_points(range(0, 10), dims=dims, version=2))
        index.delete([p.point_id for p in _points(range(10, 20), dims=dims)])
        newest = fresh[-1]
        assert newest.vector is not None
        hits = index.search(newest.vector, Scope("acme", NOW), 1)
        assert [h.point_id for h in hits] == [newest.point_id]
        assert index.count() == 8_040
        assert index.building

        gate.touch()
        assert index.wait_built(600)
        assert index.count() == 8_040
        assert index.indexed() >= 8_000
        assert index.points("acme", "item-3")[0].payload["content"].endswith("v2 #3")
        assert index.points("acme", "item-15") == []
        assert [h.point_id for h in index.search(newest.vector, Scope("acme", NOW), 1)] == [
            newest.point_id]
        assert _leftovers(shard) == []
    finally:
        index.close()
    reopened = QdrantEdgeVectorIndex(shard, dims)
    try:
        assert reopened.count() == 8_040
        assert reopened.points("acme", "item-3")[0].payload["content"].endswith("v2 #3")
    finally:
        reopened.close()


def test_an_optimize_asked_for_during_a_build_builds_again_after_its_swap(
        tmp_path: Path, gate: Path) -> None:
    shard = tmp_path / "vectors"
    index = AsideVectorIndex(shard, 8, builder=_gated(gate))
    try:
        index.upsert(_points(range(0, 200)))
        index.optimize()
        eventually_sync(lambda: _assert(Path(f"{gate}.pid").exists()), STARTING)
        # written after the copy was taken: only a build after this one puts them in a graph
        index.upsert(_points(range(200, 400)))
        index.optimize()
        index.optimize()  # asked twice meanwhile: still one build after
        assert index.graph() == GraphState(400, 0, building=True)

        gate.touch()
        assert index.wait_built(600)
        assert Path(f"{gate}.runs").read_text().splitlines() == ["run", "run"]
        assert index.graph() == GraphState(400, 0, building=False)  # too few for a graph
        assert _leftovers(shard) == []
    finally:
        index.close()


def test_an_erasure_during_a_build_abandons_it_and_no_file_keeps_the_payload(
        tmp_path: Path, gate: Path) -> None:
    shard = tmp_path / "vectors"
    index = AsideVectorIndex(shard, 8, builder=_gated(gate))
    try:
        index.upsert(_points(range(0, 200)) + _points(range(200, 220), "u7"))
        index.flush()
        index.optimize()
        eventually_sync(lambda: _assert(Path(f"{gate}.pid").exists()), STARTING)
        assert file_hits(aside(shard, ".build"), TOKEN)  # the copy holds u7's payloads

        assert index.delete_subject("acme", "u7") == 20
        assert not index.building
        assert file_hits(tmp_path, TOKEN) == []

        gate.touch()
        index.upsert(_points(range(220, 230)))
        index.optimize()
        assert index.wait_built(600)
        assert index.count() == 210
        assert index.points("acme", "item-205") == []
        assert file_hits(tmp_path, TOKEN) == []
        assert _leftovers(shard) == []
        assert index.points("acme", "item-229")  # written after the erasure, kept
    finally:
        index.close()


KILLED = """
import sys, pathlib
from memledger_platform.vectorindex.aside import AsideVectorIndex
from tests.integration.test_vector_aside import _gated, _points
shard, gate = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
index = AsideVectorIndex(shard, 8, builder=_gated(gate))
index.upsert(_points(range(0, 300)))
index.flush()
index.optimize()
index.upsert(_points(range(300, 320)))
print("building", flush=True)
sys.stdin.read()
"""


def test_a_kill_during_a_build_leaves_a_shard_that_reopens(tmp_path: Path) -> None:
    shard, gate = tmp_path / "vectors", tmp_path / "gate"
    owner = subprocess.Popen([sys.executable, "-c", KILLED, str(shard), str(gate)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=os.getcwd())
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline() == b"building\n"
        eventually_sync(lambda: _assert(Path(f"{gate}.pid").exists()), STARTING)
        builder = int(Path(f"{gate}.pid").read_text())
        assert aside(shard, ".build").exists()
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        eventually_sync(lambda: _assert(not _alive(builder)), STARTING)  # it dies with its owner
    finally:
        owner.kill()
        owner.wait()
    index = AsideVectorIndex(shard, 8)
    try:
        assert index.count() >= 300  # the flushed points; those after may be lost
        assert _leftovers(shard) == []
        index.optimize()
        assert index.wait_built(600)
        assert index.count() >= 300
    finally:
        index.close()


def test_a_crash_between_the_swap_renames_reopens_the_shard_from_before(
        tmp_path: Path) -> None:
    shard = tmp_path / "vectors"
    first = QdrantEdgeVectorIndex(shard, 8)
    first.upsert(_points(range(0, 50)))
    first.close()
    shutil.copytree(shard, aside(shard, ".build"))
    shard.rename(aside(shard, ".old"))  # moved aside, the copy not yet brought in

    index = AsideVectorIndex(shard, 8)
    try:
        assert index.count() == 50
        assert _leftovers(shard) == []
    finally:
        index.close()


def test_a_crash_after_the_swap_renames_keeps_the_new_shard(tmp_path: Path) -> None:
    shard = tmp_path / "vectors"
    for where, count in ((aside(shard, ".old"), 50), (shard, 60)):
        made = QdrantEdgeVectorIndex(where, 8)
        made.upsert(_points(range(0, count)))
        made.close()

    index = AsideVectorIndex(shard, 8)
    try:
        assert index.count() == 60
        assert _leftovers(shard) == []
    finally:
        index.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def _assert(condition: bool) -> None:
    assert condition
