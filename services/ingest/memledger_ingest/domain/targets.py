"""What a command is about: the stream it appends to, the streams it reads, and the context
a decision may use. Pure."""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, TypeVar
from uuid import UUID

from memledger_ingest.domain.streams import StreamRef, StreamState
from memledger_schemas import commands as c
from memledger_schemas.events import Payload
from memledger_schemas.types import UtcDatetime

Lookup = Callable[[StreamRef], StreamState | None]


@dataclass(frozen=True)
class IndexModel:
    """The model whose vectors the server's index holds: its id and dimensions."""

    model_id: str
    dims: int


@dataclass(frozen=True)
class Context:
    """What a decision may use besides state: the tenant, an id minted for this command (for
    whatever it creates without naming it) and who acts."""

    tenant: str
    fresh_id: UUID
    actor: str
    now: datetime | None = None
    """About when the command is recorded (``valid_from`` defaults to the recording time)."""
    skew: timedelta = timedelta(seconds=300)
    """How far a client's clock may run ahead of ``now``: a time it says something happened
    (a message's ``said_at``) may lie that far in the future, no further."""
    index: "IndexModel | None" = None
    """The embedding model of the server's vector index (an imported embedding must be of
    it); ``None``: not known here, nothing to compare with."""

    @cached_property
    def fresh_key(self) -> str:
        return str(self.fresh_id)


@dataclass(frozen=True)
class Decision:
    """Events for the ``target`` stream, and the ids a client needs to refer to what it made."""

    target: StreamRef
    space_id: str
    events: tuple[Payload, ...]
    ids: dict[str, str] = field(default_factory=dict)
    session_id: UUID | None = None
    valid_from: UtcDatetime | None = None
    valid_to: UtcDatetime | None = None
    also: tuple["Decision", ...] = ()
    """Events the command causes on other streams (a superseded item, a claimed slot),
    committed with it and just before its own, so the command's position covers them."""


def new_or(ident: UUID | None, ctx: Context) -> UUID:
    return ident if ident is not None else ctx.fresh_id


def _key_or(ident: UUID | None, ctx: Context) -> str:
    return str(ident) if ident is not None else ctx.fresh_key


# --- the registry: one route per command ------------------------------------------------------

C = TypeVar("C", bound=c.CommandBase)
Decide = Callable[[C, Context, Lookup, StreamState | None], Decision]
"""A command's handler: it checked against the current state of its streams → what happened."""
Target = Callable[[C, Context], StreamRef]
Reads = Callable[[C, Context], tuple[StreamRef, ...]]


@dataclass(frozen=True)
class Route:
    """What ingest does with one command type: the stream it appends to, the other streams
    its handler reads (besides its space), and the handler."""

    decide: Decide[Any]
    target: Target[Any]
    reads: Reads[Any]


ROUTES: dict[type[c.CommandBase], Route] = {}
_BY_TYPE: dict[type[c.CommandBase], Route] = {}


def no_reads(_: c.CommandBase, __: Context) -> tuple[StreamRef, ...]:
    return ()


def register(command: type[C], target: Target[C], reads: Reads[C] = no_reads
             ) -> Callable[[Decide[C]], Decide[C]]:
    """Register the decorated handler as ``command``'s (a subclass without a route of its
    own takes its base's): adding a command is its handler and this registration."""

    def registered(decide: Decide[C]) -> Decide[C]:
        if command in ROUTES:
            raise ValueError(f"{command.__name__} is routed twice")
        ROUTES[command] = Route(decide, target, reads)
        return decide

    return registered


def route_of(cmd: c.CommandBase) -> Route:
    kind = type(cmd)
    route = _BY_TYPE.get(kind)
    if route is None:
        route = next((ROUTES[k] for k in kind.__mro__ if k in ROUTES), None)
        if route is None:
            raise TypeError(f"unknown command {kind.__name__}")
        _BY_TYPE[kind] = route
    return route


