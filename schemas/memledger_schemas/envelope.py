"""The event envelope: identity, ordering, scope, time, causality and privacy of one event."""

from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memledger_schemas.events import CATALOGUE, Payload
from memledger_schemas.types import AgentId, ShortText, SpaceId, TenantId, UtcDatetime
from memledger_schemas.upcasting import upcast

TENANT_SCOPE = "_tenant"
"""The space id of events that belong to a tenant rather than one space (e.g. agents)."""


class EventEnvelope(BaseModel):
    """One immutable event as stored and distributed.

    ``global_position`` and ``recorded_at`` are assigned by the event store at commit and are
    ``None`` on an event that has not been committed yet. Valid time is half-open:
    ``[valid_from, valid_to)``; ``None`` means unbounded (``valid_from`` then defaults to
    ``recorded_at`` in the read models).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: UUID
    event_type: ShortText
    schema_version: int = Field(ge=1)
    stream_id: UUID
    stream_version: int = Field(ge=1)
    global_position: int | None = Field(default=None, ge=1)
    tenant_id: TenantId
    space_id: SpaceId
    session_id: UUID | None = None
    agent_id: AgentId | None = None
    actor: ShortText
    recorded_at: UtcDatetime | None = None
    valid_from: UtcDatetime | None = None
    valid_to: UtcDatetime | None = None
    idempotency_key: ShortText | None = None
    causation_id: ShortText | None = None
    correlation_id: ShortText | None = None
    traceparent: ShortText | None = None
    subject_id: ShortText | None = None
    key_id: ShortText | None = None
    payload: dict[str, Any]

    @model_validator(mode="after")
    def _valid_interval_is_not_empty(self) -> "EventEnvelope":
        if self.valid_from and self.valid_to and self.valid_to <= self.valid_from:
            raise ValueError("valid_to must be after valid_from (intervals are half-open)")
        return self

    def typed_payload(self) -> Payload:
        """The payload as its current catalogue model, upcast from an older version if needed."""
        version, data = upcast(self.event_type, self.schema_version, self.payload)
        model = CATALOGUE[self.event_type]
        if version != model.schema_version:
            raise ValueError(f"no upcaster takes {self.event_type} v{version} to "
                             f"v{model.schema_version}")
        return model.model_validate(data)
