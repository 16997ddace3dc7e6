"""Two ingest writers (each with its own pool, as two processes have) on one event store schema,
racing on the same session stream, with a reader tailing the log while they write."""

import asyncio
import threading
from collections import Counter
from uuid import UUID

import pytest

from memledger_ingest.core.writer import (
    CommandResult,
    GroupCommitWriter,
    Rejected,
    WriterLimits,
    WriterTuning,
)
from memledger_ingest.domain.errors import Conflict
from memledger_ingest.domain.streams import StreamRef
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore import EventStore, RecordedEvent
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_schemas.commands import AssertMemory, CommandBase
from tests.integration.events_support import read_everything
from tests.integration.ingest_support import (
    SPACE,
    TENANT,
    message,
    open_session,
    running,
    store_on,
    two_writers,
)

SUBMISSIONS = 400


class TailingReader(threading.Thread):
    """Reads the log from its last seen position in a loop, as the relay does, and records any
    event it is shown at or below a position it has already passed."""

    def __init__(self, store: EventStore) -> None:
        super().__init__(name="tailing-reader", daemon=True)
        self.store = store
        self.seen: list[int] = []
        self.regressions: list[tuple[int, int]] = []
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._tail()
        except BaseException as error:
            self.error = error

    def _tail(self) -> None:
        last = 0
        while True:
            finishing = self.done.is_set()  # read once more after the writers have finished
            batch = self.store.read_all(last, 200)
            for event in batch:
                if event.position <= last:
                    self.regressions.append((last, event.position))
                last = max(last, event.position)
                self.seen.append(event.position)
            if not batch:
                if finishing:
                    return
                self.done.wait(0.002)


def _command(index: int, session: UUID) -> CommandBase:
    """Half are messages to the shared session (a quarter with a version that soon goes stale),
    half are memories that read the session and space."""
    match index % 4:
        case 0 | 1:
            return message(session, f"message {index}")
        case 2:
            return AssertMemory(space_id=SPACE, kind="fact", content=f"fact {index}",
                                session_id=session)
        case _:
            return message(session, f"guarded message {index}", expected_version=index // 40 + 2)


async def _submit(writer: GroupCommitWriter, command: CommandBase
                  ) -> CommandResult | BaseException:
    try:
        return (await writer.submit(TENANT, [command]))[0]
    except Exception as error:
        return error


def _check_outcomes(commands: list[CommandBase], outcomes: list[CommandResult | BaseException]
                    ) -> list[CommandResult]:
    accepted = []
    for command, outcome in zip(commands, outcomes, strict=True):
        if isinstance(outcome, CommandResult):
            accepted.append(outcome)
            continue
        assert isinstance(outcome, Rejected), f"{command!r} failed with {outcome!r}"
        assert isinstance(outcome.error, Conflict), outcome
        assert command.expected_version is not None, f"{command!r} was refused: {outcome}"
    return accepted


def _check_log(log: list[RecordedEvent]) -> None:
    assert [e.position for e in log] == sorted({e.position for e in log}), "positions repeat"
    assert [e.recorded_at for e in log] == sorted(e.recorded_at for e in log)


async def test_two_writers_racing_on_one_session_commit_every_message_once_in_a_safe_order(
        engines: Endpoints, pg_schema: str, event_store: PostgresEventStore) -> None:
    with store_on(engines.postgres_dsn, pg_schema) as second_store, \
            store_on(engines.postgres_dsn, pg_schema, pool_size=1) as reader_store:
        first, second = GroupCommitWriter(event_store), GroupCommitWriter(second_store)
        async with running(first), running(second):
            session = await open_session(first)
            await second.submit(TENANT, [message(session, "warm the second writer's cache")])
            reader = TailingReader(reader_store)
            reader.start()
            commands = [_command(i, session) for i in range(SUBMISSIONS)]
            outcomes = await asyncio.gather(*(_submit((first, second)[i % 2], c)
                                              for i, c in enumerate(commands)))
        reader.done.set()
        await asyncio.to_thread(reader.join, 30)

    accepted = _check_outcomes(commands, outcomes)
    log = read_everything(event_store)
    _check_log(log)
    session_stream = StreamRef("session", str(session)).stream_id(TENANT)
    messages = event_store.read_streams([session_stream])[session_stream]
    assert [e.event_type for e in messages[:1]] == ["session.started"]
    assert [e.stream_version for e in messages] == list(range(1, len(messages) + 1))
    accepted_messages = [r for r in accepted if r.command == "append_message"]
    assert len(messages) == 2 + len(accepted_messages)
    assert Counter(r.stream_version for r in accepted_messages).most_common(1)[0][1] == 1
    assert {r.event_ids[0] for r in accepted} <= {str(e.fields()["event_id"]) for e in log}
    assert len(accepted) >= SUBMISSIONS // 2
    assert reader.error is None
    assert reader.regressions == []
    assert reader.seen == [e.position for e in log]


async def test_a_writer_accepts_an_expected_version_that_another_writer_made_current(
        engines: Endpoints, pg_schema: str, event_store: PostgresEventStore) -> None:
    async with two_writers(engines.postgres_dsn, pg_schema, event_store) as (first, second):
        session = await open_session(first)  # the first writer caches the session at v1
        moved = await second.submit(TENANT, [message(session, "from the other process")])
        assert moved[0].stream_version == 2

        with pytest.raises(Rejected) as refused:
            await first.submit(TENANT, [message(session, "stale", expected_version=1)])
        assert isinstance(refused.value.error, Conflict)
        assert refused.value.error.current_version == 2


async def test_a_writer_refuses_no_expected_version_that_is_current_in_the_store(
        engines: Endpoints, pg_schema: str, event_store: PostgresEventStore) -> None:
    async with two_writers(engines.postgres_dsn, pg_schema, event_store) as (first, second):
        session = await open_session(first)  # the first writer caches the session at v1
        await second.submit(TENANT, [message(session, "from the other process")])

        accepted = await first.submit(TENANT, [message(session, "based on what I read",
                                                       expected_version=2)])

    assert accepted[0].stream_version == 3


async def test_every_unguarded_message_commits_while_two_writers_race_one_transaction_each(
        engines: Endpoints, pg_schema: str, event_store: PostgresEventStore) -> None:
    with store_on(engines.postgres_dsn, pg_schema) as second_store:
        writers = [GroupCommitWriter(store, limits=WriterLimits(max_group_events=1),
                                     tuning=WriterTuning(linger_seconds=0))
                   for store in (event_store, second_store)]
        async with running(writers[0]), running(writers[1]):
            session = await open_session(writers[0])
            outcomes = await asyncio.gather(*(_submit(writers[i % 2], message(session, f"m{i}"))
                                              for i in range(200)))

    failed = Counter(type(o).__name__ for o in outcomes if not isinstance(o, CommandResult))
    assert failed == Counter()
