"""The API as data: each function builds one ``Call`` (method, path, parameters, how to read
the answer) and does no I/O, so the sync and async clients share every request and differ only
in how they send it.

Read-your-writes: a read whose caller did not name ``min_position`` is marked with where the
client should put the highest position its writes returned (``ryw``: query or body).
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar
from urllib.parse import quote
from uuid import UUID, uuid4

from pydantic import BaseModel, ValidationError

from memledger_client.degrade import Group
from memledger_client.errors import from_validation
from memledger_client.results import (
    AgentList,
    BatchResult,
    ChangePage,
    ContextAnswer,
    Conversation,
    ErasureList,
    Graph,
    History,
    ItemAnswer,
    ItemList,
    Neighbours,
    PolicyHistory,
    ProfileAnswer,
    SearchAnswer,
    SessionList,
    SpaceList,
    SpaceStats,
    ThemeList,
    WriteResult,
)
from memledger_schemas.api.semantic import (
    ContextRequest,
    ContextShares,
    LayerLimits,
    SearchKind,
    SearchRequest,
    Weights,
)
from memledger_schemas.commands import CommandBase, CommandBatch
from memledger_schemas.events import MemoryKind, Role

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Place = Literal["query", "body"]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer (``parse`` gets the decoded JSON)."""

    method: Literal["GET", "POST"]
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    body: Mapping[str, Any] | None = None
    ryw: Place | None = None
    recall: bool = False
    """Search or context: answered within the breaker's recall timeout, and cacheable."""

    @property
    def group(self) -> Group:
        """The circuit breaker that guards this call."""
        if self.recall:
            return "recall"
        return "write" if self.method == "POST" else "read"


class Consistency(TypedDict, total=False):
    """``min_position``: wait until the read model has it (default: the highest position this
    client's writes returned; None: do not wait). ``wait_ms``: how long (server default 2 s)."""

    min_position: int | None
    wait_ms: int


class AsOf(Consistency, total=False):
    """Valid time (default now) and system time (a position or a timestamp; default latest)."""

    valid_at: datetime | None
    as_of_position: int | None
    recorded_at: datetime | None


class ItemFilters(AsOf, total=False):
    kinds: Sequence[MemoryKind]
    tags: Sequence[str]
    session_id: UUID | str | None
    agent_id: str | None
    subject: str | None
    predicate: str | None
    include_archived: bool
    limit: int
    after: UUID | str | None


class SearchOptions(AsOf, total=False):
    """The fields of ``POST /v1/search`` besides ``query`` (see docs/search.md)."""

    spaces: Sequence[str]
    session_id: UUID | str | None
    agent_id: str | None
    kinds: Sequence[SearchKind]
    """Memory kinds and/or "message" (conversation messages); none: all of them."""
    participant: str | None
    role: Role | Sequence[Role] | None
    window: int
    """With each message hit, this many turns before and after it in its session."""
    tags: Sequence[str]
    subject: str | None
    mode: Literal["execution", "planning", "brainstorming"]
    k: int | None
    threshold: float | None
    scope: Literal["filtered", "hierarchical"]
    layers: LayerLimits | Mapping[str, int]
    weights: Weights | Mapping[str, float]
    explain: bool
    audit: bool
    theme: UUID | str | None
    """Only the members of this theme (``themes``)."""


class SessionFilters(Consistency, total=False):
    """Which sessions of a space to list; the windows are half-open ([from, to))."""

    agent_id: str | None
    participant: str | None
    status: Literal["active", "ended"] | None
    started_from: datetime | None
    started_to: datetime | None
    ended_from: datetime | None
    ended_to: datetime | None
    limit: int
    after: str | None
    """``next_cursor`` of the previous page."""


class ContextOptions(AsOf, total=False):
    session_id: UUID | str | None
    query: str | None
    budget_tokens: int
    shares: ContextShares | Mapping[str, int]
    audit: bool


_QUERY_NAMES = {"kinds": "kind", "tags": "tag"}


# --- writes -----------------------------------------------------------------------------------

def write(command: CommandBase) -> Call[WriteResult]:
    """The command's own route; an idempotency key is generated unless the command has one."""
    body = _body(with_key(command))
    path = re.sub(r"{(\w+)}", lambda m: quote(str(body[m.group(1)]), safe=""),
                  command.http_path)
    return Call("POST", path, WriteResult.model_validate, body=body)


def batch(commands: Sequence[CommandBase]) -> Call[BatchResult]:
    """Up to 1,000 commands committed atomically, each with its idempotency key."""
    body = {"commands": [_body(with_key(c)) for c in commands]}
    validated(CommandBatch, **body)
    return Call("POST", "/v1/batch", BatchResult.model_validate, body=body)


def _body(command: CommandBase) -> dict[str, Any]:
    """The fields the caller set, as set (a policy update changes only the fields it names,
    and a null it names clears one), and the command's name."""
    body = command.model_dump(mode="json", exclude_unset=True)
    body["command"] = type(command).model_fields["command"].default
    return body


def with_key(command: CommandBase) -> CommandBase:
    if command.idempotency_key is not None:
        return command
    return command.model_copy(update={"idempotency_key": f"mlc-{uuid4()}"})


def validated(model: type[M], **fields: Any) -> M:
    """``model`` built from ``fields``; a bad field raises ``InvalidRequest`` naming its path,
    as the server would have."""
    try:
        return model.model_validate(fields)
    except ValidationError as error:
        raise from_validation(error) from None


# --- reads ------------------------------------------------------------------------------------

def item(space_id: str, item_id: UUID | str, source: Literal["projection", "replay"],
         at: AsOf) -> Call[ItemAnswer]:
    return _get(f"/v1/spaces/{_seg(space_id)}/items/{_seg(item_id)}",
                ItemAnswer.model_validate, {**at, "source": source})


