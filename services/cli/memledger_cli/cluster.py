"""A memledger deployment on loopback whose every process this one owns, so each can be killed
and restarted: PostgreSQL and nats-server (or a JetStream cluster of them, streams replicated on
every node) from the project's engine classes, and the services in the distributed mode
(ingest, relay, projector, vectors, enricher, query), each a process of its own, ingest and
query in as many replicas as asked (``ingest``, ``ingest-1``, ...; each on its own port).

``memledger cluster up``, the fault suite and ``bench scale`` all run it. The services are kept
running by a supervisor thread that does what ``memledger up`` does for its children
(``memledger_cli.embedded.supervise``): a service that dies is started again after a pause of
one second. The engines are restarted by their owner (``kill_engine``), from the thread that
started them, which their parent-death signal is tied to.
"""

import base64
import contextlib
import functools
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import httpx
import psutil

from memledger_cli.embedded import child_argv
from memledger_platform.crypto import digest_secret, keyed_digest
from memledger_platform.engines import (
    EmbeddedNats,
    EmbeddedNatsCluster,
    EmbeddedPostgres,
    EngineStartError,
    free_port,
    parent_death_preexec,
)

SERVICES = ("ingest", "relay", "projector", "vectors", "enricher", "query")
Engine = Literal["postgres", "nats"]
T = TypeVar("T")


@dataclass(frozen=True)
class Topology:
    """How many of each: nats-server nodes (more than one: a JetStream cluster, streams with a
    replica on every node) and replicas of ingest and of query."""

    nats_nodes: int = 1
    ingest_replicas: int = 1
    query_replicas: int = 1

    def http_services(self) -> list[str]:
        return [*_replicas("ingest", self.ingest_replicas),
                *_replicas("query", self.query_replicas)]

    def services(self) -> list[str]:
        return [*self.http_services(), *(s for s in SERVICES if s not in ("ingest", "query"))]


def _replicas(service: str, count: int) -> list[str]:
    return [service if i == 0 else f"{service}-{i}" for i in range(count)]


def command(service: str) -> str:
    """The memledger command a service (or a replica: ``query-1``) runs."""
    return service.split("-", maxsplit=1)[0]


class ClusterError(RuntimeError):
    """Something of the deployment did not come up in time (the message has the logs)."""


RESTART_PAUSE_SECONDS = 1.0
"""As ``memledger up``'s supervisor waits before starting a dead child again."""


@dataclass
class Service:
    name: str
    env: dict[str, str]
    log: Path
    proc: "subprocess.Popen[bytes] | None" = None
    died_at: float | None = None
    starts: int = 0
    exits: list[int] = field(default_factory=list)
    """Exit codes seen by the supervisor (-9: killed by a test)."""


