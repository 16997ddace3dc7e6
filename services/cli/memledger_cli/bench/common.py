"""Shared bench plumbing: a scenario record, a private memledger server, percentiles, progress."""

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import httpx
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from memledger_cli.embedded import with_credentials
from memledger_platform.engines import NATS_ADMIN, parent_death_preexec
from memledger_platform.settings import Settings


@dataclass(frozen=True)
class Scenario:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Settings], int]


@dataclass(frozen=True)
class Server:
    url: str
    postgres_dsn: str
    nats_url: str
    home: str = ""
    """The server's data directory (its master key is there)."""
    pid: int = 0
    """The ``memledger up`` process (its services and engines are its descendants)."""


STARTS = 3
"""Starts of a private server tried: an engine's port, picked free by ``up``, may be taken by
another process before the engine binds it (``up`` then exits naming the port)."""

_ANNOUNCED = re.compile(r"^\s+(HTTP API|postgres|nats)\s+(\S+)", re.MULTILINE)
_READY = "Ctrl-C stops"


class _PortTaken(RuntimeError):
    """``up`` exited during start-up because a port it picked was taken meanwhile."""


@contextmanager
def private_server(extra_env: dict[str, str] | None = None) -> Iterator[Server]:
    """A fresh ``memledger up`` in its own process and data directory, so the load generator
    (this process) and the server do not share an interpreter, as with real clients. The
    server binds ports of its own choosing and the bench reads them from its banner: ports
    picked here could be taken by another server before it bound them, and the bench would
    then measure that one."""
    for attempt in range(1, STARTS + 1):
        try:
            with _private_server(extra_env) as server:
                yield server
            return
        except _PortTaken:
            if attempt == STARTS:
                raise


@contextmanager
def _private_server(extra_env: dict[str, str] | None) -> Iterator[Server]:
    # A file an exiting engine writes while the directory is removed must not lose the
    # measurement: what cannot be removed is left behind.
    with tempfile.TemporaryDirectory(prefix="memledger-bench-", ignore_cleanup_errors=True
                                     ) as home:
        env = {**_without_ports(os.environ), "MEMLEDGER_HOME": home,
               "MEMLEDGER_MODE": "embedded", "MEMLEDGER_LOG_FORMAT": "json",
               "MEMLEDGER_LOG_LEVEL": "warning", "MEMLEDGER_HTTP_PORT": "0",
               "MEMLEDGER_GRPC_PORT": "0", **(extra_env or {})}
        log_path = Path(home) / "server.log"
        with log_path.open("wb") as log:
            proc = spawn([sys.executable, "-m", "memledger_cli", "up"], env, log)
            try:
                announced = _announced(proc, log_path)
                url = announced["HTTP API"]
                _wait_healthy(url, proc, log_path)
                engines = with_credentials(  # the bench is the owner: it logs in as the admin
                    Path(home), f"postgresql://postgres@127.0.0.1:"
                    f"{_port(announced['postgres'])}/memledger",
                    f"nats://127.0.0.1:{_port(announced['nats'])}")
                yield Server(url, engines.postgres_dsn, engines.nats_url(NATS_ADMIN), home,
                             proc.pid)
            except _PortTaken:
                raise
            except Exception:
                # The server's data directory goes with it: its last words go to the terminal.
                print(f"memledger bench: the server's log ended with:\n"
                      f"{log_path.read_text(errors='replace')[-4000:]}", file=sys.stderr)
                raise
            finally:
                _stop(proc, log_path)


def spawn(argv: list[str], env: dict[str, str], log: IO[bytes]) -> "subprocess.Popen[bytes]":
    """``argv`` started with its output in ``log``, and told to stop (SIGTERM) when this
    process ends, even by a signal that runs no ``finally``: a bench killed while it measures
    leaves no server running (its engines and services stop with it)."""
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=parent_death_preexec(signal.SIGTERM))  # noqa: PLW1509


