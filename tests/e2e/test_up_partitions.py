"""`memledger up` with the events partitioned by tenant (MEMLEDGER_EVENT_PARTITIONS=2): a relay
and a projector per partition, each tenant's events in its partition's stream, and writes of
tenants in both partitions read back and found with ``min_position``."""

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import nats
import psutil
import pytest
from nats.aio.msg import Msg

from memledger_platform.auth import TENANT_HEADER
from memledger_schemas.subjects import Subjects, partition_of
from tests.e2e.conftest import Running, started
from tests.support import eventually_sync, probe

WAIT_MS = 30_000
TENANTS = ("default", next(t for t in ("acme", "globex", "initech")
                           if partition_of(t, 2) != partition_of("default", 2)))
"""Two tenants, one in each partition."""


@pytest.fixture
def partitioned(tmp_path: Path) -> Iterator[Running]:
    with started(tmp_path / "home", MEMLEDGER_EVENT_PARTITIONS="2") as running:
        yield running


def _write(url: str, tenant: str, content: str) -> dict[str, object]:
    headers = {TENANT_HEADER: tenant}
    httpx.post(f"{url}/v1/spaces", json={"space_id": "demo"}, headers=headers, timeout=10)
    response = httpx.post(f"{url}/v1/spaces/demo/memories", headers=headers, timeout=10,
                          json={"kind": "fact", "content": content})
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def test_up_runs_a_relay_and_a_projector_per_partition(partitioned: Running) -> None:
    children = psutil.Process(partitioned.proc.pid).children()
    partitions: dict[str, list[str]] = {}
    for child in children:
        command = " ".join(child.cmdline()).rsplit(" ", 1)[-1]
        partitions.setdefault(command, []).append(
            child.environ().get("MEMLEDGER_EVENT_PARTITION", "-"))

    assert sorted(partitions["relay"]) == ["0", "1"]
    assert sorted(partitions["projector"]) == ["0", "1"]
    assert partitions["vectors"] == ["-"]  # one process, a consumer per partition


def test_writes_of_tenants_in_both_partitions_are_read_and_found_with_min_position(
        partitioned: Running) -> None:
    heard = asyncio.run(_heard_while(partitioned.nats_url, lambda: _write_and_read(
        partitioned.url)))

    for tenant in TENANTS:
        assert heard[partition_of(tenant, 2)] == {tenant}
    # verify merges the partitions' streams by position and compares the read models
    verified = subprocess.run(
        [sys.executable, "-m", "memledger_cli", "verify", "--json"],
        env={**os.environ, "MEMLEDGER_HOME": str(partitioned.home),
             "MEMLEDGER_EVENT_PARTITIONS": "2"},
        capture_output=True, text=True, timeout=300, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert "MEMLEDGER_EVENTS_P0, MEMLEDGER_EVENTS_P1" in verified.stdout, report


def _write_and_read(url: str) -> None:
    written = {t: _write(url, t, f"The launch of {t} is on Friday") for t in TENANTS}
    for tenant, answer in written.items():
        item, position = answer["ids"]["item_id"], int(str(answer["position"]))  # type: ignore[index]
        read = httpx.get(f"{url}/v1/spaces/demo/items/{item}", headers={TENANT_HEADER: tenant},
                         params={"min_position": position, "wait_ms": WAIT_MS}, timeout=40)
        assert read.status_code == 200, read.text
        assert read.json()["item"]["content"] == f"The launch of {tenant} is on Friday"
        assert read.json()["basis"]["position"] >= position

        def found(tenant: str = tenant, position: int = position) -> None:
            response = probe().post(f"{url}/v1/search", headers={TENANT_HEADER: tenant},
                                    timeout=10, json={"query": "when is the launch",
                                                      "min_position": position})
            assert response.status_code == 200, response.text  # 503 until embedded
            assert [h["content"] for h in response.json()["results"]] == [
                f"The launch of {tenant} is on Friday"]

        eventually_sync(found, timeout=90)


async def _heard_while(nats_url: str, act: Callable[[], None]) -> dict[int, set[str]]:
    """The tenants whose events were published on each partition's subjects while ``act``
    ran (in a thread)."""
    nc = await nats.connect(nats_url)
    heard: dict[int, set[str]] = {0: set(), 1: set()}
    try:
        for partition in Subjects(partitions=2).every_partition():
            async def on_event(msg: Msg, partition: Subjects = partition) -> None:
                heard[partition.partition].add(partition.event_tenant(msg.subject) or "?")

            await nc.subscribe(partition.all_events, cb=on_event)
        await nc.flush()
        await asyncio.to_thread(act)
        await nc.flush()
    finally:
        await nc.close()
    return heard
