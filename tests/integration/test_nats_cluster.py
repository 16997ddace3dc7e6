"""A 3-node JetStream cluster on loopback (real nats-servers from the wheel, the embedded
engine's users and permissions, streams R3, every write fsynced): writes go on being
acknowledged while a node, the stream's leader among them, is killed and started again, and
the stream holds each acknowledged write exactly once."""

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from memledger_platform import bus
from memledger_platform.engines import EmbeddedNatsCluster
from memledger_platform.nats_permissions import embedded_users
from memledger_schemas.subjects import Subjects
from tests.integration.nats_cluster_support import (
    Writer,
    all_replicas_current,
    running,
    stopped,
    stored_ids,
    stream_leader,
)
from tests.support import eventually

WRITES_PER_PHASE = 20
"""Acknowledgements to see before a kill, while the node is down, and after its restart."""


@pytest.fixture
def subjects() -> Subjects:
    return Subjects(prefix=f"t{uuid.uuid4().hex[:10]}")


@pytest.fixture
def cluster(tmp_path: Path, subjects: Subjects) -> Iterator[EmbeddedNatsCluster]:
    nodes = EmbeddedNatsCluster(tmp_path, size=3, users=embedded_users(subjects))
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture
async def relay_nc(cluster: EmbeddedNatsCluster, subjects: Subjects) -> AsyncIterator[Client]:
    """The relay's connection (its own user and permissions) to every node, with memledger's
    streams created R3."""
    nc = await bus.connect(cluster.url("relay"), "memledger-relay")
    await bus.ensure_streams(nc.jetstream(), subjects, replicas=3)
    yield nc
    await nc.close()


async def test_the_streams_are_replicated_on_three_nodes_with_one_leader(
        relay_nc: Client, subjects: Subjects, cluster: EmbeddedNatsCluster) -> None:
    js = relay_nc.jetstream()

    await eventually(lambda: all_replicas_current(js, subjects.events_stream), timeout=30)

    info = await js.stream_info(subjects.events_stream)
    assert info.config.num_replicas == 3
    assert info.cluster is not None
    assert info.cluster.leader in cluster.names


async def test_a_user_is_refused_what_its_permissions_deny_on_every_node(
        relay_nc: Client, subjects: Subjects, cluster: EmbeddedNatsCluster) -> None:
    for url in bus.servers(cluster.url("query")):  # one node at a time
        refusals: list[str] = []

        async def refused(error: Exception, seen: list[str] = refusals) -> None:
            seen.append(str(error))

        query = await nats.connect(url, error_cb=refused, allow_reconnect=False)
        try:
            await query.publish(subjects.event("default", "s", "memory.asserted"), b"{}")
            await query.flush()

            async def told(seen: list[str] = refusals) -> None:
                assert any("permissions violation" in r for r in seen), seen
            await eventually(told)
        finally:
            await query.close()


async def test_writes_are_acknowledged_exactly_once_while_the_stream_leader_is_killed(
        relay_nc: Client, subjects: Subjects, cluster: EmbeddedNatsCluster) -> None:
    await _kill_in_turn(relay_nc, subjects, cluster, kills=1)


@pytest.mark.faults
@pytest.mark.timeout(900)
async def test_writes_survive_each_node_killed_in_turn_as_the_stream_leader(
        relay_nc: Client, subjects: Subjects, cluster: EmbeddedNatsCluster) -> None:
    await _kill_in_turn(relay_nc, subjects, cluster, kills=6)


async def _kill_in_turn(nc: Client, subjects: Subjects, cluster: EmbeddedNatsCluster,
                        kills: int) -> None:
    """Kill the stream's leader ``kills`` times, each time under load and each time started
    again; then every acknowledged write is in the stream once, and no write is there twice."""
    js, stream = nc.jetstream(), subjects.events_stream
    writer = Writer(js, subjects.event("default", "s", "memory.asserted"))
    task = await running(writer)
    try:
        for _ in range(kills):
            await _survive_a_leader_kill(stream, cluster, writer)
    finally:
        await stopped(writer, task)
    stored = await stored_ids(js, stream)
    assert set(writer.acked) <= set(stored), sorted(set(writer.acked) - set(stored))[:10]
    assert [i for i, count in stored.items() if count > 1] == []


async def _survive_a_leader_kill(stream: str, cluster: EmbeddedNatsCluster, writer: Writer
                                 ) -> None:
    await eventually(lambda: all_replicas_current(writer.js, stream), timeout=60)
    await _acks(writer, after=_now())
    leader = await stream_leader(writer.js, stream)
    killed_at = _now()
    cluster.kill(leader)
    await _acks(writer, after=killed_at)  # two nodes of three still make a quorum
    cluster.start_node(leader, wait=False)
    rejoined = _now()
    await eventually(lambda: all_replicas_current(writer.js, stream), timeout=60)
    await _acks(writer, after=rejoined)


async def _acks(writer: Writer, after: float) -> None:
    async def enough() -> None:
        assert writer.acks_after(after) >= WRITES_PER_PHASE, (
            writer.acks_after(after), dict(writer.errors))
    await eventually(enough, timeout=90, interval=0.1)


def _now() -> float:
    return time.monotonic()
