"""What the enricher makes of one event: which events carry a text worth enriching, and the
commands it answers with (same event, same commands, same idempotency keys)."""

from typing import Any
from uuid import UUID

import pytest

from memledger_enricher.plan import (
    ACTOR,
    EXTRACTOR,
    Source,
    commands_for,
    mentions,
    source_of,
)
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.events import decode
from memledger_schemas.commands import (
    CommandBase,
    RecordEmbedding,
    RecordEntities,
    RecordMessageEmbedding,
    RecordPreference,
)
from memledger_schemas.events import ExtractedEntity

ITEM = "0190a000-0000-7000-8000-0000000000a1"
MESSAGE = "0190a000-0000-7000-8000-0000000000e1"
SESSION = "0190a000-0000-7000-8000-0000000000c1"
EVENT = "0190a000-0000-7000-8000-0000000000f1"
EMBEDDER = HashingEmbedder(dims=8)
ADA = "My name is Ada Lovelace and I work at Analytical Engines"


def document(event_type: str, payload: dict[str, Any], *, version: int = 3,
             **fields: Any) -> dict[str, Any]:
    """A relayed envelope of tenant acme, space notes, at stream version ``version``."""
    return {"event_type": event_type, "event_id": EVENT, "tenant_id": "acme",
            "space_id": "notes", "stream_version": version, "actor": "tester",
            "global_position": 1, "recorded_at": "2025-01-01T00:00:00+00:00",
            "payload": payload, **fields}


def asserted(content: str, version: int = 1) -> dict[str, Any]:
    return document("memory.asserted", {"item_id": ITEM, "kind": "fact", "content": content},
                    version=version)


def revised(version: int = 3, **payload: Any) -> dict[str, Any]:
    return document("memory.revised", {"item_id": ITEM, **payload}, version=version)


def message(role: str, content: str) -> dict[str, Any]:
    return document("conversation.message_appended", {
        "session_id": SESSION, "message_id": MESSAGE, "role": role, "content": content},
        version=7)


def said(role: str, text: str) -> Source:
    """The source a message of ``role`` makes."""
    return Source("acme", "notes", UUID(MESSAGE), None, text, EVENT, session_id=UUID(SESSION),
                  role=role)


def plan(document: dict[str, Any]) -> list[CommandBase]:
    source = source_of(decode(document))
    assert source is not None
    vector = EMBEDDER.embed_query(source.text) if source.embeds else None
    return commands_for(source, vector, EMBEDDER.model_id)


def of_type(commands: list[CommandBase], kind: type[CommandBase]) -> list[Any]:
    return [c for c in commands if isinstance(c, kind)]


# --- sources ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("event", "expected"), [
    (asserted("Alice works at Acme"), Source("acme", "notes", UUID(ITEM), 1,
                                            "Alice works at Acme", EVENT)),
    (revised(content="Alice works at Globex"), Source("acme", "notes", UUID(ITEM), 3,
                                                      "Alice works at Globex", EVENT)),
    (message("user", "I prefer tea"), said("user", "I prefer tea")),
    (document("conversation.message_appended", {
        "session_id": SESSION, "message_id": MESSAGE, "role": "user", "text": "I prefer tea"},
        schema_version=1),
     said("user", "I prefer tea")),
    (message("assistant", "I prefer to answer briefly"),
     said("assistant", "I prefer to answer briefly")),
    (message("tool", "42 rows"), said("tool", "42 rows")),
], ids=["asserted", "revised with content", "user message", "user message as text",
        "assistant message", "tool message"])
def test_these_events_carry_a_text_to_enrich(event: dict[str, Any], expected: Source) -> None:
    assert source_of(decode(event)) == expected


@pytest.mark.parametrize("event", [
    message("user", ""),
    revised(importance=0.9),
    revised(content=None, tags=["work"]),
    document("memory.retracted", {"item_id": ITEM, "reason": "wrong"}),
    document("memory.embedded", {"item_id": ITEM, "item_version": 1, "model": "m", "dims": 1,
                                 "vector": [1.0]}),
    document("preference.extracted", {"source_item_id": ITEM, "value": "I prefer tea"}),
    document("session.started", {"session_id": "s1"}),
], ids=["empty message", "revision of importance",
        "revision of tags", "retraction", "its own embedding", "its own preference",
        "another event"])
def test_these_events_carry_nothing_to_enrich(event: dict[str, Any]) -> None:
    assert source_of(decode(event)) is None


def test_the_correlation_id_of_the_event_is_kept_when_it_has_one() -> None:
    event = {**asserted("Alice works at Acme"), "correlation_id": "req-42"}
    source = source_of(decode(event))
    assert source is not None
    assert source.correlation_id == "req-42"
    assert {c.correlation_id for c in plan(event)} == {"req-42"}


# --- commands ---------------------------------------------------------------------------------

def test_an_asserted_item_is_embedded_at_its_version_with_as_many_dims_as_the_vector() -> None:
    [embedding] = of_type(plan(asserted("Alice works at Acme", version=1)), RecordEmbedding)
    assert (embedding.item_id, embedding.item_version, embedding.space_id) == (
        UUID(ITEM), 1, "notes")
    assert embedding.model == EMBEDDER.model_id
    assert embedding.dims == len(embedding.vector) == 8
    assert list(embedding.vector) == EMBEDDER.embed_query("Alice works at Acme")
    assert embedding.actor == ACTOR


