"""Constrained scalar types shared by events and commands."""

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

# Tenant and space ids become NATS subject tokens, so they exclude '.', '*', '>' and spaces.
SLUG_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN)]
TenantId = Slug
SpaceId = Slug
AgentId = Slug
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=512)]
Content = Annotated[str, StringConstraints(min_length=1, max_length=65_536)]
Tag = Annotated[str, StringConstraints(pattern=r"^[^\s,]{1,64}$")]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]


def _require_aware(value: datetime) -> datetime:
    """Naive datetimes are ambiguous; memledger only accepts explicit offsets, kept as UTC (so
    an instant whose UTC form leaves years 1-9999 is refused too)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("datetime must carry a timezone offset, e.g. 2026-01-01T00:00:00Z")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("datetime is out of range in UTC: it must fall between "
                         "0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z") from None


UtcDatetime = Annotated[datetime, AfterValidator(_require_aware)]
