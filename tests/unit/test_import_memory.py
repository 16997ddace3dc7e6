"""An import (``import_memory``) decided and enriched: the item's assertion just before its
embedding, both in one decision; an embedding of another model or size than the server's index
refused naming the field; the enricher skips what an import embedded (in the same batch, or
looked up in the log when the pair came in two fetches)."""

import hashlib
from collections.abc import Sequence
from typing import Any, cast
from uuid import UUID

import orjson
import pytest

from memledger_enricher.logged import LoggedEmbeddings
from memledger_enricher.plan import Source, embedded_already, embedding_of
from memledger_enricher.service import Enricher, Reading
from memledger_ingest.core.results import request_hash
from memledger_ingest.core.writer import GroupCommitWriter, Rejected
from memledger_ingest.domain.decide import Context, decide
from memledger_ingest.domain.errors import Invalid
from memledger_ingest.domain.streams import StreamRef, StreamState
from memledger_ingest.domain.targets import IndexModel
from memledger_platform.crypto import Opener
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.events import decode
from memledger_platform.eventstore import RecordedEvent
from memledger_platform.eventstore.memory import InMemoryEventStore
from memledger_platform.intake_client import IntakeClient
from memledger_schemas import commands as c
from memledger_schemas import events as e
from memledger_schemas.subjects import HDR_EVENT_TYPE, Subjects

FRESH, ITEM = UUID("0190a000-0000-7000-8000-000000000001"), UUID(int=0x100)
CTX = Context("acme", FRESH, "key:k1", index=IndexModel("m", 2))
SPACE = {StreamRef("space", "notes"): StreamState(1, "notes", "active")}


def _import(**fields: Any) -> c.ImportMemory:
    return c.ImportMemory.model_validate({"space_id": "notes", "kind": "fact",
                                          "content": "sky is blue", "model": "m", "dims": 2,
                                          "vector": (0.6, 0.8), **fields})


def test_an_import_asserts_its_item_just_before_recording_its_embedding() -> None:
    decision = decide(_import(item_id=ITEM), CTX, SPACE.get)
    [asserted] = decision.also
    assert asserted.target == StreamRef("item", str(ITEM))
    assert [type(p) for p in asserted.events] == [e.MemoryAsserted]
    assert decision.target == StreamRef("enrichment", str(ITEM))
    assert decision.events == (e.MemoryEmbedded(item_id=ITEM, item_version=1, model="m",
                                                dims=2, vector=(0.6, 0.8)),)


@pytest.mark.parametrize(("fields", "field"), [({"model": "other"}, "model"),
                                               ({"dims": 3, "vector": (0.6, 0.8, 0)}, "dims")])
def test_an_embedding_not_of_the_servers_index_is_refused_naming_the_field(
        fields: dict[str, Any], field: str) -> None:
    with pytest.raises(Invalid) as refused:
        decide(_import(**fields), CTX, SPACE.get)
    assert refused.value.field == field


def test_an_import_of_an_item_that_exists_is_a_conflict_as_an_assertion_is() -> None:
    world = {**SPACE, StreamRef("item", str(ITEM)): StreamState(1, "notes", "active")}
    with pytest.raises(Exception, match="already exists"):
        decide(_import(item_id=ITEM), CTX, world.get)


def _document(event_type: str, payload: dict[str, Any], version: int = 1) -> dict[str, Any]:
    return {"event_type": event_type, "schema_version": 1, "tenant_id": "acme",
            "space_id": "notes", "stream_version": version, "event_id": str(FRESH),
            "actor": "key:importer", "global_position": version,
            "recorded_at": "2026-01-01T00:00:00+00:00", "payload": payload}


def test_an_embedding_of_the_enrichers_model_marks_its_item_version_as_embedded() -> None:
    payload = {"item_id": str(ITEM), "item_version": 1, "model": "m", "vector": "ml-enc:v1:x"}
    found = embedding_of(decode(_document("memory.embedded", payload)), "m")
    assert found == ("acme", ITEM, 1)
    other = _document("memory.embedded", {**payload, "model": "n"})
    assert embedding_of(decode(other), "m") is None
    source = Source("acme", "notes", ITEM, 1, "sky", "c")
    assert embedded_already(source, {found})
    assert not embedded_already(Source("acme", "notes", ITEM, 2, "sky", "c"), {found})


class _Msg:
    def __init__(self, event_type: str, payload: dict[str, Any]) -> None:
        self.data = orjson.dumps(_document(event_type, payload))
        self.headers = {HDR_EVENT_TYPE: event_type}
        self.subject = f"memledger.evt.acme.notes.{event_type}"
        self.acked = False

    async def ack(self) -> None:
        self.acked = True

    async def nak(self, delay: float | None = None) -> None:
        raise AssertionError("nothing fails here")


def _asserted(item: UUID, content: str = "Ada keeps the tide tables") -> _Msg:
    return _Msg("memory.asserted", {"item_id": str(item), "content": content})


def _embedded(item: UUID, model: str) -> _Msg:
    return _Msg("memory.embedded", {"item_id": str(item), "item_version": 1, "model": model,
                                    "vector": "ml-enc:v1:x"})


