"""The enricher with batches under way at once: the next batch is embedded while ingest records
the last one, and the model is never asked twice at the same time."""

import asyncio
import time
from collections.abc import Sequence
from typing import Any, cast

import orjson
import pytest

from memledger_enricher.service import Enricher
from memledger_platform.embedding.embedder import HashingEmbedder, Vector
from memledger_platform.intake_client import IntakeClient
from memledger_schemas.commands import CommandBase
from memledger_schemas.subjects import Subjects


class _Msg:
    def __init__(self, n: int) -> None:
        self.data = orjson.dumps({
            "event_type": "memory.asserted", "event_id": f"0190a000-0000-7000-8000-{n:012d}",
            "tenant_id": "acme", "space_id": "notes", "stream_version": 1, "actor": "tester",
            "global_position": n, "recorded_at": "2025-01-01T00:00:00+00:00",
            "payload": {"item_id": f"0190a000-0000-7000-8000-{n:012d}",
                        "content": f"note number {n}"}})
        self.headers: dict[str, str] = {}
        self.subject = "memledger.evt.acme.notes.memory.asserted"
        self.acked = False

    async def ack(self) -> None:
        self.acked = True

    async def nak(self, delay: float | None = None) -> None:
        raise AssertionError("nothing fails here")


class _CountingEmbedder(HashingEmbedder):
    """Notes how many model calls overlap (it sleeps, as a model would keep a core busy)."""

    def __init__(self) -> None:
        super().__init__(dims=8)
        self.running = 0
        self.most = 0
        self.calls = 0

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        self.running += 1
        self.most = max(self.most, self.running)
        self.calls += 1
        try:
            time.sleep(0.05)  # busy for a while, as a model is, so overlapping calls would show
            return super().embed_documents(texts)
        finally:
            self.running -= 1


class _HeldIntake:
    """Answers every command once released; notes how many batches waited at once."""

    def __init__(self, batches: int) -> None:
        self.release = asyncio.Event()
        self.all_waiting = asyncio.Event()
        self.batches = batches
        self.waiting = 0
        self.most_waiting = 0
        self.sent: list[CommandBase] = []

    async def send(self, tenant: str, commands: list[CommandBase]) -> list[dict[str, Any]]:
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        if self.waiting == self.batches:
            self.all_waiting.set()
        await self.release.wait()
        self.waiting -= 1
        self.sent.extend(commands)
        return [{"position": 1} for _ in commands]


async def test_a_batch_is_embedded_while_the_last_one_waits_on_ingest() -> None:
    embedder, intake = _CountingEmbedder(), _HeldIntake(batches=3)
    enricher = Enricher(cast(Any, None), Subjects(), embedder, cast(IntakeClient, intake),
                        in_flight=3)
    batches = [[_Msg(10 * b + i) for i in range(4)] for b in range(3)]
    handling = [asyncio.create_task(enricher.handle(cast(Any, batch))) for batch in batches]
    # Every batch embedded while none has been recorded yet.
    await asyncio.wait_for(intake.all_waiting.wait(), 10)
    assert embedder.calls == len(batches)
    assert embedder.most == 1
    intake.release.set()
    await asyncio.gather(*handling)
    assert all(m.acked for batch in batches for m in batch)
    embedded = [c for c in intake.sent if type(c).__name__ == "RecordEmbedding"]
    assert len(embedded) == 12


def test_in_flight_is_at_least_one() -> None:
    from pydantic import ValidationError

    from memledger_platform.settings import Settings

    with pytest.raises(ValidationError, match="enricher_in_flight"):
        Settings(enricher_in_flight=0)