def target_of(cmd: c.CommandBase, ctx: Context) -> StreamRef:
    """The stream a command appends to."""
    return route_of(cmd).target(cmd, ctx)


def reads_of(cmd: c.CommandBase, ctx: Context) -> tuple[StreamRef, ...]:
    """Every stream ``decide`` will look up for this command (so they can be fetched at once)."""
    space = getattr(cmd, "space_id", None)
    spaces = (StreamRef("space", space),) if space else ()
    route = route_of(cmd)
    return (route.target(cmd, ctx), *spaces, *route.reads(cmd, ctx))


# --- the streams commands append to -------------------------------------------------------------

def space_stream(cmd: c.CreateSpace | c.SetSpacePolicy | c.ArchiveSpace, _: Context
                 ) -> StreamRef:
    return StreamRef("space", cmd.space_id)


def new_item_stream(cmd: c.AssertMemory, ctx: Context) -> StreamRef:
    return StreamRef("item", _key_or(cmd.item_id, ctx))


def item_stream(cmd: c.ReviseMemory | c.SupersedeMemory | c.RetractMemory | c.ReaffirmMemory
                | c.ArchiveMemory | c.PromoteMemory | c.MergeMemories, _: Context) -> StreamRef:
    return StreamRef("item", str(cmd.item_id))


def session_stream(cmd: c.EndSession | c.AppendMessage, _: Context) -> StreamRef:
    return StreamRef("session", str(cmd.session_id))


def new_session_stream(cmd: c.StartSession, ctx: Context) -> StreamRef:
    return StreamRef("session", str(new_or(cmd.session_id, ctx)))


def subject_stream(cmd: c.EraseSubject, _: Context) -> StreamRef:
    return StreamRef("subject", cmd.subject_id)


def agent_stream(cmd: c.RegisterAgent, _: Context) -> StreamRef:
    return StreamRef("agent", cmd.agent_id)


def entity_stream(cmd: c.UpsertEntity, _: Context) -> StreamRef:
    return entity_ref(cmd.space_id, cmd.entity_id)


def new_relation_stream(cmd: c.AssertRelation, ctx: Context) -> StreamRef:
    return StreamRef("relation", str(new_or(cmd.relation_id, ctx)))


def relation_stream(cmd: c.RetractRelation, _: Context) -> StreamRef:
    return StreamRef("relation", str(cmd.relation_id))


def new_feedback_stream(cmd: c.RecordFeedback, ctx: Context) -> StreamRef:
    return StreamRef("feedback", str(new_or(cmd.feedback_id, ctx)))


def enrichment_stream(cmd: c.RecordEmbedding | c.RecordEntities | c.SuggestMerge, _: Context
                      ) -> StreamRef:
    # Not the item's stream: enrichment must never bump the item's version and so fail a
    # client's expected_version on it.
    return StreamRef("enrichment", str(cmd.item_id))


def import_stream(cmd: c.ImportMemory, ctx: Context) -> StreamRef:
    # Its embedding's stream, as the enricher's; its item is new, so an expected_version (0)
    # means there what it means on the item's.
    return StreamRef("enrichment", _key_or(cmd.item_id, ctx))


def revision_import_stream(cmd: c.ImportRevision, _: Context) -> StreamRef:
    # Its embedding's stream, as an import's; the revision goes to the item's.
    return StreamRef("enrichment", str(cmd.item_id))


def message_enrichment_stream(cmd: c.RecordMessageEmbedding, _: Context) -> StreamRef:
    return StreamRef("enrichment", str(cmd.message_id))


def preference_stream(cmd: c.RecordPreference, _: Context) -> StreamRef:
    return StreamRef("preference", str(cmd.source_item_id))


def retrieval_stream(cmd: c.RecordRetrieval, _: Context) -> StreamRef:
    return StreamRef("retrieval", str(cmd.retrieval_id))


