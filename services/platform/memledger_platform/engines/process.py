"""Ports, processes and errors shared by the embedded engines."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import quote

import psutil

_log = logging.getLogger(__name__)


LOOPBACK = "127.0.0.1"
PG_SYSTEM_USER = "memledger_pg"
"""System account that runs PostgreSQL when we are root (it refuses root)."""
PG_SUPERUSER = "postgres"
"""Database superuser created by initdb; it logs in with a password (``postgres_auth``)."""

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_LOG_TAIL_LINES = 30
_PG_READY_TIMEOUT = 30.0
_PG_STOP_TIMEOUT = 20.0
_PG_STALE_STOP_TIMEOUT = 10.0
_NATS_READY_TIMEOUT = 20.0
_NATS_STOP_TIMEOUT = 10.0
_KILL_REAP_TIMEOUT = 5.0
_POLL_INTERVAL = 0.1
_NATS_READY_INBOX = b"_INBOX.memledger.engine-ready"


class EngineStartError(RuntimeError):
    """An engine could not be started; the message says why and what to do."""


class PortInUseError(EngineStartError):
    """An explicitly configured port is taken by another process."""

    def __init__(self, port: int, setting: str) -> None:
        super().__init__(
            f"port {port} is already in use (set {setting} to another port, "
            "or leave it unset to pick a free one)"
        )
        self.port = port
        self.setting = setting


@dataclass(frozen=True)
class PostgresEndpoint:
    """Where a started PostgreSQL accepts TCP connections, and as whom."""

    host: str
    port: int
    user: str
    dbname: str
    password: str | None = field(default=None, repr=False)

    @property
    def dsn(self) -> str:
        """libpq URI with the password, e.g.
        ``postgresql://postgres:<password>@127.0.0.1:5432/memledger``."""
        return self._uri(self.password)

    @property
    def public_dsn(self) -> str:
        """The same URI without the password (to show, or to store beside it)."""
        return self._uri(None)

    def _uri(self, password: str | None) -> str:
        user, dbname = quote(self.user, safe=""), quote(self.dbname, safe="")
        secret = "" if password is None else ":" + quote(password, safe="")
        return f"postgresql://{user}{secret}@{self.host}:{self.port}/{dbname}"


# --------------------------------------------------------------------------
# Ports


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that was free a moment ago.

    The kernel picks it; another process may still grab it before the engine
    binds, which then surfaces as an :class:`EngineStartError` with the log.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _resolve_port(port: int | None, setting: str) -> int:
    """Pick a free port for ``None``; otherwise check that ``port`` can be bound."""
    if port is None:
        return free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Both servers bind with SO_REUSEADDR, so do the same: a port that only
        # has TIME_WAIT leftovers is usable and must not count as busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(port, setting) from exc
            raise EngineStartError(f"cannot bind port {port} ({exc}); change {setting}") from exc
    return port


# --------------------------------------------------------------------------
# Processes


def _parent_death_preexec(sig: signal.Signals) -> Callable[[], None] | None:
    """Return a ``preexec_fn`` that makes the child receive ``sig`` when we die.

    Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere returns None and stale
    servers are handled by the pid-file check on the next start.  CPython 3.11
    runs ``preexec_fn`` *after* switching to ``user=``/``group=``, which matters:
    the kernel clears the parent-death signal on credential changes, so setting
    it before the switch would be lost.  The setting survives ``execve`` of a
    binary without setuid bits or file capabilities (our case).
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # resolve in the parent, not after fork
    parent_pid = os.getpid()

    def preexec() -> None:
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent_pid:  # owner died between fork and prctl: don't exec
            os._exit(1)

    return preexec


def parent_death_preexec(sig: signal.Signals) -> Callable[[], None] | None:
    """Public face of ``_parent_death_preexec`` for other supervised children."""
    return _parent_death_preexec(sig)


@dataclass(frozen=True)
class _RunAs:
    """A system account to run a server binary as."""

    name: str
    uid: int
    gid: int


def _spawn(
    argv: list[str], log: IO[bytes], cwd: Path, death_signal: signal.Signals, run_as: _RunAs | None
) -> subprocess.Popen[bytes]:
    """Start a server process that logs to ``log`` and dies with this process.

    A new session keeps a terminal's Ctrl-C away from the engines, so the
    owner decides the shutdown order.  ``extra_groups=[]`` drops root's
    supplementary groups when switching users.
    """
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        start_new_session=True,
        # preexec_fn is unsafe only with threads; this module starts none and
        # documents that start() belongs on the owning (main) thread.
        preexec_fn=_parent_death_preexec(death_signal),  # noqa: PLW1509
        user=run_as.uid if run_as else None,
        group=run_as.gid if run_as else None,
        extra_groups=[] if run_as else None,
    )


def _is_alive(proc: psutil.Process) -> bool:
    """True while ``proc`` runs.  Zombies count as dead: when the owner died,
    orphans are reparented to PID 1, which in containers often never reaps."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(procs: list[psutil.Process], timeout: float) -> bool:
    """Poll until every process in ``procs`` is dead; False on timeout."""
    deadline = time.monotonic() + timeout
    while any(_is_alive(p) for p in procs):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL)
    return True