class _Intake:
    def __init__(self) -> None:
        self.sent: list[c.CommandBase] = []

    async def send(self, tenant: str, commands: list[c.CommandBase]) -> list[dict[str, Any]]:
        self.sent.extend(commands)
        return [{"position": 1} for _ in commands]


async def test_the_enricher_does_not_embed_an_item_version_imported_with_its_model() -> None:
    embedder, intake = HashingEmbedder(dims=8), _Intake()
    enricher = Enricher(cast(Any, None), Subjects(), embedder, cast(IntakeClient, intake))
    other = UUID(int=0x101)
    msgs = [_asserted(ITEM), _embedded(ITEM, embedder.model_id), _asserted(other),
            _embedded(other, "another/v1")]
    await enricher.handle(cast(Any, msgs))
    embedded = [cmd for cmd in intake.sent if isinstance(cmd, c.RecordEmbedding)]
    assert [cmd.item_id for cmd in embedded] == [other]
    entities = [cmd for cmd in intake.sent if isinstance(cmd, c.RecordEntities)]
    assert {cmd.item_id for cmd in entities} == {ITEM, other}  # still read for names
    assert all(m.acked for m in msgs)


class _Logged(LoggedEmbeddings):
    """Counts the lookups (each one a round trip to PostgreSQL)."""

    def __init__(self, store: InMemoryEventStore) -> None:
        super().__init__(store, Opener(None))
        self.asked: list[list[UUID]] = []

    def of(self, sources: Sequence[Source], model: str) -> set[tuple[str, UUID, int]]:
        self.asked.append([s.item_id for s in sources])
        return super().of(sources, model)


async def test_an_import_whose_embedding_came_in_the_next_batch_is_not_embedded_again() -> None:
    """A fetch may end between an import's two events (the relay publishes one at a time):
    the assertion's batch does not hold the embedding, so it is looked up in the log."""
    embedder, intake, store = HashingEmbedder(dims=2), _Intake(), InMemoryEventStore()
    writer = GroupCommitWriter(store, index=IndexModel(embedder.model_id, 2))
    writer.start()
    try:
        await writer.submit("acme", [c.CreateSpace(space_id="notes")])
        await writer.submit("acme", [_import(item_id=ITEM, model=embedder.model_id)])
    finally:
        writer.stop()
    logged, written = _Logged(store), UUID(int=0x102)
    enricher = Enricher(cast(Any, None), Subjects(), embedder, cast(IntakeClient, intake),
                        reading=Reading(logged=logged))

    await enricher.handle(cast(Any, [_asserted(ITEM), _asserted(written, "plain write")]))
    await enricher.handle(cast(Any, [_embedded(ITEM, embedder.model_id)]))

    embedded = [cmd for cmd in intake.sent if isinstance(cmd, c.RecordEmbedding)]
    assert [cmd.item_id for cmd in embedded] == [written]
    assert logged.asked == [[ITEM, written]]  # one lookup for the batch; none for the second
    entities = [cmd for cmd in intake.sent if isinstance(cmd, c.RecordEntities)]
    assert ITEM in {cmd.item_id for cmd in entities}  # still read for names


async def test_without_an_event_store_only_the_batch_tells_what_is_embedded() -> None:
    embedder, intake = HashingEmbedder(dims=8), _Intake()
    enricher = Enricher(cast(Any, None), Subjects(), embedder, cast(IntakeClient, intake))
    await enricher.handle(cast(Any, [_asserted(ITEM)]))
    assert [cmd.item_id for cmd in intake.sent if isinstance(cmd, c.RecordEmbedding)] == [ITEM]


class _CountingStore(InMemoryEventStore):
    """Counts the stream reads the writer makes (each one a round trip to PostgreSQL)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read_streams(self, stream_ids: Sequence[UUID]) -> dict[UUID, list[RecordedEvent]]:
        self.reads += 1
        return super().read_streams(stream_ids)


async def test_a_batch_of_imports_reads_the_store_once_not_once_per_new_item() -> None:
    store = _CountingStore()
    writer = GroupCommitWriter(store, index=IndexModel("m", 2))
    writer.start()
    try:
        await writer.submit("acme", [c.CreateSpace(space_id="notes")])
        before = store.reads
        items = [UUID(int=0x200 + i) for i in range(20)]
        results = await writer.submit("acme", [_import(item_id=i, content=f"fact {i}")
                                               for i in items])
        reads = store.reads - before
        with pytest.raises(Rejected, match="already exists"):  # the item is there now
            await writer.submit("acme", [_import(item_id=items[0])])
    finally:
        writer.stop()
    assert reads == 1
    assert [r.command for r in results] == ["import_memory"] * 20
    types = [r.event_type for r in store.read_all(0, 100)]
    assert types.count("memory.asserted") == types.count("memory.embedded") == 20


@pytest.mark.parametrize("command", [
    _import(content="ciel bleu \u2028 é", idempotency_key="k"),
    c.SetSpacePolicy.model_validate({"space_id": "notes", "retention_days": {"fact": 3}})])
def test_a_requests_digest_is_the_one_recorded_before_from_its_json_text(
        command: c.CommandBase) -> None:
    text = command.model_dump_json()
    if isinstance(command, c.SetSpacePolicy):
        text += "|" + ",".join(sorted(command.model_fields_set))
    assert request_hash(command) == hashlib.sha256(text.encode()).hexdigest()[:32]
