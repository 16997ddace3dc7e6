"""How far the vector index has got, as query reads it: the position the vector projector
records in PostgreSQL, shared by every query process. Read at most every REFRESH_SECONDS for a
search (in the background while it is younger than STALE_SECONDS), polled while requests wait,
one lookup for all of them, and never going back."""

import asyncio

import pytest

from memledger_query.core import index_progress
from memledger_query.core.index_progress import IndexProgress
from tests.support import eventually


class Recorded:
    """The recorded position, and how often it was read."""

    def __init__(self, position: int = 0) -> None:
        self.position = position
        self.reads = 0

    def read(self) -> int:
        self.reads += 1
        return self.position


async def test_a_search_names_the_recorded_position_read_again_only_once_it_is_old(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_progress, "REFRESH_SECONDS", 3600.0)
    recorded = Recorded(12)
    progress = IndexProgress(recorded.read)
    assert await progress.reached() == 12
    recorded.position = 15
    assert await progress.reached() == 12  # fresh enough: not read again
    assert recorded.reads == 1
    monkeypatch.setattr(index_progress, "REFRESH_SECONDS", 0.0)
    monkeypatch.setattr(index_progress, "STALE_SECONDS", 0.0)
    assert await progress.reached() == 15


async def test_a_search_names_a_recent_position_at_once_and_reads_it_again_meanwhile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Younger than STALE_SECONDS, the known position is named without waiting for the
    database; the lookup it starts answers the next search."""
    monkeypatch.setattr(index_progress, "REFRESH_SECONDS", 0.0)
    monkeypatch.setattr(index_progress, "STALE_SECONDS", 3600.0)
    recorded = Recorded(12)
    progress = IndexProgress(recorded.read)
    assert await progress.wait_for(12, 0)
    recorded.position = 15
    assert await progress.reached() == 12  # not waited for
    await eventually(lambda: _polled(recorded, 2), interval=0.001)
    await eventually(lambda: _reached(progress, 15), interval=0.001)


async def test_a_failed_background_lookup_is_raised_by_the_search_that_waits_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_progress, "REFRESH_SECONDS", 0.0)
    monkeypatch.setattr(index_progress, "STALE_SECONDS", 3600.0)
    recorded = Recorded(4)
    progress = IndexProgress(recorded.read)
    assert await progress.wait_for(4, 0)

    def failing() -> int:
        recorded.reads += 1
        raise OSError("the database went away")

    progress._read = failing
    assert await progress.reached() == 4  # its lookup fails in the background
    await eventually(lambda: _polled(recorded, 2), interval=0.001)
    monkeypatch.setattr(index_progress, "STALE_SECONDS", 0.0)
    with pytest.raises(OSError, match="went away"):
        await progress.reached()


async def _reached(progress: IndexProgress, position: int) -> None:
    assert await progress.reached() == position


async def test_the_position_never_goes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_progress, "REFRESH_SECONDS", 0.0)
    monkeypatch.setattr(index_progress, "STALE_SECONDS", 0.0)
    recorded = Recorded(20)
    progress = IndexProgress(recorded.read)
    assert await progress.reached() == 20
    recorded.position = 5  # a restarted projector deriving again what it had written
    assert await progress.reached() == 20


async def test_a_wait_ends_once_the_position_is_recorded_and_times_out_otherwise() -> None:
    recorded = Recorded(3)
    progress = IndexProgress(recorded.read)
    assert not await progress.wait_for(8, 0.05)
    waiting = asyncio.create_task(progress.wait_for(8, 30.0))
    await eventually(lambda: _polled(recorded, 3), interval=0.001)
    assert not waiting.done()
    recorded.position = 8
    assert await waiting
    assert await progress.reached() == 8


async def test_requests_waiting_at_once_share_each_lookup() -> None:
    recorded = Recorded(0)
    progress = IndexProgress(recorded.read)
    waiters = [asyncio.create_task(progress.wait_for(50, 30.0)) for _ in range(40)]
    await eventually(lambda: _polled(recorded, 3), interval=0.001)
    polls = recorded.reads
    recorded.position = 50
    assert all(await asyncio.gather(*waiters))
    # forty waiters that each polled: one lookup for all of them each time
    assert polls < 40


async def _polled(recorded: Recorded, times: int) -> None:
    assert recorded.reads >= times


async def test_a_position_already_recorded_answers_at_once_even_with_no_time_to_wait() -> None:
    """``wait_ms: 0`` asks "is it there now?": the recorded position is read before the
    deadline counts."""
    recorded = Recorded(7)
    progress = IndexProgress(recorded.read)
    assert await progress.wait_for(7, 0)
    assert not await progress.wait_for(8, 0)


# --- woken by the vector projector's notices ------------------------------------------------

async def _listening(*, exact: bool = True) -> tuple[Recorded, IndexProgress]:
    """A progress at 3 as ``WrittenNotices.follow`` leaves it once listening: the first look
    reads what was announced before anyone listened."""
    recorded = Recorded(3)
    progress = IndexProgress(recorded.read, exact=exact)
    progress.heard(None)
    assert await progress.reached() == recorded.position
    return recorded, progress


async def test_a_notice_wakes_a_waiting_search_without_a_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_progress, "NOTICED_POLL_SECONDS", 3600.0)
    recorded, progress = await _listening()
    reads = recorded.reads
    waiting = asyncio.create_task(progress.wait_for(8, 30.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    progress.heard(8)  # announced, though ``read`` would still say 3
    assert await waiting
    assert recorded.reads == reads
    assert await progress.reached() == 8  # as fresh as a read: named without a look


async def test_a_lost_notice_is_covered_by_the_slow_poll(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_progress, "NOTICED_POLL_SECONDS", 0.01)
    recorded, progress = await _listening()
    waiting = asyncio.create_task(progress.wait_for(8, 30.0))
    recorded.position = 8  # recorded, its notice never heard
    assert await waiting


async def test_while_notices_are_heard_a_waiting_search_reads_only_at_the_slow_poll(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_progress, "NOTICED_POLL_SECONDS", 3600.0)
    recorded, progress = await _listening()
    reads = recorded.reads
    # Polling every POLL_SECONDS, as without notices, would read it ~20 times.
    assert not await progress.wait_for(8, 0.1)
    assert recorded.reads == reads


async def test_a_search_that_stops_hearing_notices_polls_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_progress, "NOTICED_POLL_SECONDS", 3600.0)
    recorded, progress = await _listening()
    waiting = asyncio.create_task(progress.wait_for(8, 30.0))
    await asyncio.sleep(0)
    progress.lost()  # wakes it: it polls every POLL_SECONDS from now on
    reads = recorded.reads
    await eventually(lambda: _polled(recorded, reads + 3), interval=0.001)
    recorded.position = 8
    assert await waiting


async def test_a_timed_out_wait_is_dropped_and_later_notices_read_nothing_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_progress, "NOTICED_POLL_SECONDS", 3600.0)
    recorded, progress = await _listening(exact=False)  # each notice makes a waiter read
    assert not await progress.wait_for(10**9, 0.02)
    reads = recorded.reads
    progress.heard(5)
    await asyncio.sleep(0.05)  # a window to show an absence: a waiter left behind would read
    assert recorded.reads == reads


async def test_a_partitions_notice_wakes_the_waiters_to_read_its_reach() -> None:
    """A partition's recorded position runs on through the log past what it wrote, so its
    notice is a lower bound: the waiter reads the reach at once."""
    recorded, progress = await _listening(exact=False)
    waiting = asyncio.create_task(progress.wait_for(9, 30.0))
    await asyncio.sleep(0)
    reads = recorded.reads
    recorded.position = 9  # written through 6, and the partition has nothing after it to 9
    progress.heard(6)
    assert await waiting
    assert recorded.reads > reads


async def test_notices_reach_the_progress_of_their_durable_only() -> None:
    mine, other = Recorded(0), Recorded(0)
    progress = {"vectors-a": IndexProgress(mine.read), "vectors-b": IndexProgress(other.read)}
    heard = index_progress.WrittenNotices(progress)
    heard.noticed(None)
    heard.noticed(written_notice_of("vectors-a", 12))
    heard.noticed("not a notice")  # anyone may send on the channel: ignored
    heard.noticed(written_notice_of("vectors-of-another-model", 40))
    assert await progress["vectors-a"].wait_for(12, 0)
    assert not await progress["vectors-b"].wait_for(1, 0)


def written_notice_of(durable: str, position: int) -> str:
    """What ``ConsumerPositions.record_written`` announces."""
    return f"{durable} {position}"
