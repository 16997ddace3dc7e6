"""``VectorIndex``: the points of item versions and of conversation messages, each with a dense
vector (cosine), a sparse keyword vector (BM25-style term weights) or both, and the scope and
time bounds of its version.

Contract (one suite checks every adapter):

- ``upsert`` of a point id that exists replaces the whole point (ids are deterministic per item
  version, so a redelivered projection write is harmless), stored as ``stored_payload`` says;
- ``search`` (dense) and ``search_sparse`` (keywords) return at most ``k`` hits, best first,
  only inside ``scope`` (``in_scope`` is its meaning): the tenant always; spaces, kinds, tags,
  layers, roles (any of), session, agent and participant when given; and in time: the version
  valid at ``valid_at`` (``valid_from <= t < valid_to``), known at ``position``
  (``sys_from <= p < sys_to``) and not yet archived then (``p < archived_from``), or, with
  no ``position``, the versions current now, or, with a ``head``, the versions still visible
  at ``head`` (its caller leaves out those written after it: ``written_by``);
- a point without the vector a search uses is never a hit of that search;
- ``search_both`` answers as ``search`` and ``search_sparse`` each would, in one call;
- each search with ``fields`` finds the same hits, each with those keys of its payload only;
- ``payloads`` gives the whole payloads, as stored, of the points asked that exist.
"""

import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

OPEN = 9.0e15
"""The bound of an open interval (larger than any timestamp in seconds or any position)."""

Vector = npt.NDArray[np.float32]
"""A dense vector as ``VectorIndex.vectors`` gives it: float32 values in one buffer, which
cross a process boundary as bytes (a list of Python floats is pickled, unpickled and
converted float by float, at every search)."""

MAX_TERM = 2**31
"""Sparse indices are below this: Qdrant stores them as unsigned 32-bit, and 31 bits keep them
non-negative in every client."""

KEYWORD_FIELDS = ("tenant", "space", "kind", "tags", "session", "agent", "item_id",
                  "subject_id", "layer", "role", "participant")
RANGE_FIELDS = ("valid_from", "valid_to", "sys_from", "sys_until")
"""The payload fields scopes and ``points`` filter on: the engines that can index payload index
these (keyword and float), so a filtered search stays fast at 100k points."""

MESSAGE_KIND, MESSAGE_LAYER = "message", "conversation"
"""The ``kind`` and ``layer`` of a conversation message's point (an item's kind is a memory
kind, its layer "session", "project" or "ecosystem")."""

EMBEDDED_FROM = "embedded_from"
"""The position a point's dense vector came at (the enricher's embedding event), in its
payload once it has one: a search as of an earlier position judges it as not yet embedded, so
an audited search replays as it ran. A point written before this was recorded has none, and
counts as embedded from the start."""

SYS_UNTIL = "sys_until"
"""Derived on every write (``stored_payload``): where a version stops being visible in system
time, ``min(sys_to, archived_from)``."""


