"""`memledger status` against a real `memledger up`: after writes, every lag reaches zero and
every durable consumer is listed; dead letters are counted per subject; without a running
`memledger up` it says so and starts nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import nats

from tests.e2e.conftest import Running
from tests.support import eventually, eventually_sync


def _status(home: Path, *args: str) -> "subprocess.CompletedProcess[str]":
    env = {**os.environ, "MEMLEDGER_HOME": str(home), "MEMLEDGER_MODE": "embedded"}
    return subprocess.run([sys.executable, "-m", "memledger_cli", "status", *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def _status_json(home: Path) -> dict[str, Any]:
    result = _status(home, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _write(url: str, contents: list[str], space: str) -> int:
    httpx.post(f"{url}/v1/spaces", json={"space_id": space}, timeout=10)
    position = 0
    for content in contents:
        response = httpx.post(f"{url}/v1/spaces/{space}/memories",
                              json={"kind": "fact", "content": content}, timeout=10)
        assert response.status_code == 201, response.text
        position = response.json()["position"]
    return position


def _caught_up(home: Path, written: int) -> dict[str, Any]:
    """The status once it has every write and reports nothing behind."""
    def check() -> dict[str, Any]:
        status = _status_json(home)
        assert status["committed_position"] >= written
        assert status["caught_up"], status
        # The enricher subscribes once its model is loaded (later than the others, niced):
        # until then there is no consumer of its to be behind.
        assert any(c["name"].startswith("enricher") for c in status["consumers"]), status
        return status

    return eventually_sync(check, timeout=120, interval=1.0)


def test_status_reports_zero_lag_and_every_consumer_after_writes(memledger: Running,
                                                                 space: str) -> None:
    letters = _status_json(memledger.home)["dead_letters"]
    written = _write(memledger.url, ["The sky is blue", "Grass is green", "Snow is white"],
                     space)
    status = _caught_up(memledger.home, written)
    assert status["relay"]["lag"] == 0
    assert status["relay"]["relayed_position"] == status["committed_position"]
    assert {(p["name"], p["lag"]) for p in status["projections"]} == {
        ("postgres", 0), ("vectors", 0)}
    names = {(c["stream"], c["name"].split("-")[0]) for c in status["consumers"]}
    assert names == {("MEMLEDGER_EVENTS", "projector"), ("MEMLEDGER_EVENTS", "enricher"),
                     ("MEMLEDGER_EVENTS", "lifecycle"), ("MEMLEDGER_EVENTS", "forming"),
                     ("MEMLEDGER_INTAKE", "ingest")}
    assert {c["name"] for c in status["consumers"]} >= {"projector-postgres", "ingest-intake"}
    assert all(c["pending"] == 0 and c["ack_pending"] == 0 for c in status["consumers"])
    assert letters["stream"] == "MEMLEDGER_DLQ"
    assert status["dead_letters"] == letters  # the writes added none


def test_status_prints_plain_lines_when_not_on_a_terminal(memledger: Running, space: str
                                                          ) -> None:
    _caught_up(memledger.home, _write(memledger.url, ["Water boils at 100 degrees at sea level"],
                                      space))
    lines = _status(memledger.home).stdout.splitlines()
    assert any(line.startswith("relay: stream=MEMLEDGER_EVENTS ") and line.endswith(" lag=0")
               for line in lines), lines
    assert any(line.startswith("consumer MEMLEDGER_EVENTS/projector-postgres: pending=0 ")
               for line in lines), lines
    assert lines[-1] == "caught up: yes"


async def test_status_counts_dead_letters_per_subject(memledger: Running) -> None:
    before = _status_json(memledger.home)["dead_letters"]
    subject = "memledger.dlq.intake.default"
    nc = await nats.connect(memledger.nats_url)
    try:
        js = nc.jetstream()
        await js.publish("memledger.in.default.assert_memory", b"{not json")
        await js.publish("memledger.in.default.assert_memory", b'{"kind": "fact"}')
    finally:
        await nc.close()

    async def counted() -> None:
        letters = _status_json(memledger.home)["dead_letters"]
        assert letters["by_subject"] == {**before["by_subject"],
                                         subject: before["by_subject"].get(subject, 0) + 2}
        assert letters["total"] == before["total"] + 2

    await eventually(counted, timeout=60, interval=1.0)


def test_status_without_a_running_memledger_up_says_so_and_starts_nothing(tmp_path: Path
                                                                         ) -> None:
    home = tmp_path / "home"
    result = _status(home, "--json")
    assert result.returncode == 1
    assert "no running `memledger up`" in result.stderr
    assert result.stdout == ""
    assert not home.exists()
