"""The embedded stack: real PostgreSQL and nats-server from pip wheels under ``MEMLEDGER_HOME``,
owned by this process (stopped with it, and replaced if a killed run left them behind)."""

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import psutil

from memledger_platform.endpoints import Endpoints
from memledger_platform.engines import (
    NATS_ADMIN,
    EmbeddedNats,
    EmbeddedPostgres,
    make_private,
    parent_death_preexec,
    stored_password,
    stored_passwords,
    user_url,
)
from memledger_platform.engines.credentials import write_private
from memledger_platform.nats_permissions import embedded_users
from memledger_platform.settings import Settings

log = logging.getLogger(__name__)

RUNTIME_FILE = "runtime.json"
"""Where a running ``memledger up`` tells operator commands how to reach its engines (the
addresses only: the passwords stay in the engines' own files)."""


@dataclass(frozen=True)
class Engines:
    """Where the engines are, and how each user logs in to NATS."""

    postgres_dsn: str
    """With the password."""
    nats_address: str
    """Embedded: ``nats://127.0.0.1:<port>``; distributed: the settings' URL, as given."""
    nats_passwords: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Embedded: each NATS user's password; distributed: none (one URL for every user)."""

    def nats_url(self, user: str) -> str:
        """The URL ``user`` connects with (its name and password in it)."""
        password = self.nats_passwords.get(user)
        return self.nats_address if password is None else user_url(
            self.nats_address, user, password)

    def endpoints(self, nats_user: str) -> Endpoints:
        """PostgreSQL, and NATS as ``nats_user``."""
        return Endpoints(self.postgres_dsn, self.nats_url(nats_user))


def child_argv(command: str) -> list[str]:
    """How ``memledger up`` and ``memledger cluster up`` start a service's process."""
    argv = [sys.executable, "-m", "memledger_cli", command]
    # Embedding is the heaviest work and the least urgent: on a small machine it must yield
    # the cores to writes and projections (searchable later, never a write held up).
    return ["nice", "-n", "10", *argv] if command == "enricher" and shutil.which("nice") else argv


@contextmanager
def engines(settings: Settings) -> Iterator[Engines]:
    """Start (or, in distributed mode, just name) the engines; stop what was started."""
    if settings.mode == "distributed":
        yield Engines(settings.postgres_dsn or "", settings.nats_url or "")
        return
    home = private_home(settings)
    postgres = EmbeddedPostgres(home / "postgres", port=settings.postgres_port,
                                port_setting="MEMLEDGER_POSTGRES_PORT")
    nats = EmbeddedNats(home, port=settings.nats_port, port_setting="MEMLEDGER_NATS_PORT",
                        users=embedded_users(settings.subjects))
    runtime = home / RUNTIME_FILE
    try:
        postgres_endpoint = postgres.start()
        nats.start()
        nats_address = nats.address or ""
        write_private(runtime, json.dumps({"pid": os.getpid(),
                                           "postgres_dsn": postgres_endpoint.public_dsn,
                                           "nats_url": nats_address}))
        yield Engines(postgres_endpoint.dsn, nats_address, stored_passwords(home))
    finally:
        runtime.unlink(missing_ok=True)
        nats.stop()
        postgres.stop()


def private_home(settings: Settings) -> Path:
    """The data directory, made (or made again) its owner's only, as is everything this process
    and its children write from now on: it holds plaintext, keys and the engines' passwords."""
    os.umask(0o077)
    home = settings.home.expanduser().resolve()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    make_private(home)
    return home


@contextmanager
def attach(settings: Settings, nats_user: str = NATS_ADMIN) -> Iterator[Endpoints]:
    """The engines of a running ``memledger up`` (from ``$MEMLEDGER_HOME/runtime.json``), or,
    if none runs, embedded engines started for the duration, with NATS as ``nats_user``: what
    operator commands use."""
    if settings.mode == "distributed":
        yield Endpoints(settings.postgres_dsn or "", settings.nats_url or "")
        return
    found = running(settings)
    if found is not None:
        yield found.endpoints(nats_user)
        return
    with engines(settings) as started:
        yield started.endpoints(nats_user)


def running(settings: Settings) -> Engines | None:
    """The engines of the ``memledger up`` running on the settings' home, if one is."""
    home = settings.home.expanduser().resolve()
    try:
        info = json.loads((home / RUNTIME_FILE).read_text())
        if not psutil.pid_exists(int(info["pid"])):
            return None
        return with_credentials(home, str(info["postgres_dsn"]), str(info["nats_url"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def with_credentials(home: Path, postgres_dsn: str, nats_address: str) -> Engines:
    """The engines at these addresses, with the passwords kept under ``home``."""
    password = stored_password(home / "postgres")
    if password is not None:
        parts = urlsplit(postgres_dsn)
        postgres_dsn = parts._replace(netloc=f"{parts.username}:{quote(password, safe='')}@"
                                             f"{parts.hostname}:{parts.port}").geturl()
    return Engines(postgres_dsn, nats_address, stored_passwords(home))


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
        exited = asyncio.ensure_future(_exit_of(proc, name))
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


async def _exit_of(proc: "subprocess.Popen[bytes]", name: str) -> int:
    """``proc``'s exit code, waited for on a thread of its own: on the default executor, whose
    few threads (the cores + 4) every child's wait would hold for its whole life, one process
    per events partition left none for anything else (``up`` hung)."""
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[int] = loop.create_future()

    def settle(code: int) -> None:
        if not exited.done():
            exited.set_result(code)

    def wait() -> None:
        loop.call_soon_threadsafe(settle, proc.wait())

    threading.Thread(target=wait, name=f"wait for {name}", daemon=True).start()
    return await exited


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
