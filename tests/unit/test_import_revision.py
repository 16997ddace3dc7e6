"""An imported revision (``import_revision``) decided and enriched: the item's revision just
before the embedding of the version it makes, both in one decision, in the same events the
ordinary path records; bad input refused naming the field; the enricher skips a revision an
import embedded, even when the pair came in two fetches."""

from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID

import orjson
import pytest
from pydantic import ValidationError

from memledger_enricher.service import Enricher, Reading
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.domain.decide import Context, decide
from memledger_ingest.domain.errors import Invalid, NotFound
from memledger_ingest.domain.streams import StreamRef, StreamState
from memledger_ingest.domain.targets import IndexModel
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.eventstore.memory import InMemoryEventStore
from memledger_platform.intake_client import IntakeClient
from memledger_schemas import commands as c
from memledger_schemas import events as e
from memledger_schemas.subjects import Subjects
from tests.unit.test_import_memory import _document, _Intake, _Logged, _Msg

FRESH, ITEM = UUID("0190a000-0000-7000-8000-000000000001"), UUID(int=0x300)
CTX = Context("acme", FRESH, "key:k1", index=IndexModel("m", 2))
WORLD = {StreamRef("space", "notes"): StreamState(1, "notes", "active"),
         StreamRef("item", str(ITEM)): StreamState(3, "notes", "active")}
LATER = datetime(2021, 1, 1, tzinfo=UTC)


def _revision(**fields: Any) -> c.ImportRevision:
    return c.ImportRevision.model_validate({
        "space_id": "notes", "item_id": str(ITEM), "content": "sky is grey", "model": "m",
        "dims": 2, "vector": (0.6, 0.8), "valid_from": LATER.isoformat(), **fields})


def test_an_imported_revision_revises_its_item_just_before_embedding_the_new_version() -> None:
    decision = decide(_revision(reason="bench"), CTX, WORLD.get)
    [revised] = decision.also
    assert revised.target == StreamRef("item", str(ITEM))
    assert revised.events == (e.MemoryRevised(item_id=ITEM, content="sky is grey",
                                              reason="bench"),)
    assert revised.valid_from == LATER  # the valid time of the ordinary revision
    assert decision.target == StreamRef("enrichment", str(ITEM))
    assert decision.events == (e.MemoryEmbedded(item_id=ITEM, item_version=4, model="m",
                                                dims=2, vector=(0.6, 0.8)),)


def test_the_revision_is_the_same_as_an_ordinary_revisions() -> None:
    ordinary = decide(c.ReviseMemory(space_id="notes", item_id=ITEM, content="sky is grey",
                                     valid_from=LATER), CTX, WORLD.get)
    [imported] = decide(_revision(), CTX, WORLD.get).also
    assert (imported.events, imported.valid_from, imported.valid_to, imported.ids) == (
        ordinary.events, ordinary.valid_from, ordinary.valid_to, ordinary.ids)


def test_an_imported_revision_of_a_missing_item_is_not_found() -> None:
    with pytest.raises(NotFound):
        decide(_revision(item_id=str(UUID(int=0x999))), CTX, WORLD.get)


def test_an_embedding_not_of_the_servers_index_is_refused_naming_the_field() -> None:
    with pytest.raises(Invalid) as refused:
        decide(_revision(model="other"), CTX, WORLD.get)
    assert refused.value.field == "model"


@pytest.mark.parametrize(("fields", "field"), [
    ({"content": None}, "content"),
    ({"vector": (0.6, 0.8, 0.0)}, "vector"),
    ({"vector": (0.0, 0.0)}, "vector"),
    ({"expected_version": 3}, "expected_version"),
    ({"valid_from": "2021-01-01T00:00:00+00:00", "valid_to": "2020-01-01T00:00:00+00:00"},
     ""),
])
def test_bad_input_is_refused_at_the_boundary_naming_the_field(fields: dict[str, Any],
                                                               field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        _revision(**fields)
    assert [".".join(map(str, error["loc"])) for error in refused.value.errors()] == [field]


async def test_a_batch_imports_an_items_history_in_the_events_of_the_ordinary_path() -> None:
    store = InMemoryEventStore()
    writer = GroupCommitWriter(store, index=IndexModel("m", 2))
    writer.start()
    try:
        await writer.submit("acme", [c.CreateSpace(space_id="notes")])
        results = await writer.submit("acme", [
            c.ImportMemory(space_id="notes", item_id=ITEM, kind="fact", content="v0",
                           model="m", dims=2, vector=(0.6, 0.8)),
            _revision(content="v1"), _revision(content="v2", vector=(0.8, 0.6))])
    finally:
        writer.stop()
    events = [(r.event_type, r.stream_version) for r in store.read_all(1, 100)]
    assert events == [("memory.asserted", 1), ("memory.embedded", 1),
                      ("memory.revised", 2), ("memory.embedded", 2),
                      ("memory.revised", 3), ("memory.embedded", 3)]
    assert [r.command for r in results] == ["import_memory", "import_revision",
                                            "import_revision"]
    assert results[-1].position == store.read_all(1, 100)[-1].position


def _revised(item: UUID, version: int) -> _Msg:
    msg = _Msg("memory.revised", {"item_id": str(item), "content": f"version {version}"})
    msg.data = orjson.dumps(_document("memory.revised", {
        "item_id": str(item), "content": f"version {version}"}, version))
    return msg


async def test_a_revision_whose_embedding_came_in_the_next_batch_is_not_embedded_again() -> None:
    embedder, intake, store = HashingEmbedder(dims=2), _Intake(), InMemoryEventStore()
    writer = GroupCommitWriter(store, index=IndexModel(embedder.model_id, 2))
    writer.start()
    try:
        await writer.submit("acme", [c.CreateSpace(space_id="notes")])
        await writer.submit("acme", [
            c.ImportMemory(space_id="notes", item_id=ITEM, kind="fact", content="v0",
                           model=embedder.model_id, dims=2, vector=(0.6, 0.8)),
            _revision(content="version 2", model=embedder.model_id)])
    finally:
        writer.stop()
    logged = _Logged(store)
    enricher = Enricher(cast(Any, None), Subjects(), embedder, cast(IntakeClient, intake),
                        reading=Reading(logged=logged))

    await enricher.handle(cast(Any, [_revised(ITEM, 2), _revised(ITEM, 3)]))

    embedded = [(cmd.item_id, cmd.item_version) for cmd in intake.sent
                if isinstance(cmd, c.RecordEmbedding)]
    assert embedded == [(ITEM, 3)]  # version 3 was not imported: embedded as ever
    assert logged.asked == [[ITEM, ITEM]]
