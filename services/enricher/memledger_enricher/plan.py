"""What the enricher makes of one event: pure, so the same event always yields the same
commands with the same idempotency keys (a redelivered event, or one seen again after a
restart, is answered from the first commit instead of being recorded twice).

- a memory item's content (asserted, or revised with new content) is embedded
  (``record_embedding``) and scanned for entity mentions (``record_entities``);
- every conversation message (any role) is embedded (``record_message_embedding``), so that
  search finds it by meaning;
- a memory item's content is scanned by the extraction rules (``record_preference``); what
  is said in a conversation is read by the extractor (``forming_service``), which derives
  memory items from it.
"""

import re
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from memledger_enricher.extraction import Extraction, extract
from memledger_platform.crypto import ERASED
from memledger_platform.events import Event
from memledger_platform.vectorindex.port import message_text
from memledger_schemas.commands import (
    CommandBase,
    RecordEmbedding,
    RecordEntities,
    RecordMessageEmbedding,
    RecordPreference,
)
from memledger_schemas.event_types import EventType
from memledger_schemas.events import ExtractedEntity

EVENT_TYPES = (EventType.MEMORY_ASSERTED, EventType.MEMORY_REVISED, EventType.MESSAGE_APPENDED)
"""The events the enricher reads; it ignores every other (including its own results)."""
EMBEDDED = EventType.MEMORY_EMBEDDED
"""Read too, to skip what is embedded already: an import records an item version's embedding
in the same commit as the version, just after it (``embedded_already``). The two may still come
in two fetched batches (the relay publishes one event at a time): an item version whose
embedding is not in its batch is looked up in the log (``logged.LoggedEmbeddings``)."""

EXTRACTOR = "mentions/v1"
ACTOR = "enricher"


@dataclass(frozen=True)
class Source:
    """A text to enrich, and where it came from."""

    tenant: str
    space: str
    item_id: UUID
    """The memory item, or the conversation message."""
    item_version: int | None
    """The item's stream version that set this content; ``None`` for a message."""
    text: str
    correlation_id: str
    subject: str | None = None
    """The data subject of the text: what is learned from it belongs to them too."""
    key_id: str | None = None
    """The key that sealed the text (what is learned is refused once it is destroyed)."""
    session_id: UUID | None = None
    """A message's session (``None`` for an item)."""
    role: str | None = None
    """A message's role (``None`` for an item)."""
    participant: str | None = None
    """Who said a message (``None``: nobody named, or an item)."""

    @property
    def embedded_text(self) -> str:
        """What is embedded: an item's content; a message as a reader sees it, who said it
        first (``message_text``)."""
        return message_text(self.participant, self.text)

    @property
    def embeds(self) -> bool:
        return True

    @property
    def extracts(self) -> bool:
        """Whether the extraction rules read it here: an item's content. (What is said in a
        conversation is the extractor's: ``forming_service`` derives memories from it.)"""
        return self.session_id is None


def source_of(event: Event) -> Source | None:
    """The text an event carries worth enriching, or ``None``."""
    payload = event.payload
    text = payload.get("content")
    if not text or text == ERASED:
        # Erased before it was enriched (nothing left to learn from), or a revision of
        # attributes only (the embedding still holds).
        return None
    if event.event_type == EventType.MESSAGE_APPENDED:
        return replace(_source(event, UUID(str(payload["message_id"])), None, text),
                       session_id=UUID(str(payload["session_id"])), role=payload.get("role"),
                       participant=payload.get("participant"))
    if event.event_type in (EventType.MEMORY_ASSERTED, EventType.MEMORY_REVISED):
        return _source(event, UUID(str(payload["item_id"])), event.stream_version, text)
    return None


def _source(event: Event, item_id: UUID, version: int | None, text: str) -> Source:
    return Source(event.tenant_id, event.space_id, item_id, version, text,
                  event.correlation_id or event.event_id, event.subject_id, event.key_id)


Embedded = tuple[str, UUID, int]
"""(tenant, item id, item version) of an embedding."""


def embedding_of(event: Event, model: str) -> Embedded | None:
    """What a ``memory.embedded`` event embedded, if it is of ``model``."""
    payload = event.payload
    if event.event_type != EMBEDDED or payload.get("model") != model:
        return None
    return event.tenant_id, UUID(str(payload["item_id"])), int(payload["item_version"])