def _stop_tree(pid: int, sig: signal.Signals, timeout: float) -> None:
    """Send ``sig`` to ``pid``, wait ``timeout``, then SIGKILL it and its children.

    Children are collected up front: once the parent is killed they are
    reparented and could not be found any more (PostgreSQL backends would
    keep the old shared memory pinned and block the next start).
    """
    try:
        proc = psutil.Process(pid)
        tree = [proc, *proc.children(recursive=True)]
        proc.send_signal(sig)
    except psutil.Error:
        return
    if _wait_gone([proc], timeout):
        return
    _log.warning("pid %d ignored %s for %.0fs; killing it", pid, sig.name, timeout)
    for member in tree:
        with contextlib.suppress(psutil.Error):
            member.kill()
    _wait_gone(tree, _KILL_REAP_TIMEOUT)


def _stop_child(proc: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
    """Stop our own child process (signal, wait, kill) and reap it."""
    if proc.poll() is None:
        _stop_tree(proc.pid, sig, timeout)
    try:
        proc.wait(timeout=_KILL_REAP_TIMEOUT)
    except subprocess.TimeoutExpired:
        _log.error("pid %d did not exit even after SIGKILL", proc.pid)


def _read_pid(pid_file: Path) -> int | None:
    """First line of a pid file as an int, or None if absent or garbled."""
    try:
        return int(pid_file.read_text().splitlines()[0].strip())
    except (OSError, ValueError, IndexError):
        return None


def _owned_live_process(pid: int, name: str, marker: str) -> psutil.Process | None:
    """The live process ``pid`` if it is a ``name`` whose argv contains ``marker``.

    The argv check guards against pid reuse: we only ever signal a server
    that was started on our own data directory.
    """
    try:
        proc = psutil.Process(pid)
        if _is_alive(proc) and proc.name() == name and marker in proc.cmdline():
            return proc
    except psutil.Error:
        pass
    return None


def _pid_is_dead(pid: int) -> bool:
    """True if no live (non-zombie) process has ``pid``."""
    try:
        return not _is_alive(psutil.Process(pid))
    except psutil.Error:
        return True


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file, for error messages."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


def _start_failure(what: str, log_path: Path) -> EngineStartError:
    """An EngineStartError naming the log and quoting its tail."""
    return EngineStartError(
        f"{what}; last {_LOG_TAIL_LINES} lines of {log_path}:\n{_log_tail(log_path)}"
    )


def _wait_ready(
    proc: subprocess.Popen[bytes],
    is_ready: Callable[[], bool],
    timeout: float,
    name: str,
    log_path: Path,
) -> None:
    """Poll ``is_ready`` until True; raise if ``proc`` exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is not None:
            raise _start_failure(f"{name} exited with code {code} during startup", log_path)
        if is_ready():
            return
        if time.monotonic() >= deadline:
            raise _start_failure(f"{name} was not ready after {timeout:.0f}s", log_path)
        time.sleep(_POLL_INTERVAL)


