"""The writer's bounds: a group's bytes, a commit's deadline, a stop that cannot wait."""

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from memledger_ingest.core.commit_watch import CommitTimedOut, WriterStopping
from memledger_ingest.core.writer import GroupCommitWriter, WriterLimits
from memledger_ingest.entrypoints.http import create_app
from memledger_ingest.entrypoints.problems import unavailable
from memledger_platform.eventstore import Committed, IdempotencyRecord, Interrupted, NewEvent
from memledger_platform.eventstore.memory import InMemoryEventStore
from memledger_schemas.envelope import EventEnvelope
from tests.support import eventually
from tests.unit.test_writer import (
    TENANT,
    ScriptedStore,
    hold_a_first_write,
    memory,
    queue_up,
    space,
)

TEXT = "x" * 10_000
GROUP_BYTES = 25_000
"""Room for two commands of ``TEXT`` in a group, not three."""


class StuckStore(InMemoryEventStore):
    """Its first append waits until released: by ``interrupt`` (which makes it raise
    ``Interrupted``) unless ``heeds_interrupt`` is false (a commit nothing can unstick)."""

    def __init__(self, *, heeds_interrupt: bool = True) -> None:
        super().__init__()
        self.heeds_interrupt = heeds_interrupt
        self.entered = threading.Event()
        self.release = threading.Event()
        self.interrupts = 0
        self._interrupted = False

    def append(self, events: Sequence[EventEnvelope | NewEvent],
               keys: Sequence[IdempotencyRecord] = ()) -> list[Committed]:
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(timeout=30)
            if self._interrupted:
                raise Interrupted("interrupted")
        return super().append(events, keys)

    def interrupt(self) -> None:
        self.interrupts += 1
        if self.heeds_interrupt:
            self._interrupted = True
            self.release.set()


@contextmanager
def running(store: InMemoryEventStore, limits: WriterLimits) -> Iterator[GroupCommitWriter]:
    writer = GroupCommitWriter(store, limits=limits)
    writer.start()
    try:
        yield writer
    finally:
        writer.stop(timeout=5)


async def entered(store: StuckStore) -> None:
    async def check() -> None:
        assert store.entered.is_set()

    await eventually(check)


# --- bytes ----------------------------------------------------------------------------------

async def test_a_group_takes_no_more_command_bytes_than_its_limit_the_rest_commit_next() -> None:
    store = ScriptedStore(hold_first=True)
    with running(store, WriterLimits(max_group_bytes=GROUP_BYTES)) as writer:
        blocker = await hold_a_first_write(writer, store)
        tasks = await queue_up(writer, [[space("notes")], *([memory(content=TEXT)]
                                                            for _ in range(4))])
        store.gate.set()
        await asyncio.gather(blocker, *tasks)

    assert store.sizes == [1, 3, 2]  # the blocker; the space and two memories; the other two


async def test_a_submission_larger_than_the_byte_limit_commits_alone_and_whole() -> None:
    store = ScriptedStore(hold_first=True)
    with running(store, WriterLimits(max_group_bytes=GROUP_BYTES)) as writer:
        blocker = await hold_a_first_write(writer, store)
        big = [memory(content=TEXT) for _ in range(4)]
        tasks = await queue_up(writer, [[space("notes")], big, [memory(content="small")]])
        store.gate.set()
        await asyncio.gather(blocker, *tasks)

    assert store.sizes == [1, 1, 4, 1]  # the blocker; the space; the four; the small one


# --- deadline -------------------------------------------------------------------------------

async def test_a_commit_past_its_deadline_fails_its_callers_and_the_writer_goes_on() -> None:
    store = StuckStore()
    with running(store, WriterLimits(commit_timeout_seconds=0.2)) as writer:
        with pytest.raises(CommitTimedOut, match="MEMLEDGER_WRITER_COMMIT_TIMEOUT_SECONDS"):
            await writer.submit(TENANT, [space("first")])
        (result,) = await writer.submit(TENANT, [space("second")])

        assert store.interrupts == 1
        assert writer.state()["commits_timed_out"] == 1
    assert result.positions == (1,)  # the first was interrupted before it committed


async def test_the_writer_says_it_is_stuck_while_a_commit_runs_past_its_deadline() -> None:
    store = StuckStore(heeds_interrupt=False)
    with running(store, WriterLimits(commit_timeout_seconds=0.2)) as writer:
        stuck = asyncio.create_task(writer.submit(TENANT, [space("first")]))
        await entered(store)
        with pytest.raises(CommitTimedOut):
            await stuck  # its caller is answered although the commit goes on

        state = writer.state()
        assert state["status"] == "stuck"
        assert state["commit_in_flight_seconds"] >= state["commit_timeout_seconds"] == 0.2
        store.release.set()

        async def recovered() -> None:
            assert writer.state()["status"] == "ok"

        await eventually(recovered)
        await writer.submit(TENANT, [space("second")])


async def test_a_stop_that_cannot_wait_fails_a_stuck_commit_and_everything_queued() -> None:
    store = StuckStore(heeds_interrupt=False)
    writer = GroupCommitWriter(store, limits=WriterLimits(commit_timeout_seconds=60))
    writer.start()
    stuck = asyncio.create_task(writer.submit(TENANT, [space("first")]))
    await entered(store)
    queued = await queue_up(writer, [[space(f"s{n}")] for n in range(3)])

    await asyncio.to_thread(writer.stop, 0.2)  # returns though the commit never finishes
    outcomes = await asyncio.gather(stuck, *queued, return_exceptions=True)
    store.release.set()

    assert all(isinstance(o, WriterStopping) for o in outcomes), outcomes
    assert store.interrupts == 1


# --- how it is told -------------------------------------------------------------------------

@pytest.mark.parametrize(("error", "code"), [(CommitTimedOut("late"), "commit_timeout"),
                                             (WriterStopping("bye"), "stopping")])
def test_a_commit_given_up_on_is_a_retryable_503_naming_why(error: Exception, code: str
                                                             ) -> None:
    problem = unavailable(error)

    assert (problem.status, problem.code) == (503, code)
    assert problem.extra["retry_after_seconds"] == 1.0


async def test_health_answers_503_when_the_writer_is_stuck() -> None:
    async def stuck() -> dict[str, Any]:
        return {"status": "writer_stuck", "writer": {"status": "stuck"}}

    app = create_app(GroupCommitWriter(InMemoryEventStore()), stuck, "default")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        response = await client.get("/health")

    assert response.status_code == 503
    assert response.json()["status"] == "writer_stuck"