def test_a_revised_content_is_embedded_at_the_revisions_stream_version() -> None:
    [embedding] = of_type(plan(revised(version=5, content="Alice works at Globex")),
                          RecordEmbedding)
    assert embedding.item_version == 5


@pytest.mark.parametrize("event", [
    asserted(ADA), revised(content=ADA, version=4), message("user", ADA),
    asserted("I prefer tea. I live in Lisbon"),
], ids=["asserted", "revised", "message", "two preferences"])
def test_the_same_event_twice_gives_equal_commands_with_the_same_keys(
        event: dict[str, Any]) -> None:
    first, again = plan(event), plan(dict(event))
    assert first == again
    keys = [c.idempotency_key for c in first]
    assert all(keys)
    assert len(set(keys)) == len(keys)


def test_keys_differ_between_versions_of_an_item() -> None:
    one = {c.idempotency_key for c in plan(asserted(ADA, version=1))}
    two = {c.idempotency_key for c in plan(revised(content=ADA, version=2))}
    assert one.isdisjoint(two)


def test_a_stated_preference_is_recorded_with_its_rule_and_source() -> None:
    [preference] = of_type(plan(asserted("I prefer green tea in the morning.")),
                           RecordPreference)
    assert (preference.rule_id, preference.category, preference.value) == (
        "prefer", "preference", "green tea in the morning")
    assert preference.confidence == 0.95
    assert preference.source_item_id == UUID(ITEM)


def test_an_item_naming_a_person_and_a_company_records_them_as_typed_entities() -> None:
    commands = plan(asserted(ADA, version=2))
    [entities] = of_type(commands, RecordEntities)
    assert (entities.item_version, entities.extractor) == (2, EXTRACTOR)
    assert set(entities.entities) == {ExtractedEntity(name="Ada Lovelace", type="person"),
                                      ExtractedEntity(name="Analytical Engines",
                                                      type="organization")}
    assert [(p.category, p.value) for p in of_type(commands, RecordPreference)] == [
        ("profile.name", "Ada Lovelace"), ("profile.company", "Analytical Engines")]


def test_a_user_message_is_only_embedded_here_the_extractor_reads_what_it_says() -> None:
    commands = plan(message("user", ADA))
    assert [type(c).__name__ for c in commands] == ["RecordMessageEmbedding"]


def test_a_message_is_embedded_naming_its_session_and_message_with_its_own_key() -> None:
    [embedding] = of_type(plan(message("user", "I prefer tea")), RecordMessageEmbedding)
    assert (embedding.space_id, embedding.session_id, embedding.message_id) == (
        "notes", UUID(SESSION), UUID(MESSAGE))
    assert list(embedding.vector) == EMBEDDER.embed_query("I prefer tea")
    assert embedding.dims == 8
    assert embedding.idempotency_key == f"enricher/embed/{MESSAGE}/0/{EMBEDDER.model_id}"


@pytest.mark.parametrize("role", ["assistant", "system", "tool"])
def test_a_message_not_said_by_the_user_is_only_embedded(role: str) -> None:
    commands = plan(message(role, "My name is Ada Lovelace and I prefer tea"))
    assert [type(c) for c in commands] == [RecordMessageEmbedding]


def test_an_item_with_nothing_to_extract_is_only_embedded() -> None:
    commands = plan(asserted("the build takes nine minutes"))
    assert [type(c) for c in commands] == [RecordEmbedding]


def test_without_a_vector_an_item_gets_no_embedding_command() -> None:
    source = source_of(decode(asserted(ADA)))
    assert source is not None
    assert of_type(commands_for(source, None, "m"), RecordEmbedding) == []
    assert len(of_type(commands_for(source, None, "m"), RecordEntities)) == 1


# --- mentions ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    (ADA, [("Ada Lovelace", "person"), ("Analytical Engines", "organization")]),
    ("I live in Lisbon and I speak Portuguese", [("Lisbon", "place"),
                                                  ("Portuguese", "language")]),
    ("lunch with Grace Hopper at the Navy Yard", [("Grace Hopper", "mention"),
                                                   ("Navy Yard", "mention")]),
    ("My name is Ada Lovelace. Ada likes maths", [("Ada Lovelace", "person")]),
    ("I think so. Yes, we do", []),
    ("the build takes nine minutes", []),
], ids=["profile rules", "place and language", "capitalised phrases", "a part of a typed name",
        "pronouns and fillers", "nothing capitalised"])
def test_mentions_are_typed_by_profile_rules_and_otherwise_untyped(
        text: str, expected: list[tuple[str, str]]) -> None:
    assert [(e.name, e.type) for e in mentions(text)] == expected


def test_a_message_is_embedded_as_a_reader_sees_it_and_its_rules_read_what_was_said() -> None:
    event = message("user", "I prefer green tea")
    event["payload"]["participant"] = "Dana"
    source = source_of(decode(event))
    assert source is not None
    assert source.embedded_text == "Dana: I prefer green tea"
    assert source.text == "I prefer green tea"
    unnamed = source_of(decode(message("user", "I prefer green tea")))
    assert unnamed is not None
    assert unnamed.embedded_text == "I prefer green tea"
    item = source_of(decode(asserted("Alice works at Acme")))
    assert item is not None
    assert item.embedded_text == "Alice works at Acme"
