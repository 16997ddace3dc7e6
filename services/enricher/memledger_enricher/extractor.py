"""The ``Extractor`` port: what an extractor makes of a conversation, beside the embedder.

An extractor reads one turn at a time (``extract``: facts and preferences as triples with a
confidence, the entities named and the relations between them) and a run of turns
(``summarise``: a session's summary). Its ``extractor_id`` (with its model) and
``prompt_version`` go into every memory it derives, so an audit can tell which produced it;
they change whenever its output would.

Adapters: ``RulesExtractor`` (offline, deterministic: the default) and ``CohereExtractor``
(Cohere's chat API with structured JSON output). Failures are ``ExtractionFailed``:
``transient`` ones (a timeout, a rate limit, the service down) may succeed later; the others
(output that is not what was asked for, a refused key) will not, and are dead-lettered.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

FactKind = Literal["fact", "preference"]


@dataclass(frozen=True)
class Turn:
    """One message of a conversation, as an extractor reads it."""

    message_id: UUID
    role: str
    text: str
    participant: str | None = None
    said_at: datetime | None = None
    subject_id: str | None = None
    """The data subject of the message (whose key seals what is derived from it)."""

    @property
    def speaker(self) -> str:
        """Who said it: the participant named, else the role ("user")."""
        return self.participant or self.role


@dataclass(frozen=True)
class Fact:
    """A fact or preference as a triple, with the sentence that states it."""

    kind: FactKind
    subject: str
    predicate: str
    object: str
    statement: str
    confidence: float


@dataclass(frozen=True)
class Entity:
    name: str
    type: str


@dataclass(frozen=True)
class Relation:
    source: str
    """An entity's name (one of ``Findings.entities``)."""
    relation: str
    target: str
    confidence: float


@dataclass(frozen=True)
class Findings:
    facts: tuple[Fact, ...] = ()
    entities: tuple[Entity, ...] = ()
    relations: tuple[Relation, ...] = ()


@dataclass(frozen=True)
class Summary:
    text: str
    sources: tuple[UUID, ...]
    """The turns it draws on, in order."""


class ExtractionFailed(Exception):
    """The extractor could not answer: ``reason`` says why; ``transient``: it may later."""

    def __init__(self, reason: str, *, transient: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.transient = transient


class Extractor(ABC):
    """Contract: the same turn (or run of turns) gives the same answer, or is recorded once:
    what it derives is keyed by (``extractor_id``, ``prompt_version``, the sources), so an
    answer is never asked for again once recorded."""

    extractor_id: str
    prompt_version: str

    @abstractmethod
    def extract(self, turn: Turn) -> Findings:
        """The facts, preferences, entities and relations one turn states."""

    @abstractmethod
    def summarise(self, turns: Sequence[Turn]) -> Summary | None:
        """A summary of ``turns`` (in the order said); ``None`` if there is nothing to say."""