def items(space_id: str, filters: ItemFilters) -> Call[ItemList]:
    return _get(f"/v1/spaces/{_seg(space_id)}/items", ItemList.model_validate, filters)


def history(space_id: str, item_id: UUID | str, as_of_position: int | None,
            consistency: Consistency) -> Call[History]:
    return _get(f"/v1/spaces/{_seg(space_id)}/items/{_seg(item_id)}/history",
                History.model_validate, {**consistency, "as_of_position": as_of_position})


def changes(space_id: str | None, after: str | None, since: datetime | None, limit: int,
            consistency: Consistency) -> Call[ChangePage]:
    """A page of the changes feed, of one space or (``space_id`` None) the whole tenant."""
    path = "/v1/changes" if space_id is None else f"/v1/spaces/{_seg(space_id)}/changes"
    return _get(path, ChangePage.model_validate,
                {**consistency, "after": after, "since": since, "limit": limit})


def messages(space_id: str, session_id: UUID | str, as_of_position: int | None, limit: int,
             consistency: Consistency) -> Call[Conversation]:
    return _get(f"/v1/spaces/{_seg(space_id)}/sessions/{_seg(session_id)}/messages",
                Conversation.model_validate,
                {**consistency, "as_of_position": as_of_position, "limit": limit})


def sessions(space_id: str, filters: SessionFilters) -> Call[SessionList]:
    return _get(f"/v1/spaces/{_seg(space_id)}/sessions", SessionList.model_validate, filters)


def graph(space_id: str, at: AsOf) -> Call[Graph]:
    return _get(f"/v1/spaces/{_seg(space_id)}/graph", Graph.model_validate, dict(at))


def neighbours(space_id: str, entity_id: str, depth: int, at: AsOf) -> Call[Neighbours]:
    """The entities ``depth`` relations away from ``entity_id`` (either direction)."""
    return _get(f"/v1/spaces/{_seg(space_id)}/entities/{_seg(entity_id)}/neighbours",
                Neighbours.model_validate, {**at, "depth": depth})


def policies(space_id: str, as_of_position: int | None, consistency: Consistency
             ) -> Call[PolicyHistory]:
    """Every policy version of the space, oldest first."""
    return _get(f"/v1/spaces/{_seg(space_id)}/policies", PolicyHistory.model_validate,
                {**consistency, "as_of_position": as_of_position})


def space_stats(space_id: str, consistency: Consistency) -> Call[SpaceStats]:
    """Counts of what the space holds (items by kind and status, tags, sessions, messages,
    entities, relations)."""
    return _get(f"/v1/spaces/{_seg(space_id)}/stats", SpaceStats.model_validate,
                dict(consistency))


def profile(space_id: str, subject: str, at: AsOf) -> Call[ProfileAnswer]:
    """What is believed about ``subject`` in the space: the facts and preferences whose triple
    subject it is."""
    return _get(f"/v1/spaces/{_seg(space_id)}/profiles/{_seg(subject)}",
                ProfileAnswer.model_validate, dict(at))


def themes(space_id: str, as_of_position: int | None, recorded_at: datetime | None,
           consistency: Consistency) -> Call[ThemeList]:
    """The themes of the space's memories, the largest first."""
    return _get(f"/v1/spaces/{_seg(space_id)}/themes", ThemeList.model_validate,
                {**consistency, "as_of_position": as_of_position, "recorded_at": recorded_at})


def search(query: str, options: SearchOptions) -> Call[SearchAnswer]:
    body = validated(SearchRequest, query=query, **options)
    return Call("POST", "/v1/search", SearchAnswer.model_validate,
                body=body.model_dump(mode="json", exclude_unset=True),
                ryw=None if "min_position" in options else "body", recall=True)


def context(space_id: str, options: ContextOptions) -> Call[ContextAnswer]:
    body = validated(ContextRequest, space_id=space_id, **options)
    return Call("POST", "/v1/context", ContextAnswer.model_validate,
                body=body.model_dump(mode="json", exclude_unset=True),
                ryw=None if "min_position" in options else "body", recall=True)


def spaces(as_of_position: int | None, status: str | None, limit: int, after: str | None,
           consistency: Consistency) -> Call[SpaceList]:
    """A page of the tenant's spaces (those the key is granted), in id order."""
    return _get("/v1/spaces", SpaceList.model_validate,
                {**consistency, "as_of_position": as_of_position, "status": status,
                 "limit": limit, "after": after})


def agents(as_of_position: int | None, limit: int, after: str | None,
           consistency: Consistency) -> Call[AgentList]:
    """A page of the tenant's agents, in id order (a key for the whole tenant)."""
    return _get("/v1/agents", AgentList.model_validate,
                {**consistency, "as_of_position": as_of_position, "limit": limit,
                 "after": after})


def erasures(limit: int) -> Call[ErasureList]:
    """The tenant's last erasure receipts, newest first (an admin key)."""
    return Call("GET", "/v1/erasures", ErasureList.model_validate, params={"limit": limit})


def health(path: str = "/health") -> Call[dict[str, Any]]:
    """The ingest service's health (``/health``) or the query service's (``/v1/query/health``)."""
    return Call("GET", path, _as_dict)


def _get(path: str, parse: Callable[[Any], T], params: Mapping[str, Any]) -> Call[T]:
    wire = {_QUERY_NAMES.get(k, k): _wire(v) for k, v in params.items() if v is not None}
    return Call("GET", path, parse, params=wire,
                ryw=None if "min_position" in params else "query")


def _wire(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [_wire(v) for v in value]
    return value


def _seg(value: UUID | str) -> str:
    return quote(str(value), safe="")


def _as_dict(document: Any) -> dict[str, Any]:
    return dict(document)