class Cluster:
    """The deployment under ``home``. ``start`` it, use ``ingest_url`` and ``query_url``,
    inject faults with ``kill``, ``kill_engine`` and ``pause_engine``, and ``close`` it."""

    TENANT = "default"

    def __init__(self, home: Path, topology: Topology | None = None, *,
                 embedder: str = "hashing", auth: bool = False,
                 master_key: str | None = None) -> None:
        """``embedder``: the services' (``local``: the MiniLM model the package ships);
        ``auth``: API keys required, the load and the operator commands using an admin key;
        ``master_key``: the key that seals personal data (a new one if not given)."""
        self.home = home
        self.topology = topology or Topology()
        self.embedder = embedder
        self.auth = auth
        self.api_key: str | None = None
        self.postgres = EmbeddedPostgres(home / "postgres", port=free_port())
        self.nats: EmbeddedNats | EmbeddedNatsCluster = (
            EmbeddedNats(home, port=free_port()) if self.topology.nats_nodes == 1 else
            EmbeddedNatsCluster(home, size=self.topology.nats_nodes))
        self.ports = {name: free_port() for name in self.topology.http_services()}
        self.ingest_urls = [self._url(n) for n in self.ports if n.startswith("ingest")]
        self.query_urls = [self._url(n) for n in self.ports if n.startswith("query")]
        self.ingest_url, self.query_url = self.ingest_urls[0], self.query_urls[0]
        self.master_key = master_key or base64.b64encode(secrets.token_bytes(32)).decode()
        self.dsn = ""
        self.nats_url = ""
        self.services: dict[str, Service] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    # --- life cycle ----------------------------------------------------------------------

    def stored_key(self, key: str) -> str:
        """How the event store holds the idempotency key ``key`` of the load's tenant."""
        return keyed_digest(digest_secret(base64.b64decode(self.master_key)), self.TENANT, key)

    def headers(self) -> dict[str, str]:
        """What a request of the load carries (the admin key, when auth is on)."""
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def start(self) -> None:
        """Start the engines (here) and the services (by the supervisor); wait until both
        HTTP services answer."""
        self.dsn = self.postgres.start().dsn
        self.nats_url = self.nats.start()
        if self.auth:
            self.api_key = self._issue_admin_key()
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        self.services = {name: Service(name, self.env(name), self.home / "logs" / f"{name}.log")
                         for name in self.topology.services()}
        self._supervisor = threading.Thread(target=self._supervise, name="cluster-supervisor",
                                            daemon=True)
        self._supervisor.start()
        self.wait_healthy()

    def env(self, service: str = "") -> dict[str, str]:
        """The environment of a service (or, without a name, of an operator command)."""
        env = {**os.environ, "MEMLEDGER_MODE": "distributed", "MEMLEDGER_POSTGRES_DSN": self.dsn,
               "MEMLEDGER_NATS_URL": self.nats_url, "MEMLEDGER_HOME": str(self.home),
               "MEMLEDGER_AUTH": "required" if self.auth else "off",
               "MEMLEDGER_DEFAULT_TENANT": self.TENANT, "MEMLEDGER_EMBEDDER": self.embedder,
               "MEMLEDGER_MASTER_KEY": self.master_key,
               "MEMLEDGER_LOG_FORMAT": "json", "MEMLEDGER_LOG_LEVEL": "warning",
               "MEMLEDGER_NATS_STREAM_REPLICAS": str(self.topology.nats_nodes)}
        if self.api_key and not service:
            env["MEMLEDGER_API_KEY"] = self.api_key
        if service in self.ports:
            env["MEMLEDGER_HTTP_PORT"] = str(self.ports[service])
            env["MEMLEDGER_GRPC_PORT"] = str(free_port())
        return env

    def _issue_admin_key(self) -> str:
        """The tenant and an admin key for it, made as an operator does (``memledger admin``)."""
        for action in (["create-tenant", self.TENANT],
                       ["issue-key", "--tenant", self.TENANT, "--role", "admin",
                        "--label", "fault suite"]):
            done = subprocess.run([sys.executable, "-m", "memledger_cli", "admin", *action],
                                  env=self.env(), capture_output=True, timeout=120, check=False)
            if done.returncode != 0:
                raise ClusterError(done.stderr.decode(errors="replace"))
        token: str = json.loads(done.stdout)["token"]
        return token

    def _url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def wait_healthy(self, timeout: float = 180.0) -> None:
        # One client for every poll: a new one costs ~20 ms of CPU (it loads the CA bundle),
        # taken from the services starting beside it.
        with httpx.Client(timeout=5) as client:
            for url in ([f"{u}/health" for u in self.ingest_urls] +
                        [f"{u}/v1/query/health" for u in self.query_urls]):
                self._until(functools.partial(_answers, client, url),
                            f"{url} did not answer in {timeout:.0f}s", timeout, interval=0.2)

    def _until(self, check: Callable[[], T | None], what: str, timeout: float = 120.0,
               interval: float = 0.1) -> T:
        """``check``'s first true answer; after ``timeout`` seconds, fail with ``what`` and the
        services' logs."""
        deadline = time.monotonic() + timeout
        while (found := check()) is None or not found:
            if time.monotonic() > deadline:
                raise ClusterError(f"{what}\n{self.logs()}")
            time.sleep(interval)
        return found

    def stop_services(self) -> None:
        """SIGTERM every service (a graceful stop) and stop supervising them."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=120)
            self._supervisor = None

    def close(self) -> None:
        self.stop_services()
        self.nats.stop()
        self.postgres.stop()

    # --- faults ------------------------------------------------------------------------------

    def kill_nats_node(self, name: str) -> None:
        """kill -9 one node of the NATS cluster; ``start_nats_node`` brings it back."""
        assert isinstance(self.nats, EmbeddedNatsCluster), "one nats-server: kill_engine"
        self.nats.kill(name)

    def start_nats_node(self, name: str) -> None:
        assert isinstance(self.nats, EmbeddedNatsCluster)
        self.nats.start_node(name)

    def kill(self, service: str) -> None:
        """kill -9 a service; the supervisor starts it again."""
        proc = self._until(lambda: self._running(service), f"{service} is not running")
        proc.send_signal(signal.SIGKILL)

    def kill_child(self, service: str, module: str) -> None:
        """kill -9 the child process of ``service`` that runs ``module``; the service starts
        it again when it next needs it."""
        found = self._until(lambda: self._child(service, module), f"{service} runs no {module}")
        found[0].kill()

    def _child(self, service: str, module: str) -> list[psutil.Process]:
        proc = self._running(service)
        if proc is None:
            return []
        with contextlib.suppress(psutil.NoSuchProcess):
            return [child for child in psutil.Process(proc.pid).children()
                    if module in child.cmdline()]
        return []

    def _running(self, service: str) -> "subprocess.Popen[bytes] | None":
        with self._lock:
            proc = self.services[service].proc
        return proc if proc is not None and proc.poll() is None else None

    def kill_engine(self, engine: Engine) -> None:
        """kill -9 an engine, then start it again on the same port and data (PostgreSQL may
        refuse for a moment, while the backends the killed postmaster left finish exiting)."""
        server = self.postgres if engine == "postgres" else self.nats
        assert not isinstance(server, EmbeddedNatsCluster), "kill a node: kill_nats_node"
        pid = server.pid
        assert pid is not None, f"{engine} is not running"
        os.kill(pid, signal.SIGKILL)
        time.sleep(RESTART_PAUSE_SECONDS)  # down as long as a supervised service would be
        self._until(lambda: _started(server), "not started again", timeout=120, interval=0.5)

    def suspend(self, service: str) -> None:
        """SIGSTOP a service (it holds its connections but does nothing) until ``resume``."""
        proc = self._running(service)
        assert proc is not None, f"{service} is not running\n{self.logs()}"
        proc.send_signal(signal.SIGSTOP)

    def resume(self, service: str) -> None:
        proc = self._running(service)
        if proc is not None:
            proc.send_signal(signal.SIGCONT)

    @contextmanager
    def paused(self, engine: Engine) -> Iterator[None]:
        """SIGSTOP an engine for the duration of the block, then SIGCONT it."""
        assert not isinstance(self.nats, EmbeddedNatsCluster), "a cluster pauses no node"
        pid = (self.postgres if engine == "postgres" else self.nats).pid
        assert pid is not None, f"{engine} is not running"
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def logs(self, lines: int = 15) -> str:
        """The tail of every service's log, for a failure message."""
        parts = []
        for service in self.services.values():
            text = service.log.read_text(errors="replace") if service.log.exists() else ""
            tail = "\n".join(text.splitlines()[-lines:])
            parts.append(f"--- {service.name} (exits {service.exits}) ---\n{tail}")
        return "\n".join(parts)

    # --- the supervisor thread ---------------------------------------------------------------

    def _supervise(self) -> None:
        """Keep every service running until ``stop_services``; the processes are spawned from
        this thread, so they get SIGTERM if it (or the test process) dies."""
        while not self._stopping.is_set():
            for service in self.services.values():
                self._tend(service)
            self._stopping.wait(0.1)
        for service in self.services.values():
            _terminate(service.proc)

    def _tend(self, service: Service) -> None:
        proc = service.proc
        if proc is not None and proc.poll() is None:
            return
        now = time.monotonic()
        if proc is not None and service.died_at is None:
            service.died_at = now
            service.exits.append(proc.returncode)
        if service.died_at is not None and now - service.died_at < RESTART_PAUSE_SECONDS:
            return
        with service.log.open("ab") as log, self._lock:
            service.proc = subprocess.Popen(
                child_argv(command(service.name)), env=service.env,
                stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=parent_death_preexec(signal.SIGTERM))  # noqa: PLW1509
        service.died_at = None
        service.starts += 1


def _started(server: EmbeddedNats | EmbeddedPostgres) -> bool:
    try:
        server.start()
    except EngineStartError:
        return False
    return True


def _terminate(proc: "subprocess.Popen[bytes] | None") -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _answers(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False
