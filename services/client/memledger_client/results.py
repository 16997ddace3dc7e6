"""What memledger answers: the write results defined here, the read answers re-exported from
the query service's own models (so client and server cannot disagree on a field)."""

from pydantic import BaseModel, ConfigDict

from memledger_schemas.api.erasure import ErasureReceipt as SubjectErasure
from memledger_schemas.api.forming import ProfileAnswer, Theme, ThemeList
from memledger_schemas.api.reads import (
    AgentList,
    AgentSummary,
    Basis,
    ChainAnswer,
    Change,
    ChangePage,
    Conversation,
    Entity,
    ErasureList,
    ErasureReceipt,
    Graph,
    History,
    Item,
    ItemAnswer,
    ItemList,
    MergeSuggestions,
    Message,
    Neighbour,
    Neighbours,
    PolicyHistory,
    PolicyVersion,
    Rectangle,
    Relation,
    SessionList,
    SessionSummary,
    SpaceList,
    SpaceStats,
    SpaceSummary,
)
from memledger_schemas.api.retrievals import ReplayAnswer, RetrievalRecord
from memledger_schemas.api.semantic import ContextAnswer as ServerContextAnswer
from memledger_schemas.api.semantic import (
    ContextEntry,
    ContextSection,
    SearchHit,
    Turn,
    Window,
)
from memledger_schemas.api.semantic import SearchAnswer as ServerSearchAnswer
from memledger_schemas.api.vectors import VectorSummary

__all__ = [
    "AgentList",
    "AgentSummary",
    "Basis",
    "BatchResult",
    "ChainAnswer",
    "Change",
    "ChangePage",
    "ContextAnswer",
    "ContextEntry",
    "ContextSection",
    "Conversation",
    "Entity",
    "ErasureList",
    "ErasureReceipt",
    "Graph",
    "History",
    "Item",
    "ItemAnswer",
    "ItemList",
    "MergeSuggestions",
    "Message",
    "Neighbour",
    "Neighbours",
    "PolicyHistory",
    "PolicyVersion",
    "ProfileAnswer",
    "Rectangle",
    "Relation",
    "ReplayAnswer",
    "RetrievalRecord",
    "SearchAnswer",
    "SearchHit",
    "SessionList",
    "SessionSummary",
    "SpaceList",
    "SpaceStats",
    "SpaceSummary",
    "SubjectErasure",
    "Theme",
    "ThemeList",
    "Turn",
    "VectorSummary",
    "Window",
    "WriteResult",
]


class Staleness(BaseModel):
    """What a client's stale cache says of an answer it stands in with (the server never sets
    these: ``memledger_client.degrade``)."""

    stale: bool = False
    """The answer is an earlier one, given because memledger could not answer now."""
    stale_age_seconds: float | None = None
    """With ``stale``: how old that answer is."""


class SearchAnswer(ServerSearchAnswer, Staleness):
    """``POST /v1/search``'s answer, as the client returns it."""


class ContextAnswer(ServerContextAnswer, Staleness):
    """``POST /v1/context``'s answer, as the client returns it."""


class WriteResult(BaseModel):
    """What a committed command wrote. ``position``: pass it as ``min_position`` to read it back
    (the client does that for you); ``duplicate``: an idempotent retry, nothing new written."""

    model_config = ConfigDict(frozen=True)

    command: str
    event_ids: list[str]
    position: int
    positions: list[int]
    stream_version: int
    ids: dict[str, str]
    duplicate: bool

    @property
    def item_id(self) -> str:
        """The memory item the command created or changed (``LookupError`` if it names none)."""
        try:
            return self.ids["item_id"]
        except KeyError:
            raise LookupError(f"{self.command} names no item_id (ids: {self.ids})") from None


class BatchResult(BaseModel):
    """A batch committed atomically: one result per command, in order."""

    model_config = ConfigDict(frozen=True)

    position: int
    results: list[WriteResult]
