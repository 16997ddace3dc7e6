"""End-to-end: the real `memledger up` in its own process, used only through its public
interfaces (CLI output, HTTP, NATS subjects)."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.support import eventually_sync, probe


@dataclass
class Running:
    proc: "subprocess.Popen[str]"
    home: Path
    url: str
    nats_url: str
    output: list[str]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


def engine_processes(home: Path) -> list[psutil.Process]:
    """Processes still running for this data directory: postgres and nats-server (named in
    their command lines) and memledger's own children, such as the relay (by environment)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(home) in cmdline or _home_of(proc) == str(home):
            found.append(proc)
    return found


def _home_of(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get("MEMLEDGER_HOME")
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


def start(home: Path, **env: str) -> Running:
    # Ports the server binds itself (0) and announces: a port picked here could be taken by
    # another worker's server first, and the test would talk to that one. Its engines' ports
    # are left to it too (unset: it picks free ones).
    ports = {"MEMLEDGER_HTTP_PORT": "0", "MEMLEDGER_GRPC_PORT": "0"}
    full_env = {**os.environ, "MEMLEDGER_HOME": str(home), "MEMLEDGER_LOG_FORMAT": "json",
                **ports, **env}
    proc = subprocess.Popen([sys.executable, "-m", "memledger_cli", "up"], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        output.append(line)
        if "Ctrl-C stops" in line:
            break
    else:
        raise AssertionError("memledger up exited before it was ready:\n" + "".join(output))
    # Keep reading, as a terminal would: a full pipe would block every log line of the
    # service and of the children that share its output.
    threading.Thread(target=output.extend, args=(proc.stdout,), daemon=True).start()
    text = "".join(output)
    url = re.search(r"HTTP API\s+(http://\S+)", text)
    nats_url = re.search(r"nats\s+(nats://\S+)", text)
    assert url, text
    assert nats_url, text
    return Running(proc, home, url.group(1), with_password(nats_url.group(1), home), output)


def with_password(nats_url: str, home: Path) -> str:
    """The banner's NATS URL (its password masked) with the password kept in the home."""
    user = re.match(r"nats://(\w+):\*\*\*@", nats_url)
    assert user, nats_url
    password = nats_passwords(home)[user.group(1)]
    return nats_url.replace(":***@", f":{password}@")


def nats_passwords(home: Path) -> dict[str, str]:
    passwords: dict[str, str] = json.loads((home / "nats" / "passwords.json").read_text())
    return passwords


@contextmanager
def started(home: Path, **env: str) -> Iterator[Running]:
    """``memledger up`` in ``home``, answering ``/health``; stopped afterwards if it still runs."""
    running = start(home, **env)
    try:
        eventually_sync(lambda: _assert_healthy(running.url), timeout=30)
        yield running
    finally:
        if running.proc.poll() is None:
            running.stop()


@pytest.fixture(scope="module")
def memledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One ``memledger up`` for a module's tests (a start is most of an e2e test's time): each
    test writes into a space of its own (``space``)."""
    with started(tmp_path_factory.mktemp("up") / "home") as running:
        yield running


@pytest.fixture
def fresh_memledger(tmp_path: Path) -> Iterator[Running]:
    """A ``memledger up`` of this test's own, for one that reads the whole log or index."""
    with started(tmp_path / "home") as running:
        yield running


@pytest.fixture
def space() -> str:
    """A space name of this test's own."""
    return f"s{uuid.uuid4().hex[:12]}"


def _assert_healthy(url: str) -> None:
    assert probe().get(f"{url}/health", timeout=2).status_code == 200
