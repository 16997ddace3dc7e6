"""The one decoded event every reader folds: ``decode`` makes it, once, from stored or relayed
bytes (or an already parsed envelope document).

Decoding parses the JSON once (orjson, no pydantic: it is on every hot read path), drops the
payload fields the reader never reads (before opening: opening a rebuild's sealed embedding
vectors was almost half of opening its log), opens sealed personal fields (``crypto.Opener``)
and upcasts the payload to the current version of its event type with the registry
(``memledger_schemas.upcasting``). A handler therefore sees only current payload shapes.
"""

from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any, NamedTuple

import orjson

from memledger_schemas.upcasting import UPCASTERS, upcast

Opening = Callable[[dict[str, Any]], dict[str, Any]]
"""What opens a document's sealed fields (``crypto.Opener``)."""

CURRENT_VERSION: dict[str, int] = {}
"""The schema version a handler sees, per event type with older versions (every other type is
at version 1): one past the registry's last upcaster. Taken from the registry, not from the
catalogue, so that a reader needs no pydantic (a rebuild's fold workers import this)."""
for _type, _from in UPCASTERS:
    CURRENT_VERSION[_type] = max(CURRENT_VERSION.get(_type, 1), _from + 1)

VECTOR = ("vector",)
"""What the relational read models never read: an embedding's vector (``skip=VECTOR``)."""


class Event(NamedTuple):
    """One committed event as every reader sees it: envelope fields decoded, sealed fields
    opened, the payload at its event type's current ``schema_version``. Immutable; a named
    tuple because it is made for every event of a rebuild (a frozen dataclass took ten times
    as long to build)."""

    position: int
    recorded_at: datetime
    event_type: str
    event_id: str
    tenant_id: str
    space_id: str
    actor: str
    session_id: str | None
    agent_id: str | None
    valid_from: datetime | None
    valid_to: datetime | None
    payload: dict[str, Any]
    schema_version: int = 1
    stream_id: str | None = None
    stream_version: int = 0
    subject_id: str | None = None
    key_id: str | None = None
    idempotency_key: str | None = None
    correlation_id: str | None = None
    causation_id: str | None = None
    traceparent: str | None = None

    @property
    def cause(self) -> tuple[tuple[str, str], ...]:
        """Who and what made a read-model row (kept beside it)."""
        return (("actor", self.actor), ("event_id", self.event_id),
                ("event_type", self.event_type))


def decode(source: bytes | dict[str, Any], *, position: int | None = None,
           recorded_at: datetime | None = None, opener: Opening | None = None,
           skip: Collection[str] = ()) -> Event:
    """The ``Event`` of an envelope: ``source`` is its JSON (stored, relayed or exported) or
    that JSON already parsed (then used, not copied). ``position`` and ``recorded_at``: the
    commit fields as a store row holds them (the stored JSON leaves them out); otherwise they
    are read from the document. ``skip``: payload fields dropped unread (e.g. ``VECTOR``).

    Raises ``ValueError``, ``KeyError`` or ``TypeError`` on a document that is no envelope."""
    document = orjson.loads(source) if isinstance(source, bytes) else source
    if skip and isinstance(payload := document.get("payload"), dict):
        for name in skip:
            payload.pop(name, None)
    if opener is not None:
        document = opener(document)
    event_type = document["event_type"]
    version, payload = document.get("schema_version"), document["payload"]
    if version is None:  # an envelope written by hand (tests): taken as current
        version = CURRENT_VERSION.get(event_type, 1)
    elif (event_type, version) in UPCASTERS:
        version, payload = upcast(event_type, version, payload)
    get = document.get  # a dozen lookups for every event of a rebuild
    return Event(
        document["global_position"] if position is None else position,
        _instant(document["recorded_at"]) or datetime.min if recorded_at is None
        else recorded_at,
        event_type, str(document["event_id"]), document["tenant_id"], document["space_id"],
        document["actor"], _text(get("session_id")), get("agent_id"),
        _instant(get("valid_from")), _instant(get("valid_to")), payload,
        version, get("stream_id"), get("stream_version", 0), get("subject_id"),
        get("key_id"), get("idempotency_key"), get("correlation_id"), get("causation_id"),
        get("traceparent"))


def _instant(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
