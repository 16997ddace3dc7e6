"""How a nats-server joins a cluster of its peers: its name, its route port, the routes to the
others, and the password the routes log in with."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

ROUTE_USER = "route"
"""The user the nodes of a cluster log in to each other's route ports as."""


@dataclass(frozen=True)
class ClusterMembership:
    """One node's place in a cluster named ``name``: ``route_ports`` are every node's
    (its own among them: nats-server ignores a route to itself)."""

    name: str
    server_name: str
    route_port: int
    route_ports: tuple[int, ...]
    route_password: str = field(repr=False)
    passwords_file: Path
    """The users' passwords, shared by every node (a client logs in to any of them)."""

    def config(self, host: str) -> list[str]:
        """The ``cluster`` block of nats.conf: routes on ``host`` only, with a password."""
        secret = f"{ROUTE_USER}:{self.route_password}"
        routes = [json.dumps(f"nats-route://{secret}@{host}:{port}")
                  for port in self.route_ports]
        return ["cluster {",
                f"  name: {json.dumps(self.name)}",
                f'  listen: "{host}:{self.route_port}"',
                f"  authorization {{ user: {ROUTE_USER}, "
                f"password: {json.dumps(self.route_password)} }}",
                f"  routes: [{', '.join(routes)}]",
                "}"]
