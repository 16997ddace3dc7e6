"""The largest body `memledger up` takes by default (``MEMLEDGER_HTTP_MAX_BODY_BYTES``,
32 MiB), a batch of some 480 large commands, with API keys required: it commits or is refused
with a 4xx, and the next write commits. The client waits far longer than a write should take,
and the server runs in its own process, so a wedged writer fails the test rather than hanging
the suite (nothing is timed)."""

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Running, start
from tests.support import eventually_sync, large_batch, probe

LARGEST = 32 * 1024 * 1024
PATIENCE_SECONDS = 180.0
"""How long the client waits for each answer: a write that commits takes seconds."""


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Running]:
    running = start(tmp_path / "home", MEMLEDGER_AUTH="required", MEMLEDGER_EMBEDDER="hashing",
                    MEMLEDGER_HTTP_REQUEST_TIMEOUT_SECONDS=str(PATIENCE_SECONDS))
    eventually_sync(lambda: _healthy(running.url), timeout=30)
    yield running
    if running.proc.poll() is None:
        running.proc.kill()  # a wedged writer would outwait a polite stop
        running.proc.wait(timeout=60)


def _healthy(url: str) -> None:
    assert probe().get(f"{url}/health", timeout=2).status_code == 200


def _api(running: Running) -> httpx.Client:
    key = re.search(r"API key\s+(\S+)", "".join(running.output))
    assert key, "".join(running.output)
    return httpx.Client(base_url=running.url, timeout=PATIENCE_SECONDS,
                        headers={"authorization": f"Bearer {key.group(1)}"})


@pytest.mark.faults
def test_the_largest_default_body_commits_or_is_refused_and_the_next_write_commits(
        guarded: Running) -> None:
    with _api(guarded) as api:
        assert api.post("/v1/spaces", json={"space_id": "big"}).status_code == 201
        largest = api.post("/v1/batch", content=large_batch(LARGEST, "big"),
                           headers={"content-type": "application/json"})
        assert largest.status_code == 201 or 400 <= largest.status_code < 500, \
            largest.text[:500]
        after = api.post("/v1/spaces/big/memories", json={"kind": "fact", "content": "next"})
    assert after.status_code == 201, after.text
