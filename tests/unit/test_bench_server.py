"""How a bench finds its private server: the addresses ``up`` announces (never ports picked
beforehand, which another server may take first), and a start retried when a port ``up``
picked was taken meanwhile."""

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from memledger_cli.bench import common
from memledger_cli.bench.common import Server

BANNER = """
memledger is up (embedded)
  HTTP API   http://127.0.0.1:40001   (GET http://127.0.0.1:40001/health, OpenAPI at ...)
  gRPC API   127.0.0.1:40002   (memledger.v1.Ingest and .Query: schemas/proto/memledger/v1)
  postgres   postgresql://memledger:***@127.0.0.1:40003/memledger   (password in /x)
  nats       nats://memledger:***@127.0.0.1:40004   (passwords in /x)
Ctrl-C stops memledger and its engines.
"""


def _up(log_path: Path, says: str, code: int | None) -> "subprocess.Popen[bytes]":
    """A stand-in for ``memledger up`` that writes ``says`` to its log, then exits with
    ``code`` or (``None``) keeps running."""
    script = (f"import sys, time; print({says!r}, flush=True); "
              + ("time.sleep(60)" if code is None else f"sys.exit({code})"))
    with log_path.open("wb") as log:
        return subprocess.Popen([sys.executable, "-c", script], stdout=log,
                                stderr=subprocess.STDOUT)


def test_the_addresses_are_read_from_the_banner_of_the_server_started(tmp_path: Path) -> None:
    proc = _up(tmp_path / "server.log", BANNER, None)
    try:
        announced = common._announced(proc, tmp_path / "server.log")
    finally:
        proc.kill()
        proc.wait()
    assert announced["HTTP API"] == "http://127.0.0.1:40001"
    assert common._port(announced["postgres"]) == 40003
    assert common._port(announced["nats"]) == 40004


def test_a_start_that_lost_a_port_is_told_apart_from_one_that_failed(tmp_path: Path) -> None:
    taken = _up(tmp_path / "taken.log", "could not bind: Address already in use", 1)
    taken.wait()
    with pytest.raises(common._PortTaken):
        common._announced(taken, tmp_path / "taken.log")
    broken = _up(tmp_path / "broken.log", "no such setting: MEMLEDGER_X", 2)
    broken.wait()
    with pytest.raises(RuntimeError) as failed:
        common._announced(broken, tmp_path / "broken.log")
    assert "exited during start-up" in str(failed.value)
    assert "MEMLEDGER_X" in str(failed.value)


def test_a_start_whose_port_was_taken_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    tries: list[int] = []

    @contextmanager
    def starts(_: dict[str, str] | None) -> Iterator[Server]:
        tries.append(1)
        if len(tries) < common.STARTS:
            raise common._PortTaken("port taken")
        yield Server("http://127.0.0.1:1", "postgresql://x", "nats://x")

    monkeypatch.setattr(common, "_private_server", starts)
    with common.private_server() as server:
        assert server.url == "http://127.0.0.1:1"
    assert len(tries) == common.STARTS


def test_after_every_start_lost_a_port_the_bench_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextmanager
    def starts(_: dict[str, str] | None) -> Iterator[Server]:
        raise common._PortTaken("port taken")
        yield  # a generator, as the real one

    monkeypatch.setattr(common, "_private_server", starts)
    with pytest.raises(common._PortTaken), common.private_server():
        pass


def test_the_users_port_settings_are_not_passed_to_the_private_server() -> None:
    kept = common._without_ports({"MEMLEDGER_HTTP_PORT": "8420", "MEMLEDGER_NATS_PORT": "4222",
                                  "MEMLEDGER_EMBEDDER": "local", "PATH": "/bin"})
    assert kept == {"MEMLEDGER_EMBEDDER": "local", "PATH": "/bin"}


def test_a_bench_killed_by_a_signal_leaves_no_server_running(tmp_path: Path) -> None:
    # The bench (here a stand-in) starts its server, says its pid, then is killed: SIGKILL
    # runs no ``finally``, so only the parent-death signal can stop the server.
    bench = ("import sys, time\n"
             "from pathlib import Path\n"
             "from memledger_cli.bench.common import spawn\n"
             f"log = Path({str(tmp_path / 'server.log')!r}).open('wb')\n"
             "server = spawn([sys.executable, '-c', 'import time; time.sleep(120)'], {}, log)\n"
             "print(server.pid, flush=True)\n"
             "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", bench], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        server = psutil.Process(int(proc.stdout.readline()))
        assert server.is_running()
    finally:
        proc.kill()
        proc.wait()
    server.wait(timeout=30)  # psutil.TimeoutExpired if it is still running
