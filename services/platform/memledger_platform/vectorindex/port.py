"""``VectorIndex``: vectors with the scope and time bounds of the item version they belong to.

Contract (one suite checks every adapter):

- ``upsert`` of a point id that exists replaces it (ids are deterministic per item version, so
  a redelivered projection write is harmless);
- ``search`` returns at most ``k`` hits, best first (cosine), only inside ``scope``: the tenant
  always; spaces, kinds, tags (any of), session and agent when given; and in time: the
  version valid at ``valid_at`` (``valid_from <= t < valid_to``) and known at ``position``
  (``sys_from <= p < sys_to``), or, with no ``position``, the versions still current.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

OPEN = 9.0e15
"""The bound of an open interval (larger than any timestamp in seconds or any position)."""


@dataclass(frozen=True)
class IndexedPoint:
    point_id: str
    vector: Sequence[float]
    payload: dict[str, Any]
    """tenant, space, kind, tags, session, agent, item_id, valid_from, valid_to (epoch
    seconds, ``OPEN`` if unbounded), sys_from, sys_to (positions, ``OPEN`` if current), ..."""


@dataclass(frozen=True)
class Scope:
    tenant: str
    valid_at: float
    position: int | None = None
    spaces: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    session: str | None = None
    agent: str | None = None


@dataclass(frozen=True)
class Hit:
    point_id: str
    score: float
    payload: dict[str, Any] = field(default_factory=dict)


class VectorIndex(ABC):
    @abstractmethod
    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        """Insert or replace ``points``."""

    @abstractmethod
    def delete(self, point_ids: Sequence[str]) -> None:
        """Remove points (ids that are absent are ignored)."""

    @abstractmethod
    def search(self, vector: Sequence[float], scope: Scope, k: int) -> list[Hit]:
        """The ``k`` nearest points inside ``scope``, best first."""

    @abstractmethod
    def count(self) -> int:
        """How many points are indexed."""

    def close(self) -> None:  # noqa: B027  (optional: most adapters hold nothing to release)
        """Release resources (flushing what is pending)."""


@dataclass(frozen=True)
class Condition:
    """One payload condition of a scope, independent of any engine's filter types."""

    key: str
    op: Literal["eq", "any", "lte", "gt"]
    value: Any


def conditions(scope: Scope) -> list[Condition]:
    """The scope as payload conditions, all of which must hold (``in_scope`` is their meaning)."""
    position = OPEN - 1 if scope.position is None else scope.position
    found = [Condition("tenant", "eq", scope.tenant),
             Condition("valid_from", "lte", scope.valid_at),
             Condition("valid_to", "gt", scope.valid_at),
             Condition("sys_from", "lte", position), Condition("sys_to", "gt", position)]
    for key, values in (("space", scope.spaces), ("kind", scope.kinds), ("tags", scope.tags)):
        if values:
            found.append(Condition(key, "any", list(values)))
    for key, value in (("session", scope.session), ("agent", scope.agent)):
        if value is not None:
            found.append(Condition(key, "eq", value))
    return found


def in_scope(payload: dict[str, Any], scope: Scope) -> bool:
    """The scope as a predicate: the in-memory adapter's filter, and the spec of the others."""
    position = OPEN - 1 if scope.position is None else scope.position
    return (payload["tenant"] == scope.tenant
            and (not scope.spaces or payload["space"] in scope.spaces)
            and (not scope.kinds or payload["kind"] in scope.kinds)
            and (not scope.tags or bool(set(scope.tags) & set(payload.get("tags", ()))))
            and (scope.session is None or payload.get("session") == scope.session)
            and (scope.agent is None or payload.get("agent") == scope.agent)
            and payload["valid_from"] <= scope.valid_at < payload["valid_to"]
            and payload["sys_from"] <= position < payload["sys_to"])
