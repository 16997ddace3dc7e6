"""`memledger up`: starts the whole embedded stack, answers, stops cleanly, keeps data."""

import asyncio
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import nats
import orjson
import psutil
import pytest

from memledger_cli.up import CHILDREN
from memledger_platform.engines import free_port
from memledger_schemas.subjects import HDR_REPLY_TO, Subjects
from tests.e2e.conftest import Running, engine_processes, start
from tests.support import eventually_sync, probe

WAIT_MS = 30_000
"""Reads wait this long for their position: on a loaded machine projection can lag seconds."""


def _write_fact(url: str, content: str, space: str = "demo") -> dict[str, object]:
    httpx.post(f"{url}/v1/spaces", json={"space_id": space}, timeout=10)
    response = httpx.post(f"{url}/v1/spaces/{space}/memories",
                          json={"kind": "fact", "content": content}, timeout=10)
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def test_up_runs_every_service_but_ingest_and_query_as_a_child_process(memledger: Running
                                                                      ) -> None:
    commands = [" ".join(child.cmdline()) for child in
                psutil.Process(memledger.proc.pid).children()]
    assert set(CHILDREN) == {"relay", "projector", "vectors", "enricher", "lifecycle"}
    for service in CHILDREN:
        assert any(c.endswith(f"memledger_cli {service}") for c in commands), service


def test_the_vectors_service_owns_the_index_process_which_serves_its_owner_only(
        memledger: Running) -> None:
    vectors = next(child for child in psutil.Process(memledger.proc.pid).children()
                   if " ".join(child.cmdline()).endswith("memledger_cli vectors"))

    def serving() -> None:
        index = [c for c in vectors.children() if "memledger_platform.vectorindex.process"
                 in " ".join(c.cmdline())]
        assert len(index) == 1
        socket_path = Path(index[0].cmdline()[-1])
        assert socket_path.is_socket()
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600

    eventually_sync(serving, timeout=60)


def test_a_write_is_found_by_meaning_through_the_public_api(memledger: Running, space: str
                                                            ) -> None:
    written = _write_fact(memledger.url, "The quarterly report is due on Friday", space)
    _write_fact(memledger.url, "Penguins live in the southern hemisphere", space)

    def found() -> None:
        response = probe().post(f"{memledger.url}/v1/search", json={
            "query": "deadline for submitting the financial summary", "mode": "execution",
            "spaces": [space],
            "weights": {"dense": 1.0, "keyword": 0.0}, "threshold": 0.3,
            "min_position": written["position"]}, timeout=10)
        assert response.status_code == 200, response.text  # 503 until projected: retried
        answer = response.json()
        assert [h["content"] for h in answer["results"]] == [
            "The quarterly report is due on Friday"]

    eventually_sync(found, timeout=60)


def test_an_audited_search_is_recorded_and_replays_through_the_public_api(
        fresh_memledger: Running) -> None:
    # A server of its own: the answer, found by its words before the enricher embeds the
    # write, depends on what else the index holds.
    memledger = fresh_memledger
    written = _write_fact(memledger.url, "The quarterly report is due on Friday")
    body = {"query": "quarterly report", "audit": True, "min_position": written["position"],
            "wait_ms": WAIT_MS}
    answer = httpx.post(f"{memledger.url}/v1/search", json=body, timeout=40).json()
    retrieval = f"{memledger.url}/v1/retrievals/{answer['retrieval_id']}"
    record = httpx.get(retrieval, params={"min_position": answer["retrieval_position"],
                                          "wait_ms": WAIT_MS}, timeout=40).json()
    replay = httpx.post(f"{retrieval}/replay", timeout=30).json()
    assert [r["ref"] for r in record["results"]] == [h["item_id"] for h in answer["results"]]
    assert (record["query"], record["basis"]) == ("quarterly report", answer["basis"])
    assert replay["same"], replay["differences"]


def test_up_prints_where_it_listens_and_a_curl_example(memledger: Running) -> None:
    text = "".join(memledger.output)
    assert memledger.url.startswith("http://127.0.0.1:")
    assert f"curl -s -X POST {memledger.url}/v1/spaces" in text
    assert httpx.get(f"{memledger.url}/health").json()["status"] == "ok"


def test_a_write_is_relayed_to_jetstream(memledger: Running, space: str) -> None:
    position = _write_fact(memledger.url, "The sky is blue", space)["position"]

    def relayed() -> None:
        health = probe().get(f"{memledger.url}/health").json()
        assert health["relayed_position"] >= position

    eventually_sync(relayed)


