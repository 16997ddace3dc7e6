"""``memledger up``'s supervision of its children: a child that died is started again, and one
that stopped for the same Ctrl-C as its supervisor is neither reported nor restarted."""

import asyncio
import logging
import sys
from pathlib import Path

import pytest

from memledger_cli import embedded
from tests.support import eventually

# Each start leaves a line; "exit" ends at once (as a child does on the terminal's SIGINT),
# "wait" runs until terminated.
_CHILD = "import sys; open(sys.argv[1], 'a').write('started\\n'); sys.argv[2] == 'wait' and " \
         "__import__('time').sleep(60)"


def _starts(record: Path) -> int:
    return len(record.read_text().splitlines()) if record.exists() else 0


async def _started(record: Path, times: int) -> None:
    async def check() -> None:
        assert _starts(record) >= times

    await eventually(check)


async def test_a_child_that_stopped_for_the_same_ctrl_c_is_not_restarted_nor_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    record, stop = tmp_path / "starts", asyncio.Event()
    argv = [sys.executable, "-c", _CHILD, str(record), "exit"]
    supervising = asyncio.create_task(embedded.supervise("relay", argv, {}, stop))
    await _started(record, 1)

    await asyncio.sleep(0.2)  # the case under test: the stop arrives after the child's exit
    stop.set()
    with caplog.at_level(logging.WARNING, logger=embedded.__name__):
        await asyncio.wait_for(supervising, 5)

    assert _starts(record) == 1
    assert "restarting" not in caplog.text


async def test_a_child_that_died_is_reported_and_started_again_then_stopped_with_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "RESTART_PAUSE", 0.1)
    record, stop = tmp_path / "starts", asyncio.Event()
    argv = [sys.executable, "-c", _CHILD, str(record), "exit"]
    with caplog.at_level(logging.WARNING, logger=embedded.__name__):
        supervising = asyncio.create_task(embedded.supervise("relay", argv, {}, stop))
        await _started(record, 3)
        stop.set()
        await asyncio.wait_for(supervising, 25)

    assert "relay exited with code 0; restarting it" in caplog.text


async def test_a_running_child_is_terminated_when_its_supervisor_stops(tmp_path: Path) -> None:
    record, stop = tmp_path / "starts", asyncio.Event()
    argv = [sys.executable, "-c", _CHILD, str(record), "wait"]
    supervising = asyncio.create_task(embedded.supervise("relay", argv, {}, stop))
    await _started(record, 1)

    stop.set()
    await asyncio.wait_for(supervising, 25)  # SIGTERM ends the sleeping child at once

    assert _starts(record) == 1
