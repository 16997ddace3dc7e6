"""Faults of a clustered deployment (a 3-node JetStream cluster, replicas of ingest and query):
each kills something and returns once it is being restarted, as ``scenario.FAULTS`` do."""

import asyncio
import time
from collections.abc import Callable

import nats.errors
import nats.js.errors

from memledger_platform import bus
from memledger_platform.engines import EmbeddedNatsCluster
from memledger_schemas.subjects import Subjects
from tests.faults.cluster import Cluster, command
from tests.faults.load import Load

DOWN_ACKS = 10
"""Writes acknowledged while a NATS node is down, before it is started again."""


def events_stream_leader(cluster: Cluster, timeout: float = 60.0) -> str:
    """The node that leads the events stream now (asked until one answers)."""
    async def ask() -> str:
        nc = await bus.connect(cluster.nats_url, "memledger-faults-leader")
        try:
            info = await nc.jetstream().stream_info(Subjects("memledger").events_stream)
        finally:
            await nc.close()
        assert info.cluster is not None
        assert info.cluster.leader
        return info.cluster.leader

    deadline = time.monotonic() + timeout
    while True:
        try:
            return asyncio.run(ask())
        except (AssertionError, nats.errors.Error, nats.js.errors.Error, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def with_a_node_down(cluster: Cluster, load: Load, node: str,
                     meanwhile: Callable[[], None] = lambda: None) -> None:
    """kill -9 ``node``, run ``meanwhile`` and wait for writes acknowledged without it, then
    start it again."""
    assert isinstance(cluster.nats, EmbeddedNatsCluster)
    killed = time.monotonic()
    cluster.kill_nats_node(node)
    meanwhile()
    deadline = time.monotonic() + 300
    while len(load.outcomes.acks_after(killed)) < DOWN_ACKS:
        assert time.monotonic() < deadline, f"no writes acknowledged without {node}"
        time.sleep(0.1)
    cluster.start_nats_node(node)


def kill_the_stream_leader(cluster: Cluster, load: Load) -> None:
    with_a_node_down(cluster, load, events_stream_leader(cluster))


def kill_the_relay_with_a_node_down(cluster: Cluster, load: Load) -> None:
    assert isinstance(cluster.nats, EmbeddedNatsCluster)
    leader = events_stream_leader(cluster)
    follower = next(n for n in cluster.nats.names if n != leader)
    with_a_node_down(cluster, load, follower, lambda: cluster.kill("relay"))


def kill_a_replica(service: str) -> Callable[[Cluster, Load], None]:
    """kill -9 the last replica of ``service`` (the only one, if it has one)."""
    def kill(cluster: Cluster, _: Load) -> None:
        replicas = [s for s in cluster.services if command(s) == service]
        cluster.kill(replicas[-1])
    return kill


CLUSTER_FAULTS: dict[str, tuple[str, Callable[[Cluster, Load], None]]] = {
    "nats-leader": ("kill -9 the events stream's leader node", kill_the_stream_leader),
    "ingest-replica": ("kill -9 an ingest replica", kill_a_replica("ingest")),
    "query-replica": ("kill -9 a query replica", kill_a_replica("query")),
    "relay-node-down": ("kill -9 the relay while a NATS node is down",
                        kill_the_relay_with_a_node_down),
}