def theme_stream(cmd: c.RecordTheme, _: Context) -> StreamRef:
    return StreamRef("theme", str(cmd.theme_id))


def importance_stream(cmd: c.LearnImportance, _: Context) -> StreamRef:
    # Not the item's stream either: learning must not fail a client's expected_version.
    return StreamRef("importance", str(cmd.item_id))


# --- the other streams a handler reads ----------------------------------------------------------

def assert_reads(cmd: c.AssertMemory, _: Context) -> tuple[StreamRef, ...]:
    """Its session, and the slot of its triple (what it may contradict)."""
    session = (StreamRef("session", str(cmd.session_id)),) if cmd.session_id else ()
    slot = (slot_ref(cmd.space_id, cmd.triple.subject, cmd.triple.predicate),
            ) if cmd.triple is not None else ()
    return session + slot


def import_reads(cmd: c.ImportMemory, ctx: Context) -> tuple[StreamRef, ...]:
    """An assertion's, and its item (looked up by the assertion it makes)."""
    return (*assert_reads(cmd, ctx), StreamRef("item", _key_or(cmd.item_id, ctx)))


def revision_import_reads(cmd: c.ImportRevision, _: Context) -> tuple[StreamRef, ...]:
    """The item it revises (its version numbers the embedding)."""
    return (StreamRef("item", str(cmd.item_id)),)


def merged_reads(cmd: c.MergeMemories, _: Context) -> tuple[StreamRef, ...]:
    return tuple(StreamRef("item", str(i)) for i in cmd.merged_item_ids)


def suggestion_reads(cmd: c.SuggestMerge, _: Context) -> tuple[StreamRef, ...]:
    return (StreamRef("item", str(cmd.item_id)), StreamRef("item", str(cmd.similar_to)))


def superseding_reads(cmd: c.SupersedeMemory, _: Context) -> tuple[StreamRef, ...]:
    return (StreamRef("item", str(cmd.superseded_by)),)


def relation_reads(cmd: c.AssertRelation, _: Context) -> tuple[StreamRef, ...]:
    return (entity_ref(cmd.space_id, cmd.source_entity),
            entity_ref(cmd.space_id, cmd.target_entity))


def item_reads(cmd: c.RecordFeedback | c.RecordEmbedding | c.RecordEntities
               | c.LearnImportance, _: Context) -> tuple[StreamRef, ...]:
    return (StreamRef("item", str(cmd.item_id)),)


def message_reads(cmd: c.RecordMessageEmbedding, _: Context) -> tuple[StreamRef, ...]:
    return (StreamRef("session", str(cmd.session_id)),)


def retrieval_reads(cmd: c.RecordRetrieval, _: Context | None = None) -> tuple[StreamRef, ...]:
    """The streams whose data subjects an audited retrieval touched: its session, and the
    item of each entry shown that names one (a message or another ref names no stream)."""
    session = (StreamRef("session", str(cmd.session_id)),) if cmd.session_id else ()
    items = dict.fromkeys(StreamRef("item", r.ref) for r in cmd.results if _is_uuid(r.ref))
    return session + tuple(items)


def theme_reads(cmd: c.RecordTheme, _: Context | None = None) -> tuple[StreamRef, ...]:
    """The items of a theme: each must be in its space, and their data subjects seal its
    label."""
    return tuple(dict.fromkeys(StreamRef("item", str(m)) for m in cmd.members))


def _is_uuid(text: str) -> bool:
    try:
        UUID(text)
    except ValueError:
        return False
    return True


def slot_ref(space_id: str, subject: str, predicate: str) -> StreamRef:
    """The (subject, predicate) slot of a space, matched without regard to case."""
    return StreamRef("slot", f"{space_id}/{subject.casefold()}/{predicate.casefold()}")


def entity_ref(space_id: str, entity_id: str) -> StreamRef:
    # Entity ids are chosen by clients and scoped by space.
    return StreamRef("entity", f"{space_id}/{entity_id}")
