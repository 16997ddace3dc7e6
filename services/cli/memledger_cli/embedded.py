"""The embedded stack: real PostgreSQL and nats-server from pip wheels under ``MEMLEDGER_HOME``,
owned by this process (stopped with it, and replaced if a killed run left them behind)."""

import asyncio
import json
import logging
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from memledger_ingest.bootstrap import Endpoints
from memledger_platform.engines import EmbeddedNats, EmbeddedPostgres, parent_death_preexec
from memledger_platform.settings import Settings

log = logging.getLogger(__name__)

RUNTIME_FILE = "runtime.json"
"""Where a running ``memledger up`` tells operator commands how to reach its engines."""


@contextmanager
def engines(settings: Settings) -> Iterator[Endpoints]:
    """Start (or, in distributed mode, just name) the engines; stop what was started."""
    if settings.mode == "distributed":
        yield Endpoints(settings.postgres_dsn or "", settings.nats_url or "")
        return
    home = settings.home.expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    postgres = EmbeddedPostgres(home / "postgres", port=settings.postgres_port,
                                port_setting="MEMLEDGER_POSTGRES_PORT")
    nats = EmbeddedNats(home, port=settings.nats_port,
                        port_setting="MEMLEDGER_NATS_PORT")
    runtime = home / RUNTIME_FILE
    try:
        dsn = postgres.start().dsn
        url = nats.start()
        runtime.write_text(json.dumps({"pid": os.getpid(), "postgres_dsn": dsn,
                                       "nats_url": url}))
        yield Endpoints(dsn, url)
    finally:
        runtime.unlink(missing_ok=True)
        nats.stop()
        postgres.stop()


@contextmanager
def attach(settings: Settings) -> Iterator[Endpoints]:
    """The engines of a running ``memledger up`` (from ``$MEMLEDGER_HOME/runtime.json``), or,
    if none runs, embedded engines started for the duration: what operator commands use."""
    if settings.mode == "distributed":
        yield Endpoints(settings.postgres_dsn or "", settings.nats_url or "")
        return
    running = _running(settings.home.expanduser().resolve() / RUNTIME_FILE)
    if running is not None:
        yield running
        return
    with engines(settings) as started:
        yield started


def _running(runtime: Path) -> Endpoints | None:
    try:
        info = json.loads(runtime.read_text())
    except (OSError, ValueError):
        return None
    if not psutil.pid_exists(int(info.get("pid", 0))):
        return None
    return Endpoints(info["postgres_dsn"], info["nats_url"])


async def supervise(name: str, argv: list[str], env: dict[str, str], stop: asyncio.Event
                    ) -> None:
    """Keep a child process running until ``stop`` is set: restart it (after a pause) if it
    dies, then stop it with SIGTERM (SIGKILL after 20 s). The child gets SIGTERM if this
    process dies first, so it never outlives its supervisor."""
    while not stop.is_set():
        # Popen returns right after fork/exec; the preexec only calls prctl and getppid (no
        # locks), so it is safe although this process has threads.
        proc = subprocess.Popen(  # noqa: ASYNC220
            argv, env=env, preexec_fn=parent_death_preexec(signal.SIGTERM))  # noqa: PLW1509
        exited = asyncio.ensure_future(asyncio.to_thread(proc.wait))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if stop.is_set():
            await _terminate(proc, exited)
            return
        # Ctrl-C reaches the whole process group: the child may have stopped for it just
        # before ``stop`` is set here. The pause before a restart waits for that first.
        if await _stopping_within(stop, RESTART_PAUSE):
            return
        log.warning("%s exited with code %s; restarting it", name, proc.returncode)


RESTART_PAUSE = 1.0
"""Seconds between a supervised child's death and its restart."""


async def _stopping_within(stop: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def _terminate(proc: "subprocess.Popen[bytes]", exited: "asyncio.Future[int]") -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        await asyncio.wait_for(asyncio.shield(exited), 20.0)
    except TimeoutError:
        proc.kill()
        await exited