def maybe_imported(source: Source) -> bool:
    """Whether ``source`` is an item version, which an import may have recorded (its first,
    or a revision's) with its embedding, committed just after it but not always fetched in
    the same batch."""
    return source.session_id is None and source.item_version is not None


def embedded_already(source: Source, embedded: set[Embedded]) -> bool:
    """Whether ``source`` is an item version whose embedding for the enricher's model is in
    ``embedded`` (an import's): it is not embedded again."""
    return source.session_id is None and source.item_version is not None and (
        source.tenant, source.item_id, source.item_version) in embedded


def commands_for(source: Source, vector: list[float] | None, model: str) -> list[CommandBase]:
    """The commands recording what was learned from ``source`` (``vector``: its embedding,
    when it embeds)."""
    found: list[CommandBase] = []
    common: dict[str, Any] = {"actor": ACTOR, "correlation_id": source.correlation_id[:512],
                              "subject_id": source.subject, "source_key_id": source.key_id}
    version = source.item_version
    if vector is not None:
        found.append(_embedding(source, vector, model, common))
    if not source.extracts:
        return found
    extractions = extract(source.text)
    for index, extraction in enumerate(extractions):
        found.append(RecordPreference(
            idempotency_key=_key("pref", source, f"{index}/{extraction.rule_id}"),
            space_id=source.space, source_item_id=source.item_id, rule_id=extraction.rule_id,
            category=extraction.category, value=extraction.value,
            confidence=extraction.confidence, **common))
    entities = mentions(source.text, extractions)
    if entities and version is not None:
        found.append(RecordEntities(
            idempotency_key=_key("entities", source, EXTRACTOR), space_id=source.space,
            item_id=source.item_id, item_version=version, extractor=EXTRACTOR,
            entities=tuple(entities), **common))
    return found


def _embedding(source: Source, vector: list[float], model: str, common: dict[str, Any]
               ) -> CommandBase:
    key = _key("embed", source, model)
    if source.session_id is not None:
        return RecordMessageEmbedding(
            idempotency_key=key, space_id=source.space, session_id=source.session_id,
            message_id=source.item_id, model=model, dims=len(vector), vector=tuple(vector),
            **common)
    assert source.item_version is not None  # an item's source always names its version
    return RecordEmbedding(
        idempotency_key=key, space_id=source.space, item_id=source.item_id,
        item_version=source.item_version, model=model, dims=len(vector), vector=tuple(vector),
        **common)


def _key(what: str, source: Source, detail: str) -> str:
    return f"enricher/{what}/{source.item_id}/{source.item_version or 0}/{detail}"


# --- entity mentions ------------------------------------------------------------------------

_CAPITALISED = re.compile(r"\b[A-Z][\w'&-]*(?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][\w'&-]*)*")
_NOT_NAMES = frozenset((
    "i", "i'm", "i've", "i'd", "i'll", "a", "an", "the", "my", "our", "your", "his", "her",
    "their", "this", "that", "these", "those", "it", "its", "we", "you", "he", "she", "they",
    "there", "here", "when", "what", "where", "which", "who", "why", "how", "if", "but", "and",
    "or", "so", "yes", "no", "please", "thanks", "hello", "hi", "remind"))
_TYPE_BY_CATEGORY = {"profile.name": "person", "profile.company": "organization",
                     "profile.location": "place", "profile.language": "language"}


def mentions(text: str, extractions: list[Extraction] | None = None) -> list[ExtractedEntity]:
    """Named things in ``text``: the values of profile rules, typed (person, organization,
    place, language), then other capitalised phrases as untyped mentions. Deterministic and
    cheap; a model-based extractor can replace it under another ``extractor`` id."""
    typed = {e.value: _TYPE_BY_CATEGORY[e.category]
             for e in (extract(text) if extractions is None else extractions)
             if e.category in _TYPE_BY_CATEGORY}
    found = dict(typed)
    for match in _CAPITALISED.finditer(text):
        name = _trim(match.group(0))
        if name and name not in found and not any(name in known for known in typed):
            found[name] = "mention"
    return [ExtractedEntity(name=name[:512], type=kind) for name, kind in found.items()][:256]


def _trim(phrase: str) -> str:
    words = phrase.split()
    while words and words[0].lower() in _NOT_NAMES:
        words = words[1:]
    return " ".join(words)
