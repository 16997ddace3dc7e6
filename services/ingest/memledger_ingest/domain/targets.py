"""What a command is about: the stream it appends to, the streams it reads, and the context
a decision may use. Pure."""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
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


def target_of(cmd: c.CommandBase, ctx: Context) -> StreamRef:
    """The stream a command appends to."""
    return _target(cmd, ctx)


def reads_of(cmd: c.CommandBase, ctx: Context) -> tuple[StreamRef, ...]:
    """Every stream ``decide`` will look up for this command (so they can be fetched at once)."""
    space = getattr(cmd, "space_id", None)
    spaces = (StreamRef("space", space),) if space else ()
    return (target_of(cmd, ctx), *spaces, *_extra_reads(cmd, ctx))


def _target(cmd: c.CommandBase, ctx: Context) -> StreamRef:  # noqa: PLR0911, PLR0912
    # The most frequent commands first: a match tries its cases in order.
    match cmd:
        case c.ImportMemory():
            # Its embedding's stream, as the enricher's; its item is new, so an
            # expected_version (0) means there what it means on the item's.
            return StreamRef("enrichment", _key_or(cmd.item_id, ctx))
        case c.AssertMemory():
            return StreamRef("item", _key_or(cmd.item_id, ctx))
        case c.EndSession() | c.AppendMessage():
            return StreamRef("session", str(cmd.session_id))
        case c.RecordMessageEmbedding():
            return StreamRef("enrichment", str(cmd.message_id))
        case c.CreateSpace() | c.SetSpacePolicy() | c.ArchiveSpace():
            return StreamRef("space", cmd.space_id)
        case c.EraseSubject():
            return StreamRef("subject", cmd.subject_id)
        case c.RegisterAgent():
            return StreamRef("agent", cmd.agent_id)
        case c.StartSession():
            return StreamRef("session", str(new_or(cmd.session_id, ctx)))
        case (c.ReviseMemory() | c.SupersedeMemory() | c.RetractMemory() | c.ReaffirmMemory()
              | c.ArchiveMemory() | c.PromoteMemory() | c.MergeMemories()):
            return StreamRef("item", str(cmd.item_id))
        case c.UpsertEntity():
            return entity_ref(cmd.space_id, cmd.entity_id)
        case c.AssertRelation():
            return StreamRef("relation", str(new_or(cmd.relation_id, ctx)))
        case c.RetractRelation():
            return StreamRef("relation", str(cmd.relation_id))
        case c.RecordFeedback():
            return StreamRef("feedback", str(new_or(cmd.feedback_id, ctx)))
        case c.RecordEmbedding() | c.RecordEntities() | c.SuggestMerge():
            # Not the item's stream: enrichment must never bump the item's version and so
            # fail a client's expected_version on it.
            return StreamRef("enrichment", str(cmd.item_id))
        case c.RecordPreference():
            return StreamRef("preference", str(cmd.source_item_id))
        case c.RecordRetrieval():
            return StreamRef("retrieval", str(cmd.retrieval_id))
        case c.RecordTheme():
            return StreamRef("theme", str(cmd.theme_id))
        case c.LearnImportance():
            # Not the item's stream either: learning must not fail a client's expected_version.
            return StreamRef("importance", str(cmd.item_id))
    raise TypeError(f"unknown command {type(cmd).__name__}")


def _extra_reads(cmd: c.CommandBase, ctx: Context) -> tuple[StreamRef, ...]:  # noqa: PLR0911  (a case each)
    match cmd:
        case c.ImportMemory():
            return (*_assertion_reads(cmd), StreamRef("item", _key_or(cmd.item_id, ctx)))
        case c.AssertMemory():
            return _assertion_reads(cmd)
        case c.MergeMemories():
            return tuple(StreamRef("item", str(i)) for i in cmd.merged_item_ids)
        case c.SuggestMerge():
            return (StreamRef("item", str(cmd.item_id)), StreamRef("item", str(cmd.similar_to)))
        case c.SupersedeMemory():
            return (StreamRef("item", str(cmd.superseded_by)),)
        case c.AssertRelation():
            return (entity_ref(cmd.space_id, cmd.source_entity),
                    entity_ref(cmd.space_id, cmd.target_entity))
        case c.RecordFeedback() | c.RecordEmbedding() | c.RecordEntities() | c.LearnImportance():
            return (StreamRef("item", str(cmd.item_id)),)
        case c.RecordTheme():
            return theme_reads(cmd)
        case c.RecordRetrieval():
            return retrieval_reads(cmd)
        case c.RecordMessageEmbedding():
            return (StreamRef("session", str(cmd.session_id)),)
    return ()


def _assertion_reads(cmd: c.AssertMemory) -> tuple[StreamRef, ...]:
    session = (StreamRef("session", str(cmd.session_id)),) if cmd.session_id else ()
    slot = (slot_ref(cmd.space_id, cmd.triple.subject, cmd.triple.predicate),
            ) if cmd.triple is not None else ()
    return session + slot


def retrieval_reads(cmd: c.RecordRetrieval) -> tuple[StreamRef, ...]:
    """The streams whose data subjects an audited retrieval touched: its session, and the
    item of each entry shown that names one (a message or another ref names no stream)."""
    session = (StreamRef("session", str(cmd.session_id)),) if cmd.session_id else ()
    items = dict.fromkeys(StreamRef("item", r.ref) for r in cmd.results if _is_uuid(r.ref))
    return session + tuple(items)


def theme_reads(cmd: c.RecordTheme) -> tuple[StreamRef, ...]:
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
