"""The VectorIndex contract (tests/unit/test_vector_index.py) against a real Qdrant server
through the distributed-mode adapter, where Docker exists (skipped cleanly where it does not).
Each test gets a fresh collection in one container."""

import uuid
from collections.abc import Iterator

import pytest
from qdrant_client import QdrantClient

from memledger_platform.vectorindex.port import VectorIndex
from memledger_platform.vectorindex.qdrant_server import QdrantServerVectorIndex

pytest.register_assert_rewrite("tests.unit.test_vector_index")
from tests.unit.test_vector_index import VectorIndexContract  # noqa: E402

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


class TestRealQdrantServer(VectorIndexContract):
    @pytest.fixture
    def index(self, qdrant_url: str) -> Iterator[VectorIndex]:
        made = QdrantServerVectorIndex(QdrantClient(url=qdrant_url),
                                       f"contract_{uuid.uuid4().hex[:12]}", dims=3)
        yield made
        made.close()
