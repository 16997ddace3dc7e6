"""``EventStore.interrupt`` on PostgreSQL: a call in progress fails soon, whether the server
acts on the cancel request or never answers again, and the store keeps working."""

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from uuid import uuid4

import psycopg
import pytest

from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore import Interrupted, NewEvent
from memledger_platform.eventstore.interrupting import BusyConnections
from memledger_platform.eventstore.postgres import EVENTS_TABLE, PostgresEventStore
from tests.support import eventually_sync


class Call(threading.Thread):
    """Runs ``call`` in a thread of its own and keeps what it raised."""

    def __init__(self, call: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self._call = call
        self.raised: BaseException | None = None

    def run(self) -> None:
        try:
            self._call()
        except BaseException as error:  # kept for the test to look at
            self.raised = error


def _event() -> NewEvent:
    return NewEvent(uuid4(), uuid4(), 1, "space.created", b'{"x": 1}')


def _waiting(dsn: str, wait_event_type: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = %s",
                           [wait_event_type]).fetchone()
    assert row is not None
    assert row[0] > 0


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    """The server process ``pid`` neither answers nor acts on a cancel until the block ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_an_interrupted_append_waiting_on_a_lock_is_cancelled_and_the_store_goes_on(
        engines: Endpoints, pg_schema: str, event_store: PostgresEventStore) -> None:
    with psycopg.connect(engines.postgres_dsn) as other:
        other.execute(f'LOCK TABLE "{pg_schema}".{EVENTS_TABLE} IN EXCLUSIVE MODE')
        call = Call(lambda: event_store.append([_event()]))
        call.start()
        eventually_sync(lambda: _waiting(engines.postgres_dsn, "Lock"))
        event_store.interrupt()
        call.join(timeout=30)
        other.rollback()

    assert isinstance(call.raised, Interrupted), call.raised
    assert event_store.max_position() == 0  # cancelled before it committed
    assert len(event_store.append([_event()])) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="stops a PostgreSQL backend (needs root)")
def test_an_interrupted_call_the_server_never_answers_fails_once_its_connection_is_shut(
        engines: Endpoints) -> None:
    busy = BusyConnections()
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        call = Call(lambda: _tracked(busy, conn))
        with _stopped(pid):
            call.start()
            eventually_sync(lambda: _called(busy))
            busy.interrupt(cancel_wait=0.5)
            call.join(timeout=30)

        assert isinstance(call.raised, Interrupted), call.raised
        assert conn.broken


def _tracked(busy: BusyConnections, conn: psycopg.Connection[tuple[object, ...]]) -> None:
    with busy.track(conn):
        conn.execute("SELECT 1")


def _called(busy: BusyConnections) -> None:
    assert len(busy) == 1
