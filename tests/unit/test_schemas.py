"""Published contracts: JSON Schema snapshots, the event catalogue, upcasting, the envelope,
commands and NATS subjects."""

import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest
from pydantic import ValidationError

from memledger_schemas import commands as c
from memledger_schemas.envelope import EventEnvelope
from memledger_schemas.events import (
    CATALOGUE,
    CURRENT,
    HISTORIC,
    ConversationMessageAppended,
    RetrievalPerformed,
)
from memledger_schemas.snapshots import SNAPSHOT_DIR, expected
from memledger_schemas.subjects import Subjects

NEVER_EDIT = ("a published event version never changes: add a new schema_version with an "
              "upcaster (and a CHANGELOG line), then run `python -m memledger_schemas.snapshots "
              "--write`; do not edit a published model")
SESSION, MESSAGE = UUID(int=1), UUID(int=2)


# --- snapshots and catalogue ----------------------------------------------------------------


def test_the_committed_snapshot_files_are_exactly_the_expected_ones() -> None:
    committed = {path.name for path in SNAPSHOT_DIR.glob("*.json")}

    assert committed == set(expected()), NEVER_EDIT


@pytest.mark.parametrize("name", sorted(expected()))
def test_each_committed_snapshot_equals_its_model(name: str) -> None:
    path = SNAPSHOT_DIR / name
    assert path.exists(), f"{name} has no committed snapshot; {NEVER_EDIT}"

    committed = json.loads(path.read_text())

    assert committed == json.loads(json.dumps(expected()[name])), f"{name} changed; {NEVER_EDIT}"


def test_every_current_payload_has_its_own_event_type() -> None:
    types = [payload.event_type for payload in CURRENT]

    assert len(types) == len(set(types))


def test_the_catalogue_maps_every_event_type_to_its_current_version() -> None:
    assert set(CATALOGUE.values()) == set(CURRENT)
    for event_type, payload in CATALOGUE.items():
        assert payload.event_type == event_type


@pytest.mark.parametrize("old", HISTORIC, ids=lambda m: f"{m.event_type}.v{m.schema_version}")
def test_a_historic_version_is_older_than_the_current_one_of_its_type(old: Any) -> None:
    assert CATALOGUE[old.event_type].schema_version > old.schema_version


# --- envelope and upcasting -----------------------------------------------------------------


def envelope_fields(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "event_id": UUID(int=10), "event_type": "conversation.message_appended",
        "schema_version": 2, "stream_id": UUID(int=11), "stream_version": 1,
        "tenant_id": "acme", "space_id": "notes", "actor": "api",
        "payload": {"session_id": str(SESSION), "message_id": str(MESSAGE), "role": "user",
                    "content": "hello"},
    }
    return fields | overrides


def test_a_v1_message_is_read_as_the_current_v2_with_text_renamed_to_content() -> None:
    v1 = {"session_id": str(SESSION), "message_id": str(MESSAGE), "role": "user",
          "text": "hello"}
    envelope = EventEnvelope.model_validate(envelope_fields(schema_version=1, payload=v1))

    payload = envelope.typed_payload()

    assert isinstance(payload, ConversationMessageAppended)
    assert payload.schema_version == 2
    assert (payload.content, payload.participant) == ("hello", None)
    assert (payload.session_id, payload.message_id, payload.role) == (SESSION, MESSAGE, "user")
    assert envelope.payload == v1, "upcasting happens on read; the stored payload is untouched"


def test_a_v1_retrieval_is_read_as_a_v2_search_whose_request_is_unknown() -> None:
    v1 = {"retrieval_id": str(UUID(int=12)), "query": "tea?", "policy_version": "p1",
          "basis": {"position": 5, "recorded_at": None, "valid_at": "2026-01-01T00:00:00Z"},
          "item_ids": [str(UUID(int=13)), str(UUID(int=14))], "scores": [0.9, 0.4]}
    envelope = EventEnvelope.model_validate(envelope_fields(
        event_type="retrieval.performed", schema_version=1, payload=v1))

    payload = envelope.typed_payload()

    assert isinstance(payload, RetrievalPerformed)
    assert (payload.operation, payload.query, payload.parameters) == ("search", "tea?", {})
    assert [(r.ref, r.score, r.section) for r in payload.results] == [
        (str(UUID(int=13)), 0.9, "results"), (str(UUID(int=14)), 0.4, "results")]


