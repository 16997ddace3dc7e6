"""``VectorIndex`` on Qdrant Edge whose HNSW graph is built aside, off the serving path.

Edge's ``optimize`` rebuilds the graph of the whole shard and holds the GIL while it runs, so
an index process that ran it in place answered nothing for seconds (ADR 0022). Here
``optimize`` starts a build and returns:

1. the shard is flushed and copied to ``<path>.build`` (writes wait meanwhile, reads do not);
2. a builder child process (``python -m memledger_platform.vectorindex.aside``, niced) opens
   the copy, optimizes it and closes it; the serving shard keeps answering, and each write
   made after the copy is applied to it and kept in memory, in order;
3. the built copy is given those writes (most of them while writes go on, the last few with
   writes held), flushed, and takes the shard's place: the serving shard is closed, renamed
   ``<path>.old``, the copy renamed ``<path>``, opened and served; ``<path>.old`` is removed.

An ``optimize`` asked for during a build is kept: once that build is swapped in, the next
starts, so the writes given to the copy after it was taken are not left unindexed (searched
one by one) until more arrive. An erasure abandons a build under way: its copy holds the
erased payloads, and vacuuming the copy too would stall the process a second time; the next
``optimize`` starts again. Opening the index puts back what a crash left (``recover``): the
old shard whole if the swap had renamed it but not yet the copy; any copy or old shard left
over is removed.
"""

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memledger_platform.vectorindex.port import (
    GraphState,
    Hit,
    IndexedPoint,
    Scope,
    SparseVector,
    Vector,
    VectorIndex,
)
from memledger_platform.vectorindex.qdrant_edge import LOCK_SECONDS, QdrantEdgeVectorIndex, hold

log = logging.getLogger(__name__)

BUILDER_NICE = 10
"""The builder's niceness: a build may take longer, the writes and searches beside it may not."""
BUILDER = (sys.executable, "-m", __name__)
TAIL = 256
"""Writes made during a build that the swap gives the copy with writes held (the rest are given
while writes go on)."""


def aside(path: Path, suffix: str) -> Path:
    """The sibling of the shard at ``path`` named ``<name><suffix>`` (``.build``, ``.old``)."""
    return path.with_name(path.name + suffix)


def recover(path: Path) -> None:
    """Put back the shard at ``path`` as a crash during a build or a swap left it (with its
    lock held): the old shard if the swap had moved it aside but not yet brought the copy in
    (both were whole, the old one is taken); leftover copies and old shards are removed."""
    old, built = aside(path, ".old"), aside(path, ".build")
    if not path.exists() and old.exists():
        old.rename(path)
        _sync(path.parent)
        log.warning("vector index %s: a swap was cut short, the shard before it is kept", path)
    shutil.rmtree(old, ignore_errors=True)
    if built.exists():  # a builder that outlived its owner lets go of it first
        with hold(built, LOCK_SECONDS):
            shutil.rmtree(built, ignore_errors=True)


@dataclass
class _Build:
    """A build under way: the writes made since its copy, and its builder."""

    writes: list[tuple[str, list[Any]]] = field(default_factory=list)
    abandoned: bool = False
    again: bool = False
    """Whether ``optimize`` was asked for meanwhile: another build follows this one."""
    builder: subprocess.Popen[bytes] | None = None
    thread: threading.Thread | None = None