def test_sigterm_stops_every_engine_and_a_restart_keeps_the_data(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = start(home)
    eventually_sync(lambda: _healthy(first), timeout=30)
    written = _write_fact(first.url, "kept across restarts")
    assert first.stop(signal.SIGTERM) == 0
    assert engine_processes(home) == []
    second = start(home)
    try:
        eventually_sync(lambda: _healthy(second), timeout=30)
        _assert_kept(second, written, "kept across restarts")
    finally:
        assert second.stop(signal.SIGINT) == 0
    assert engine_processes(home) == []


def test_a_killed_run_leaves_engines_that_the_next_start_replaces(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = start(home)
    eventually_sync(lambda: _healthy(first), timeout=30)
    written = _write_fact(first.url, "survives a kill -9")
    first.proc.kill()
    first.proc.wait()
    second = start(home)
    try:
        eventually_sync(lambda: _healthy(second), timeout=30)
        _assert_kept(second, written, "survives a kill -9")
    finally:
        second.stop()
    eventually_sync(lambda: _no_engines(home), timeout=20)


@pytest.mark.parametrize("setting", ["MEMLEDGER_HTTP_PORT", "MEMLEDGER_GRPC_PORT"])
def test_a_busy_port_is_reported_naming_the_setting_before_any_engine_starts(
        tmp_path: Path, setting: str) -> None:
    busy = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", busy))
        holder.listen()
        env = {**os.environ, "MEMLEDGER_HOME": str(tmp_path / "home"), setting: str(busy)}
        result = subprocess.run([sys.executable, "-m", "memledger_cli", "up"], env=env,
                                capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert setting in result.stderr
    assert engine_processes(tmp_path / "home") == []
    assert not (tmp_path / "home" / "postgres").exists()  # failed before starting one


def test_an_invalid_setting_fails_at_start_naming_the_variable(tmp_path: Path) -> None:
    env = {**os.environ, "MEMLEDGER_HOME": str(tmp_path), "MEMLEDGER_NATS_PORT": "not-a-port"}
    result = subprocess.run([sys.executable, "-m", "memledger_cli", "up"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "MEMLEDGER_NATS_PORT" in result.stderr


def test_nats_intake_answers_a_command_like_http_does(memledger: Running) -> None:
    async def scenario() -> dict[str, object]:
        nc = await nats.connect(memledger.nats_url)
        js = nc.jetstream()
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        subjects = Subjects()
        await js.publish(subjects.intake("default", "create_space"),
                         orjson.dumps({"space_id": "via-nats"}), headers={HDR_REPLY_TO: inbox})
        await sub.next_msg(timeout=10)
        await js.publish(subjects.intake("default", "assert_memory"), orjson.dumps(
            {"space_id": "via-nats", "kind": "preference", "content": "I prefer tea"}),
            headers={HDR_REPLY_TO: inbox})
        reply: dict[str, object] = orjson.loads((await sub.next_msg(timeout=10)).data)
        await nc.close()
        return reply

    reply = asyncio.run(scenario())
    assert reply["command"] == "assert_memory"
    assert isinstance(reply["position"], int)


def _healthy(running: Running) -> None:
    assert probe().get(f"{running.url}/health", timeout=2).status_code == 200


def _assert_kept(running: Running, written: dict[str, object], content: str) -> None:
    """The write is still there, as of its own position, after a restart.

    The log may have grown meanwhile (the enricher embeds the item when it gets to it, before
    or after the stop), so the check is the item as of the write, not the log's length. The
    read waits up to 30 s for the projector, which has just started too: on a busy CI machine
    it had not applied the first event within the default 2 s.
    """
    position = int(str(written["position"]))
    item = written["ids"]["item_id"]  # type: ignore[index]
    assert httpx.get(f"{running.url}/health").json()["position"] >= position
    kept = httpx.get(f"{running.url}/v1/spaces/demo/items/{item}",
                     params={"as_of_position": position, "min_position": position,
                             "wait_ms": 30_000}, timeout=40)
    assert kept.status_code == 200, kept.text
    assert kept.json()["item"]["content"] == content


def _no_engines(home: Path) -> None:
    assert engine_processes(home) == []


def test_a_write_is_readable_at_once_with_min_position_and_as_of(memledger: Running, space: str
                                                                ) -> None:
    written = _write_fact(memledger.url, "Alice works at Acme", space)
    item = written["ids"]["item_id"]  # type: ignore[index]
    url = f"{memledger.url}/v1/spaces/{space}/items/{item}"
    position = int(str(written["position"]))
    now = httpx.get(url, params={"min_position": position, "wait_ms": WAIT_MS},
                    timeout=40).json()
    assert now["item"]["content"] == "Alice works at Acme"
    before = httpx.get(url, params={"as_of_position": position - 1})
    assert before.status_code == 404
    again = httpx.get(url, params={"as_of_position": now["basis"]["position"],
                                   "valid_at": now["basis"]["valid_at"]}).json()
    assert again == now


def test_replay_exports_ndjson_and_rebuild_switches_versions(memledger: Running, space: str
                                                            ) -> None:
    _write_fact(memledger.url, "exported", space)
    env = {**os.environ, "MEMLEDGER_HOME": str(memledger.home)}
    exported = subprocess.run([sys.executable, "-m", "memledger_cli", "replay", "--type",
                               "memory.asserted", "--space", space], env=env,
                              capture_output=True, timeout=60, check=True)
    lines = [orjson.loads(line) for line in exported.stdout.splitlines()]
    assert [e["payload"]["content"] for e in lines] == ["exported"]
    rebuilt = subprocess.run([sys.executable, "-m", "memledger_cli", "rebuild", "postgres"],
                             env=env, capture_output=True, timeout=120, check=True)
    assert orjson.loads(rebuilt.stdout)["version"] == 2
    listed = httpx.get(f"{memledger.url}/v1/spaces/{space}/items").json()
    assert [i["content"] for i in listed["items"]] == ["exported"]
