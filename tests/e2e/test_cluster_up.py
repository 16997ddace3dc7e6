"""`memledger cluster up`: every service its own process, replicas of ingest and query, the
addresses printed; a write through one ingest replica is read through each query replica; the
operator env file runs ``memledger verify``; SIGTERM stops every process it started."""

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support import eventually_sync

WAIT_MS = 20_000


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _command(process: psutil.Process) -> str:
    """Its command line; empty for one that ended meanwhile (a PostgreSQL backend whose
    connection closed is a zombie until the postmaster reaps it)."""
    try:
        return " ".join(process.cmdline())
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return ""


def _operator_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line)
    return {**os.environ, **{name: value.strip("'") for name, value in pairs}}


@pytest.mark.timeout(600)
def test_cluster_up_runs_replicas_of_ingest_and_query_and_stops_them_all(tmp_path: Path) -> None:
    env = {**os.environ, "MEMLEDGER_HOME": str(tmp_path / "home"), "MEMLEDGER_EMBEDDER":
           "hashing", "MEMLEDGER_LOG_LEVEL": "warning"}
    proc = subprocess.Popen([sys.executable, "-m", "memledger_cli", "cluster", "up",
                             "--ingest", "2", "--query", "2"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        eventually_sync(lambda: _asserted("Ctrl-C stops" in "".join(lines), proc), timeout=300,
                        interval=0.5)
        banner = "".join(lines)
        urls = dict(re.findall(r"^  ((?:ingest|query)(?:-\d)?) +(http://[\d.:]+)", banner,
                               re.MULTILINE))
        assert sorted(urls) == ["ingest", "ingest-1", "query", "query-1"], banner
        assert banner.count("  nats       nats://") == 3, banner
        services = {command.rsplit(" ", 1)[-1] for c in _children(proc.pid)
                    if (command := _command(c))}
        assert {"relay", "projector", "vectors", "enricher", "ingest", "query"} <= services

        httpx.post(f"{urls['ingest-1']}/v1/spaces", json={"space_id": "demo"}, timeout=30)
        written = httpx.post(f"{urls['ingest']}/v1/spaces/demo/memories", timeout=30,
                             json={"kind": "fact", "content": "The pump hums at noon"})
        assert written.status_code == 201, written.text
        item, position = written.json()["ids"]["item_id"], written.json()["position"]
        for replica in ("query", "query-1"):
            read = httpx.get(f"{urls[replica]}/v1/spaces/demo/items/{item}", timeout=60,
                             params={"min_position": position, "wait_ms": WAIT_MS})
            assert read.status_code == 200, read.text
            assert read.json()["item"]["content"] == "The pump hums at noon"

        env_file = Path(re.findall(r"\. (\S+operator\.env)", banner)[0])
        verified = subprocess.run([sys.executable, "-m", "memledger_cli", "verify"],
                                  env=_operator_env(env_file), capture_output=True, text=True,
                                  timeout=300, check=False)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        started = _children(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=180)
    assert code == 0
    assert not env_file.exists()
    assert [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


def _asserted(holds: bool, proc: "subprocess.Popen[str]") -> None:
    assert proc.poll() is None, f"cluster up exited with {proc.returncode}"
    assert holds