@dataclass(frozen=True)
class SparseVector:
    """Term weights: ``indices`` unique and ascending in ``[0, MAX_TERM)``, one value each."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        # Checked here so a bad vector fails at its maker, not deep inside one engine (in C
        # loops: the vector projector makes one for every point it writes).
        indices = self.indices
        if len(indices) != len(self.values):
            raise ValueError("a sparse vector needs exactly one value per index")
        if indices and not (min(indices) >= 0 and max(indices) < MAX_TERM):
            raise ValueError(f"sparse indices must lie in [0, {MAX_TERM})")
        if not all(map(operator.lt, indices, indices[1:])):
            raise ValueError("sparse indices must be unique and ascending")


@dataclass(frozen=True)
class IndexedPoint:
    point_id: str
    """A UUID string in canonical form (lowercase, hyphenated): the form engines return."""
    vector: Sequence[float] | None
    """Dense (cosine); ``None`` until the item is embedded."""
    payload: dict[str, Any]
    """tenant, space, kind, tags, session, agent, item_id, valid_from, valid_to (epoch
    seconds, ``OPEN`` if unbounded), sys_from, sys_to, archived_from (positions, ``OPEN`` if
    current / not archived), ...; a message's point also role and participant (its
    ``item_id`` is the message id, its kind "message")."""
    sparse: SparseVector | None = None
    """Keyword term weights (BM25-style, see ``sparse.encode_document``); an empty one is
    stored as none, since it could never match."""


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
    layers: tuple[str, ...] = ()
    """Memory layers ("session", "project", "ecosystem"; a message's is "conversation"), any
    of; empty: every layer."""
    roles: tuple[str, ...] = ()
    """Message roles, any of (items have none: a role filter finds messages only)."""
    participant: str | None = None
    """Who said it (items have no participant: this finds messages only)."""
    items: tuple[str, ...] = ()
    """Only these items (a theme's members), any of; empty: every item."""
    head: int | None = None
    """Without a ``position``: the index's position when the search's basis was fixed. The
    engine keeps the versions still visible there, with the one condition a current search
    has, and the caller leaves out the points written after it (``written_by``), so that a
    search answers as one as of its basis does while the index moves on."""


@dataclass(frozen=True)
class Hit:
    point_id: str
    score: float
    payload: dict[str, Any] = field(default_factory=dict)


class IndexUnavailable(Exception):
    """The index's engine cannot be reached now; a later call may succeed."""


class IndexReopened(Exception):
    """The index's engine stopped and was started again: what was written since the last
    ``flush`` may be lost. Raised once, by the next call of a writer (not by searches), so
    that the writer writes again what it wrote since its last flush."""


class VectorIndex(ABC):
    @abstractmethod
    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        """Insert ``points``, or replace whole points (vectors and payload) that exist."""

    @abstractmethod
    def delete(self, point_ids: Sequence[str]) -> None:
        """Remove points (ids that are absent are ignored)."""

    @abstractmethod
    def search(self, vector: Sequence[float], scope: Scope, k: int,
               fields: Sequence[str] | None = None) -> list[Hit]:
        """The ``k`` nearest points by cosine inside ``scope``, best first; points without a
        dense vector are never hits. ``fields``: the payload keys each hit carries (those its
        payload has; ``None``: all of them): reading a whole payload costs an engine more than
        scoring the point, and a caller after a few keys of each hit need not pay for it."""

    @abstractmethod
    def search_sparse(self, query: SparseVector, scope: Scope, k: int,
                      fields: Sequence[str] | None = None) -> list[Hit]:
        """The ``k`` best keyword matches inside ``scope``, best first. A point's score is the
        sum over the terms it shares with ``query`` of query weight * its weight * ``idf``
        (statistics over every point in the index that has a sparse vector, as Qdrant's IDF
        modifier computes them). Points sharing no term are never hits; scores are > 0.
        ``fields``: as ``search``'s."""

    def search_both(self, vector: Sequence[float] | None, query: SparseVector | None,
                    scope: Scope, k: int, fields: Sequence[str] | None = None
                    ) -> tuple[list[Hit], list[Hit]]:
        """``search`` (none without ``vector``) and ``search_sparse`` (none without ``query``
        or its terms) of one scope, as each answers: one call, so one round trip to an index
        in another process."""
        dense = self.search(vector, scope, k, fields) if vector is not None else []
        words = self.search_sparse(query, scope, k, fields) \
            if query is not None and query.indices else []
        return dense, words

    @abstractmethod
    def payloads(self, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The whole payloads, as stored, of those of ``point_ids`` that exist, by point id;
        unknown ids are left out. A search's candidates are fetched with the few keys that
        rank them (``fields``), and only the hits shown are read whole, in one call."""

    @abstractmethod
    def vectors(self, point_ids: Sequence[str]) -> dict[str, Vector]:
        """The dense vectors as stored (unit-length) of those of ``point_ids`` that have one,
        by point id; unknown ids are left out. Hits come without them: ranking compares only
        the few hits it shows, so converting every hit's vector would be wasted (ADR 0006)."""

    @abstractmethod
    def points(self, tenant: str, item_id: str) -> list[IndexedPoint]:
        """Every point of ``item_id`` in ``tenant``, by id, with its payload as stored, its
        sparse vector and its dense vector as stored: unit-length (cosine keeps direction)."""

    @abstractmethod
    def session_messages(self, tenant: str, session: str, before: int) -> list[IndexedPoint]:
        """The message points of ``session`` in ``tenant`` appended before position
        ``before`` (``sys_from < before``), oldest first, as ``points`` returns them."""

    @abstractmethod
    def delete_subject(self, tenant: str, subject_id: str) -> int:
        """Remove every point of a data subject (payload ``subject_id``) in ``tenant``, from
        the engine's files too, not only from its answers; how many there were (an erasure's
        receipt counts them)."""

    @abstractmethod
    def count(self) -> int:
        """How many points are indexed."""

    def graph(self) -> "GraphState":
        """How much of the index its graph covers, and whether a build is under way (an
        engine that builds nothing aside, or searches exactly, covers every point)."""
        points = self.count()
        return GraphState(points, points, building=False)

    def flush(self) -> None:  # noqa: B027  (optional: engines that persist on their own)
        """Make what was written durable (engines without a write-ahead log)."""

    def optimize(self) -> None:  # noqa: B027  (optional: only engines that build indexes)
        """Index what was added since the last call (HNSW); searches stay correct without it,
        only slower."""

    def close(self) -> None:  # noqa: B027  (optional: most adapters hold nothing to release)
        """Release resources (flushing what is pending)."""


@dataclass(frozen=True)
class GraphState:
    """``points`` in the index, ``indexed`` vectors in the engine's indexes (Qdrant counts the
    dense graph's and the keyword index's together: a point with both counts twice; a dense
    vector in no graph is searched one by one), and whether a build is under way."""

    points: int
    indexed: int
    building: bool


def message_text(participant: str | None, content: str) -> str:
    """A message as a reader sees it, ``"<participant>: <content>"`` (the content alone when
    nobody is named): what of a message is indexed and embedded. A question names the person
    ("what did Ada research?"), the message that answers it is hers but rarely says so."""
    return f"{participant}: {content}" if participant else content


def idf(total: int, containing: int) -> float:
    """Qdrant's IDF modifier: ``total`` points with a sparse vector, ``containing`` with the
    term. Always > 0, so every shared term adds to a score."""
    return math.log(1 + (total - containing + 0.5) / (containing + 0.5))


def stored_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload as every adapter stores it: with ``archived_from`` (a range condition on a
    missing key fails in Qdrant, while ``in_scope`` reads a missing key as ``OPEN``) and
    ``sys_until``, which ``conditions`` filters on in place of ``sys_to`` and ``archived_from``
    (``sys_until > p`` holds exactly when both do). Whole points are written, never parts of a
    payload, so the derived field cannot go stale."""
    stored = {"archived_from": OPEN, **payload}
    stored[SYS_UNTIL] = min(stored["sys_to"], stored["archived_from"])
    return stored


@dataclass(frozen=True)
class Condition:
    """One payload condition of a scope, independent of any engine's filter types."""

    key: str
    op: Literal["eq", "any", "lte", "gt"]
    value: Any


def complete_payloads(page: Callable[[Any], tuple[list[IndexedPoint], Any]],
                      upsert: Callable[[Sequence[IndexedPoint]], None]) -> int:
    """Write again every point stored before ``sys_until`` existed (``page(offset)``: the
    next points without it, and the offset after them), so scopes find them: a condition on
    a missing key fails. Done when an index opens, once per old index; how many there were."""
    rewritten, offset, first = 0, None, True
    while first or offset is not None:
        found, offset = page(offset)
        upsert(found)
        rewritten, first = rewritten + len(found), False
    return rewritten


def conditions(scope: Scope) -> list[Condition]:
    """The scope as payload conditions, all of which must hold (``in_scope`` is their meaning).

    As few as that takes: an engine checks every condition on every point a search visits (and
    on every point not yet in an HNSW graph), so each one costs. System time is one condition
    on ``sys_until``, and ``sys_from <= p`` is left out when ``p`` is now (every version
    written has it). Figures in ADR 0006."""
    position = _position(scope)
    found = [Condition("tenant", "eq", scope.tenant),
             Condition("valid_from", "lte", scope.valid_at),
             Condition("valid_to", "gt", scope.valid_at),
             Condition(SYS_UNTIL, "gt", position)]
    if scope.position is not None:
        found.append(Condition("sys_from", "lte", position))
    for key, values in (("space", scope.spaces), ("kind", scope.kinds), ("tags", scope.tags),
                        ("layer", scope.layers), ("role", scope.roles),
                        ("item_id", scope.items)):
        if values:
            found.append(Condition(key, "any", list(values)))
    for key, value in (("session", scope.session), ("agent", scope.agent),
                       ("participant", scope.participant)):
        if value is not None:
            found.append(Condition(key, "eq", value))
    return found


def subject_conditions(tenant: str, subject_id: str) -> list[Condition]:
    return [Condition("tenant", "eq", tenant), Condition("subject_id", "eq", subject_id)]


def item_conditions(tenant: str, item_id: str) -> list[Condition]:
    """The points of one item in one tenant (what ``points`` reads)."""
    return [Condition("tenant", "eq", tenant), Condition("item_id", "eq", item_id)]


def session_conditions(tenant: str, session: str, before: int) -> list[Condition]:
    """The message points of one session appended before a position (what
    ``session_messages`` reads)."""
    return [Condition("tenant", "eq", tenant), Condition("session", "eq", session),
            Condition("kind", "eq", MESSAGE_KIND), Condition("sys_from", "lte", before - 1)]


def matches(payload: dict[str, Any], found: list[Condition]) -> bool:
    """Whether ``payload`` meets every condition (a missing key meets none, as in Qdrant)."""
    return all(_meets(payload.get(c.key), c) for c in found)


def _meets(value: Any, c: Condition) -> bool:
    if value is None:
        return False
    if c.op == "eq":
        return bool(value == c.value)
    if c.op == "any":
        held = set(value) if isinstance(value, list | tuple) else {value}
        return bool(held & set(c.value))
    return bool(value <= c.value) if c.op == "lte" else bool(value > c.value)


def oldest_first(points: list[IndexedPoint]) -> list[IndexedPoint]:
    return sorted(points, key=lambda p: (float(p.payload["sys_from"]), p.point_id))


def in_scope(payload: dict[str, Any], scope: Scope) -> bool:
    """The scope as a predicate: the in-memory adapter's filter, and the spec of the others."""
    position = _position(scope)
    return (payload["tenant"] == scope.tenant
            and (not scope.spaces or payload["space"] in scope.spaces)
            and (not scope.kinds or payload["kind"] in scope.kinds)
            and (not scope.tags or bool(set(scope.tags) & set(payload.get("tags", ()))))
            and (scope.session is None or payload.get("session") == scope.session)
            and (scope.agent is None or payload.get("agent") == scope.agent)
            and (not scope.layers or payload.get("layer") in scope.layers)
            and (not scope.roles or payload.get("role") in scope.roles)
            and (scope.participant is None or payload.get("participant") == scope.participant)
            and (not scope.items or payload["item_id"] in scope.items)
            and payload["valid_from"] <= scope.valid_at < payload["valid_to"]
            and (scope.position is None or payload["sys_from"] <= position)
            and position < payload["sys_to"]
            and position < payload.get("archived_from", OPEN))


def _position(scope: Scope) -> float:
    # "Current" is a position just below OPEN: still inside every open interval.
    seen = seen_at(scope)
    return OPEN - 1 if seen is None else seen


def seen_at(scope: Scope) -> int | None:
    """The position a search in ``scope`` answers as of (None: now)."""
    return scope.head if scope.position is None else scope.position


def written_by(payload: dict[str, Any], scope: Scope) -> bool:
    """Whether a hit's version was written by the position its search answers as of (the
    engine checks this for a ``position``, its caller for a ``head``)."""
    seen = seen_at(scope)
    return seen is None or float(payload["sys_from"]) <= seen
