"""The requests of the query gRPC reads (``grpc_reads``) as the HTTP parameters they mirror,
with the routes' bounds: a message is read into one of these (``grpc_convert.params``), so a
bad field is refused naming it."""

from typing import Literal

from pydantic import Field

from memledger_query.core import views
from memledger_schemas.api.semantic import Instant, Strict, TimeTravel

Limit = Field(default=100, ge=1, le=1_000)
WaitMs = Field(default=2_000, ge=0, le=30_000)
Position = Field(default=None, ge=0)


class Consistent(Strict):
    min_position: int | None = Position
    wait_ms: int = WaitMs


class AsOfOnly(Consistent):
    as_of_position: int | None = Position


class MessagesParams(AsOfOnly):
    space_id: str
    session_id: str
    limit: int = Field(default=200, ge=1, le=1_000)


class SessionsParams(Consistent):
    space_id: str
    agent_id: str | None = Field(default=None, max_length=64)
    participant: str | None = Field(default=None, max_length=512)
    status: Literal["active", "ended"] | None = None
    started_from: Instant = None
    started_to: Instant = None
    ended_from: Instant = None
    ended_to: Instant = None
    limit: int = Field(default=50, ge=1, le=1_000)
    after: str | None = Field(default=None, max_length=512)


class SpaceParams(TimeTravel):
    space_id: str


class EntityParams(SpaceParams):
    entity_id: str = Field(min_length=1)
    depth: int = Field(default=1, ge=1, le=views.MAX_DEPTH)
    limit: int = Limit


class SpacesParams(AsOfOnly):
    status: Literal["active", "archived"] | None = None
    limit: int = Limit
    after: str | None = Field(default=None, max_length=256)


class AgentsParams(AsOfOnly):
    limit: int = Limit
    after: str | None = Field(default=None, max_length=256)


class ErasuresParams(Strict):
    limit: int = Limit


class StatsParams(Consistent):
    space_id: str


class SummaryParams(Strict):
    as_of_position: int | None = Position
    wait_ms: int = WaitMs


class RetrievalParams(Consistent):
    retrieval_id: str


class ItemParams(AsOfOnly):
    space_id: str
    item_id: str


class LifecycleParams(AsOfOnly):
    space_id: str
    limit: int = Limit


class ProfileParams(SpaceParams):
    subject: str = Field(min_length=1, max_length=512, pattern=r"^[^\x00]*$")