class AsideVectorIndex(VectorIndex):
    """The Edge shard at ``path`` (``dims`` dimensions), its graph built aside (see the
    module) by ``builder``: a command to which the copy's path and the dimensions are given."""

    def __init__(self, path: Path, dims: int, *, builder: Sequence[str] = BUILDER,
                 lock_seconds: float = LOCK_SECONDS) -> None:
        self._path, self._dims, self._builder = path, dims, list(builder)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._held = hold(path, lock_seconds)
        try:
            recover(path)
            self._serving = QdrantEdgeVectorIndex(path, dims, locked=False)
        except BaseException:
            self._held.close()
            raise
        self._writes = threading.Lock()
        """Held by each write, by the copy and by the swap's last writes."""
        self._swap = threading.Lock()
        """Held by each call to the serving shard, and by the swap while it changes shards."""
        self._build: _Build | None = None

    # --- writes: applied to the serving shard, and kept for a build's copy --------------------

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        if points:
            self._write("upsert", list(points))

    def delete(self, point_ids: Sequence[str]) -> None:
        if point_ids:
            self._write("delete", list(point_ids))

    def delete_subject(self, tenant: str, subject_id: str) -> int:
        while True:  # a build started while the last one was abandoned is abandoned too
            self._abandon()
            with self._writes:
                if self._build is None:
                    with self._swap:
                        return self._serving.delete_subject(tenant, subject_id)

    def flush(self) -> None:
        with self._writes, self._swap:
            self._serving.flush()

    def _write(self, method: str, args: list[Any]) -> None:
        with self._writes:
            with self._swap:
                getattr(self._serving, method)(args)
            if self._build is not None:
                self._build.writes.append((method, args))

    # --- reads: the serving shard, a build or not ----------------------------------------------

    def search(self, vector: Sequence[float], scope: Scope, k: int,
               fields: Sequence[str] | None = None) -> list[Hit]:
        with self._swap:
            return self._serving.search(vector, scope, k, fields)

    def search_sparse(self, query: SparseVector, scope: Scope, k: int,
                      fields: Sequence[str] | None = None) -> list[Hit]:
        with self._swap:
            return self._serving.search_sparse(query, scope, k, fields)

    def payloads(self, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self._swap:
            return self._serving.payloads(point_ids)

    def vectors(self, point_ids: Sequence[str]) -> dict[str, Vector]:
        with self._swap:
            return self._serving.vectors(point_ids)

    def points(self, tenant: str, item_id: str) -> list[IndexedPoint]:
        with self._swap:
            return self._serving.points(tenant, item_id)

    def session_messages(self, tenant: str, session: str, before: int) -> list[IndexedPoint]:
        with self._swap:
            return self._serving.session_messages(tenant, session, before)

    def count(self) -> int:
        with self._swap:
            return self._serving.count()

    def indexed(self) -> int:
        """How many vectors of the serving shard are in an HNSW graph."""
        with self._swap:
            return self._serving.indexed()

    def graph(self) -> GraphState:
        building = self._build is not None
        with self._swap:
            return GraphState(self._serving.count(), self._serving.indexed(), building)

    # --- the build -----------------------------------------------------------------------------

    @property
    def building(self) -> bool:
        """Whether a build is under way (from its copy until its swap or its end)."""
        return self._build is not None

    def optimize(self) -> None:
        """Start a build of the shard's graph, or have another follow the one under way;
        return at once."""
        with self._writes:
            if self._build is not None:
                self._build.again = True
                return
            build = self._build = _Build()
            build.thread = threading.Thread(target=self._run, args=(build,),
                                            name="index-build", daemon=True)
        build.thread.start()

    def wait_built(self, seconds: float | None = None) -> bool:
        """Whether no build is under way, waiting up to ``seconds`` for the one that is and
        for those that follow it."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while (build := self._build) is not None and build.thread is not None:
            build.thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if build.thread.is_alive():
                break
        return self._build is None

    def close(self) -> None:
        """Abandon a build under way, then close the shard and let go of it."""
        self._abandon()
        with self._writes, self._swap:
            try:
                self._serving.close()
            finally:
                self._held.close()

    def _run(self, build: _Build) -> None:
        built = aside(self._path, ".build")
        try:
            if self._built(build, built):
                self._catch_up(build, QdrantEdgeVectorIndex(built, self._dims))
        except Exception:
            log.exception("vector index %s: a graph build failed (the shard is kept)",
                          self._path)
        finally:
            shutil.rmtree(built, ignore_errors=True)
            with self._writes:
                self._build = None
            if build.again and not build.abandoned:  # abandoned: closing, or an erasure
                self.optimize()

    def _built(self, build: _Build, built: Path) -> bool:
        """Copy the shard to ``built`` and have a builder optimize it: whether it did."""
        shutil.rmtree(built, ignore_errors=True)
        with self._swap:  # most of the flush before writes are held: the one under it is short
            self._serving.flush()
        with self._writes:
            if build.abandoned:
                return False
            with self._swap:
                self._serving.flush()
            started = time.monotonic()
            shutil.copytree(self._path, built)
            log.info("vector index %s: copied in %.2f s (writes held)", self._path,
                     time.monotonic() - started)
            build.builder = _start_builder([*self._builder, str(built), str(self._dims)])
        code = build.builder.wait()
        if code != 0 and not build.abandoned:
            log.error("vector index %s: the graph builder exited with %s", self._path, code)
        return code == 0 and not build.abandoned

    def _catch_up(self, build: _Build, built: QdrantEdgeVectorIndex) -> None:
        """Give ``built`` the writes made since its copy, then swap it in: all but the last
        ``TAIL`` while writes go on, those with writes held."""
        given = 0
        try:
            while True:
                with self._writes:
                    if build.abandoned:
                        return
                    pending = build.writes[given:]
                    if len(pending) <= TAIL:
                        _apply(built, pending)
                        built.flush()
                        self._swap_in(built)
                        return
                _apply(built, pending)
                built.flush()  # while writes go on, so that the flush with them held is short
                given += len(pending)
        finally:
            built.close()  # closing twice is harmless

    def _swap_in(self, built: QdrantEdgeVectorIndex) -> None:
        """With writes held: the built copy (flushed) becomes the shard. A crash between the
        renames leaves no shard at ``path`` but both whole aside: ``recover`` takes the old."""
        old = aside(self._path, ".old")
        with self._swap:  # reads wait from here: what closing flushes is flushed before
            self._serving.flush()
        started = time.monotonic()
        with self._swap:
            built.close()
            self._serving.close()
            self._path.rename(old)
            aside(self._path, ".build").rename(self._path)
            _sync(self._path.parent)
            try:
                self._serving = QdrantEdgeVectorIndex(self._path, self._dims, locked=False)
            except Exception:  # the shard before the swap is whole: it is served again
                self._path.rename(aside(self._path, ".build"))
                old.rename(self._path)
                self._serving = QdrantEdgeVectorIndex(self._path, self._dims, locked=False)
                raise
        log.info("vector index %s: graph built aside, swapped in in %.2f s (calls held)",
                 self._path, time.monotonic() - started)
        shutil.rmtree(old, ignore_errors=True)

    def _abandon(self) -> None:
        """Stop a build under way and wait until its copy is removed."""
        with self._writes:
            build = self._build
            if build is None:
                return
            build.abandoned = True
            if build.builder is not None and build.builder.poll() is None:
                build.builder.kill()
        if build.thread is not None:
            build.thread.join()


def _apply(index: VectorIndex, writes: list[tuple[str, list[Any]]]) -> None:
    for method, args in writes:
        getattr(index, method)(args)


def _start_builder(argv: list[str]) -> "subprocess.Popen[bytes]":
    from memledger_platform.engines.process import parent_death_preexec

    dies_with_us = parent_death_preexec(signal.SIGKILL)

    def preexec() -> None:
        os.nice(BUILDER_NICE)
        if dies_with_us is not None:
            dies_with_us()

    # The preexec only calls nice, prctl and getppid.
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=preexec)  # noqa: PLW1509


def _sync(directory: Path) -> None:
    """Make the renames in ``directory`` durable."""
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def main(argv: list[str]) -> int:
    """The builder: optimize the shard copy at ``argv[0]`` and close it (flushing it)."""
    path, dims = argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # its owner decides when it stops
    index = QdrantEdgeVectorIndex(Path(path), int(dims))
    with contextlib.closing(index):
        index.optimize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
