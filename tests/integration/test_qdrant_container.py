"""The distributed-mode vector adapter against a real Qdrant server, where Docker exists
(skipped cleanly where it does not)."""

from collections.abc import Iterator
from typing import Any

import pytest
from qdrant_client import QdrantClient

from memledger_platform.vectorindex.port import OPEN, IndexedPoint, Scope
from memledger_platform.vectorindex.qdrant_server import QdrantServerVectorIndex

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def qdrant_url() -> Iterator[str]:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception as error:
        pytest.skip(f"no Docker engine reachable: {type(error).__name__}: {error}")
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    with DockerContainer("qdrant/qdrant:v1.12.4").with_exposed_ports(6333) as container:
        wait_for_logs(container, "Qdrant gRPC listening", timeout=60)
        yield f"http://{container.get_container_host_ip()}:{container.get_exposed_port(6333)}"


def _point(n: int, vector: list[float], **payload: Any) -> IndexedPoint:
    base = {"tenant": "acme", "space": "s", "kind": "fact", "tags": [], "item_id": str(n),
            "valid_from": 0.0, "valid_to": OPEN, "sys_from": 1, "sys_to": OPEN}
    return IndexedPoint(f"00000000-0000-0000-0000-{n:012d}", vector, {**base, **payload})


def test_a_real_qdrant_server_keeps_tenants_apart_and_ranks_by_cosine(qdrant_url: str) -> None:
    index = QdrantServerVectorIndex(QdrantClient(url=qdrant_url), "contract", dims=3)
    try:
        index.upsert([_point(1, [1, 0, 0]), _point(2, [0.8, 0.2, 0]),
                      _point(3, [1, 0, 0], tenant="globex")])
        hits = index.search([1.0, 0.0, 0.0], Scope(tenant="acme", valid_at=1.0), 5)
        assert [h.payload["item_id"] for h in hits] == ["1", "2"]
    finally:
        index.close()