def test_a_current_payload_is_read_as_is() -> None:
    envelope = EventEnvelope.model_validate(envelope_fields())

    payload = envelope.typed_payload()

    assert isinstance(payload, ConversationMessageAppended)
    assert payload.content == "hello"


def test_a_valid_envelope_keeps_datetimes_in_utc() -> None:
    recorded = datetime.fromisoformat("2026-01-01T02:00:00+02:00")

    envelope = EventEnvelope.model_validate(envelope_fields(recorded_at=recorded))

    assert envelope.recorded_at == recorded
    assert envelope.recorded_at is not None
    assert envelope.recorded_at.tzinfo == UTC


@pytest.mark.parametrize("overrides", [
    pytest.param({"surprise": 1}, id="extra_field"),
    pytest.param({"recorded_at": datetime(2026, 1, 1)}, id="naive_recorded_at"),
    pytest.param({"valid_from": "2026-01-01T00:00:00"}, id="naive_valid_from_string"),
    pytest.param({"valid_from": datetime(2026, 1, 2, tzinfo=UTC),
                  "valid_to": datetime(2026, 1, 1, tzinfo=UTC)}, id="valid_to_before_from"),
    pytest.param({"valid_from": datetime(2026, 1, 1, tzinfo=UTC),
                  "valid_to": datetime(2026, 1, 1, tzinfo=UTC)}, id="empty_interval"),
    pytest.param({"tenant_id": "a.b"}, id="tenant_with_dot"),
    pytest.param({"stream_version": 0}, id="stream_version_zero"),
])
def test_the_envelope_refuses_malformed_events(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        EventEnvelope.model_validate(envelope_fields(**overrides))


def test_the_envelope_is_immutable() -> None:
    envelope = EventEnvelope.model_validate(envelope_fields())

    with pytest.raises(ValidationError):
        envelope.actor = "someone else"  # type: ignore[misc]


# --- commands -------------------------------------------------------------------------------

MEMORY = {"command": "assert_memory", "space_id": "notes", "kind": "fact", "content": "x"}
ITEM = str(UUID(int=3))
EMBEDDING = {"command": "record_embedding", "space_id": "notes", "item_id": ITEM,
             "item_version": 1, "model": "mini", "dims": 2, "vector": [0.6, 0.8]}
ENTITIES = {"command": "record_entities", "space_id": "notes", "item_id": ITEM,
            "item_version": 1, "extractor": "rules",
            "entities": [{"name": "Alice", "type": "person"}]}
PREFERENCE = {"command": "record_preference", "space_id": "notes", "source_item_id": ITEM,
              "rule_id": "likes", "category": "food", "value": "tea", "confidence": 0.7}


@pytest.mark.parametrize("space_id", ["", "a.b", "a b", "a*", "a>", "x" * 65, "ümlaut"])
def test_a_command_refuses_a_space_id_that_is_not_a_slug(space_id: str) -> None:
    with pytest.raises(ValidationError):
        c.CreateSpace(space_id=space_id)


@pytest.mark.parametrize("space_id", ["a", "A-b_9", "x" * 64])
def test_a_command_accepts_a_slug(space_id: str) -> None:
    assert c.CreateSpace(space_id=space_id).space_id == space_id


@pytest.mark.parametrize("body", [
    pytest.param(MEMORY | {"kind": "rumour"}, id="bad_kind"),
    pytest.param(MEMORY | {"content": ""}, id="empty_content"),
    pytest.param(MEMORY | {"content": "x" * 65_537}, id="content_too_long"),
    pytest.param(MEMORY | {"valid_from": "2026-01-01T00:00:00"}, id="naive_valid_from"),
    pytest.param(MEMORY | {"valid_from": "2026-01-02T00:00:00Z",
                           "valid_to": "2026-01-01T00:00:00Z"}, id="interval_backwards"),
    pytest.param(MEMORY | {"confidence": 1.5}, id="confidence_above_one"),
    pytest.param(MEMORY | {"tags": ["has space"]}, id="tag_with_space"),
    pytest.param(MEMORY | {"surprise": True}, id="extra_field"),
    pytest.param(MEMORY | {"expected_version": -1}, id="negative_expected_version"),
    pytest.param({"command": "revise_memory", "space_id": "notes", "item_id": ITEM},
                 id="revision_without_change"),
    pytest.param({"command": "revise_memory", "space_id": "notes", "item_id": ITEM,
                  "reason": "only a reason"}, id="revision_with_only_a_reason"),
    pytest.param({"command": "retract_memory", "space_id": "notes", "item_id": ITEM,
                  "valid_until": "2026-01-01T00:00:00"}, id="naive_valid_until"),
    pytest.param({"command": "record_feedback", "space_id": "notes", "item_id": ITEM,
                  "signal": "rating"}, id="rating_signal_without_rating"),
    pytest.param({"command": "record_feedback", "space_id": "notes", "item_id": ITEM,
                  "signal": "used", "rating": 3}, id="rating_without_rating_signal"),
    pytest.param({"command": "record_feedback", "space_id": "notes", "item_id": ITEM,
                  "signal": "rating", "rating": 6}, id="rating_out_of_range"),
    pytest.param(EMBEDDING | {"item_version": 0}, id="embedding_of_version_zero"),
    pytest.param(EMBEDDING | {"dims": 0, "vector": []}, id="embedding_of_no_dims"),
    pytest.param(EMBEDDING | {"dims": 8_193, "vector": [0.0] * 8_193},
                 id="embedding_of_too_many_dims"),
    pytest.param(EMBEDDING | {"vector": [0.6, float("nan")]}, id="embedding_not_finite"),
    pytest.param(EMBEDDING | {"model": ""}, id="embedding_without_model"),
    pytest.param(ENTITIES | {"entities": [{"name": "A", "type": "t"}] * 257},
                 id="too_many_entities"),
    pytest.param(ENTITIES | {"entities": [{"name": "A"}]}, id="entity_without_type"),
    pytest.param(PREFERENCE | {"confidence": 1.5}, id="preference_confidence_above_one"),
    pytest.param(PREFERENCE | {"source_item_id": "not-a-uuid"}, id="preference_bad_source"),
])
def test_a_malformed_command_is_refused(body: dict[str, Any]) -> None:
    model = c.BY_NAME[body["command"]]

    with pytest.raises(ValidationError):
        model.model_validate(body)


@pytest.mark.parametrize("body", [
    pytest.param(MEMORY | {"valid_from": "2026-01-01T00:00:00+02:00"}, id="offset_datetime"),
    pytest.param({"command": "revise_memory", "space_id": "notes", "item_id": ITEM,
                  "importance": 0.2}, id="revision_of_one_attribute"),
    pytest.param({"command": "record_feedback", "space_id": "notes", "item_id": ITEM,
                  "signal": "rating", "rating": 5}, id="rating_with_signal"),
    pytest.param({"command": "record_feedback", "space_id": "notes", "item_id": ITEM,
                  "signal": "unused"}, id="signal_without_rating"),
    pytest.param(EMBEDDING, id="embedding"),
    pytest.param(EMBEDDING | {"dims": 8_192, "vector": [1.0] + [0.0] * 8_191},
                 id="embedding_of_most_dims"),
    pytest.param(ENTITIES, id="entities"),
    pytest.param(ENTITIES | {"entities": []}, id="no_entities_found"),
    pytest.param(PREFERENCE, id="preference"),
])
def test_a_well_formed_command_is_accepted(body: dict[str, Any]) -> None:
    command = c.BY_NAME[body["command"]].model_validate(body)

    assert command.model_dump()["command"] == body["command"]


@pytest.mark.parametrize("vector", [[0.6], [0.6, 0.8, 0.0]])
def test_an_embedding_whose_vector_length_is_not_dims_is_refused_at_the_vector(
        vector: list[float]) -> None:
    with pytest.raises(ValidationError) as refusal:
        c.RecordEmbedding.model_validate(EMBEDDING | {"vector": vector})

    (error,) = refusal.value.errors()
    assert error["loc"] == ("vector",)
    assert f"{len(vector)} entries but dims is 2" in error["msg"]


def test_every_command_is_reachable_by_its_name() -> None:
    assert set(c.BY_NAME.values()) == set(c.COMMANDS)
    assert len(c.BY_NAME) == len(c.COMMANDS)


@pytest.mark.parametrize("count", [0, c.MAX_BATCH + 1])
def test_a_batch_refuses_too_few_or_too_many_commands(count: int) -> None:
    with pytest.raises(ValidationError):
        c.CommandBatch.model_validate({"commands": [MEMORY] * count})


@pytest.mark.parametrize("count", [1, c.MAX_BATCH])
def test_a_batch_accepts_from_one_to_the_maximum_number_of_commands(count: int) -> None:
    batch = c.CommandBatch.model_validate({"commands": [MEMORY] * count})

    assert len(batch.commands) == count
    assert all(isinstance(command, c.AssertMemory) for command in batch.commands)


def test_a_batch_picks_each_command_model_by_its_tag() -> None:
    batch = c.CommandBatch.model_validate({"commands": [
        {"command": "create_space", "space_id": "notes"}, MEMORY]})

    assert [type(command) for command in batch.commands] == [c.CreateSpace, c.AssertMemory]


def test_a_batch_picks_the_enrichment_commands_by_their_tags() -> None:
    batch = c.CommandBatch.model_validate({"commands": [EMBEDDING, ENTITIES, PREFERENCE]})

    assert [type(command) for command in batch.commands] == [
        c.RecordEmbedding, c.RecordEntities, c.RecordPreference]


# --- subjects -------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["memledger", "t0a1b2c3", "my-app"])
def test_an_intake_subject_parses_back_to_its_tenant_and_command(prefix: str) -> None:
    subjects = Subjects(prefix)

    assert subjects.parse_intake(subjects.intake("acme", "assert_memory")) == (
        "acme", "assert_memory")


@pytest.mark.parametrize("subject", [
    "memledger.evt.acme.notes.memory.asserted",
    "memledger.dlq.intake.acme",
    "memledger.in.acme",
    "memledger.in.acme.assert_memory.extra",
    "other.in.acme.assert_memory",
    "memledgerx.in.acme.assert_memory",
    "",
])
def test_parse_intake_refuses_a_subject_that_is_not_an_intake_subject(subject: str) -> None:
    assert Subjects().parse_intake(subject) is None


@pytest.mark.parametrize("prefix", ["memledger", "my-app"])
def test_a_service_intake_subject_parses_back_and_is_never_a_tenants(prefix: str) -> None:
    subjects = Subjects(prefix)
    subject = subjects.service_intake("enricher", "acme", "record_embedding")

    assert subjects.parse_service_intake(subject) == ("enricher", "acme", "record_embedding")
    assert subjects.parse_intake(subject) is None
    assert subjects.parse_service_intake(subjects.intake("acme", "create_space")) is None
    assert subjects.parse_service_intake(f"{subject}.extra") is None


def test_stream_names_are_derived_from_the_prefix() -> None:
    subjects = Subjects("my-app")

    assert (subjects.events_stream, subjects.intake_stream, subjects.dead_letter_stream) == (
        "MY_APP_EVENTS", "MY_APP_INTAKE", "MY_APP_DLQ")
    assert subjects.event("acme", "notes", "memory.asserted") == (
        "my-app.evt.acme.notes.memory.asserted")


@pytest.mark.parametrize("body", [
    {"content": "a\x00b"},
    {"content": "ok", "triple": {"subject": "a\x00", "predicate": "p", "object": "o"}},
    {"content": "ok", "tags": ["x\x00"]},
    {"content": "ok", "tags": ["a", "b", "x\x00"]},
])
def test_a_nul_character_is_refused_naming_the_field(body: dict[str, object]) -> None:
    # PostgreSQL text and jsonb refuse NUL: such a write could never be projected.
    with pytest.raises(ValidationError) as refused:
        c.AssertMemory.model_validate({"space_id": "s", "kind": "fact", **body})
    assert refused.value.errors()[0]["loc"][0] in body


def test_a_nul_is_found_beside_numbers_and_a_list_of_numbers_alone_holds_none() -> None:
    from memledger_schemas.commands import _has_nul

    assert not _has_nul([0.5] * 384)
    assert not _has_nul((1, 2.0, True))
    assert _has_nul([0.5, 1, "a\x00"])
    assert _has_nul([[0.5], {"k": [2, "\x00"]}])