def _without_ports(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without the port settings a user's own server may use."""
    return {k: v for k, v in environ.items()
            if not (k.startswith("MEMLEDGER_") and k.endswith("_PORT"))}


def _announced(proc: "subprocess.Popen[bytes]", log_path: Path) -> dict[str, str]:
    """The addresses ``up`` printed in its banner, once it printed it."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if _READY in text:
            return dict(_ANNOUNCED.findall(text))
        if proc.poll() is not None:
            if "already in use" in text:
                raise _PortTaken(text[-3000:])
            raise RuntimeError(f"memledger exited during start-up:\n{text[-3000:]}")
        time.sleep(0.1)
    raise RuntimeError(f"memledger did not start:\n{log_path.read_text()[-3000:]}")


def _port(address: str) -> int:
    port = urlsplit(address).port
    assert port is not None, address
    return port


def _stop(proc: "subprocess.Popen[bytes]", log_path: Path) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:  # measured already: say so, and go on
        print(f"memledger bench: the server had not stopped 60 s after SIGTERM "
              f"and was killed; its log ended with:\n"
              f"{log_path.read_text(errors='replace')[-4000:]}", file=sys.stderr)
        proc.kill()
        proc.wait()


def _wait_healthy(url: str, proc: "subprocess.Popen[bytes]", log_path: Path) -> None:
    deadline = time.monotonic() + 90
    with httpx.Client(timeout=1) as client:  # one for every poll: each new one loads CA files
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("memledger exited during start-up:\n"
                                   f"{log_path.read_text()[-3000:]}")
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    raise RuntimeError(f"memledger did not become healthy:\n{log_path.read_text()[-3000:]}")


def wait_relayed(url: str, timeout: float = 120.0) -> float:
    """Seconds until the relay has published everything committed so far."""
    start = time.monotonic()
    with httpx.Client(timeout=5) as client:  # one for every poll, as in _wait_healthy
        while time.monotonic() - start < timeout:
            health = client.get(f"{url}/health").json()
            if health["relay_lag"] == 0:
                return time.monotonic() - start
            time.sleep(0.05)
    raise RuntimeError(f"relay still {health['relay_lag']} events behind after {timeout}s")


def wait_projected(url: str, timeout: float = 300.0, quiet: float = 1.0) -> float:
    """Seconds until the read models have everything committed and nothing more is committed
    for ``quiet`` seconds (the enricher's embeddings are commits too: its work is then done)."""
    start, last, since = time.monotonic(), -1, time.monotonic()
    with httpx.Client(timeout=5) as client:  # one for every poll, as in _wait_healthy
        while time.monotonic() - start < timeout:
            committed = int(client.get(f"{url}/health").json()["position"])
            projected = client.get(f"{url}/v1/query/health").json()["projected_position"]
            if committed != last:
                last, since = committed, time.monotonic()
            elif projected is not None and int(projected) >= committed and (
                    time.monotonic() - since) >= quiet:
                return time.monotonic() - start
            time.sleep(0.1)
    raise RuntimeError(f"the read models were still behind position {last} after {timeout}s")


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


class Steps:
    """Progress of a bench's phases on a terminal (stderr); silent otherwise."""

    def __init__(self, total: int) -> None:
        self._progress: Progress | None = None
        if sys.stderr.isatty():
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TimeElapsedColumn(), transient=True)
            self._task = self._progress.add_task("starting", total=total)

    def __enter__(self) -> "Steps":
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def step(self, description: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=description, advance=1)
        else:
            print(f"bench: {description}", file=sys.stderr, flush=True)


def measured(measure: Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]
             ) -> Callable[[argparse.Namespace, Settings], int]:
    """A scenario's ``run``: measure (asynchronously), then print the result."""
    def run(args: argparse.Namespace, settings: Settings) -> int:
        emit(asyncio.run(measure(args)), args.json)
        return 0

    return run


def emit(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
        return
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
