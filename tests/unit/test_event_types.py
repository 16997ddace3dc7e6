"""Event types are named constants, and every reader gets one decoded, current-version event."""

import ast
from pathlib import Path

import orjson
import pytest

from memledger_platform.events import CURRENT_VERSION, VECTOR, Event, decode
from memledger_schemas.event_types import EventType
from memledger_schemas.events import CATALOGUE

SERVICES = Path(__file__).resolve().parents[2] / "services"


def envelope(event_type: str, version: int, payload: dict[str, object]) -> dict[str, object]:
    return {"event_type": event_type, "schema_version": version, "global_position": 7,
            "recorded_at": "2025-03-01T12:00:00+00:00", "event_id": "e-7",
            "stream_id": "0190a000-0000-7000-8000-000000000001", "stream_version": 2,
            "tenant_id": "acme", "space_id": "notes", "actor": "tester",
            "correlation_id": "req-1", "subject_id": "user:ada", "key_id": "k1",
            "payload": payload}


def test_the_event_type_constants_name_exactly_the_catalogued_events() -> None:
    assert {t.value for t in EventType} == set(CATALOGUE)


def test_the_upcasting_registry_lifts_every_event_type_to_its_catalogued_version() -> None:
    assert {t: CURRENT_VERSION.get(t, 1) for t in CATALOGUE} == {
        t: model.schema_version for t, model in CATALOGUE.items()}


def _bare_event_types(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    in_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                   for part in node.values}
    return [f"{path.relative_to(SERVICES)}:{node.lineno} {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in CATALOGUE and id(node) not in in_fstrings]


def test_no_service_module_names_an_event_type_with_a_bare_string() -> None:
    modules = [p for p in SERVICES.rglob("*.py") if "grpc" not in p.parts]
    assert len(modules) > 50
    assert [hit for path in modules for hit in _bare_event_types(path)] == []


def test_decoding_upcasts_an_old_payload_so_a_reader_sees_only_the_current_shape() -> None:
    stored = envelope("conversation.message_appended", 1, {
        "session_id": "s", "message_id": "m", "role": "user", "text": "hello"})

    event = decode(orjson.dumps(stored))

    assert event.schema_version == 2
    assert event.payload == {"session_id": "s", "message_id": "m", "role": "user",
                             "content": "hello", "participant": None}


def test_decoding_keeps_every_envelope_field_a_reader_needs() -> None:
    event = decode(envelope("space.created", 1, {"name": "Notes"}))

    assert (event.position, event.event_type, event.stream_version, event.correlation_id,
            event.subject_id, event.key_id, event.recorded_at.isoformat()) == (
        7, EventType.SPACE_CREATED, 2, "req-1", "user:ada", "k1", "2025-03-01T12:00:00+00:00")
    with pytest.raises(AttributeError):
        event.position = 8  # type: ignore[misc]


def test_what_a_reader_skips_is_dropped_before_the_document_is_opened() -> None:
    seen: list[dict[str, object]] = []

    def opener(document: dict[str, object]) -> dict[str, object]:
        seen.append(dict(document["payload"]))  # type: ignore[call-overload]
        return document

    stored = orjson.dumps(envelope("memory.embedded", 1, {
        "item_id": "i", "item_version": 1, "model": "m", "vector": [0.5, 0.5]}))
    event = decode(stored, position=9, recorded_at=None, opener=opener, skip=VECTOR)

    assert seen == [{"item_id": "i", "item_version": 1, "model": "m"}]
    assert isinstance(event, Event)
    assert event.position == 9
    assert "vector" not in event.payload


def test_a_document_that_is_no_envelope_does_not_decode() -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        decode(b'{"event_type": "memory.asserted"}')
