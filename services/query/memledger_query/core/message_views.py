"""Plain reads of conversations beyond ``views``: the turns around message hits (one query for
every hit of a search) and the sessions of a space, filtered and paged."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg import Connection, sql

from memledger_schemas.api.reads import Basis, SessionSummary
from memledger_schemas.api.semantic import Turn, Window


@dataclass(frozen=True)
class Said:
    """A message hit: where its turns are looked up."""

    message_id: str
    session_id: str
    position: int


_WINDOW = """
SELECT h.message_id::text, t.side, t.message_id::text, t.position, t.role, t.participant,
       t.content, t.said_at
FROM unnest(%(ids)s::uuid[], %(sessions)s::uuid[], %(positions)s::bigint[])
     AS h(message_id, session_id, position)
CROSS JOIN LATERAL (
    (SELECT 'before' AS side, m.message_id, m.position, m.role, m.participant, m.content,
            coalesce(m.said_at, m.recorded_at) AS said_at
     FROM {s}.messages m
     WHERE m.tenant_id = %(tenant)s AND m.session_id = h.session_id
       AND m.position < h.position AND coalesce(m.said_at, m.recorded_at) <= %(valid_at)s
     ORDER BY m.position DESC LIMIT %(n)s)
    UNION ALL
    (SELECT 'after', m.message_id, m.position, m.role, m.participant, m.content,
            coalesce(m.said_at, m.recorded_at)
     FROM {s}.messages m
     WHERE m.tenant_id = %(tenant)s AND m.session_id = h.session_id
       AND m.position > h.position AND m.position <= %(p)s
       AND coalesce(m.said_at, m.recorded_at) <= %(valid_at)s
     ORDER BY m.position LIMIT %(n)s)) t"""


def windows(conn: Connection[Any], s: str, tenant: str, hits: Sequence[Said], n: int,
            at: Basis) -> dict[str, Window]:
    """The ``n`` turns before and after each hit in its session, as of ``at`` (appended by
    ``at.position``, said by ``at.valid_at``), by message id; one query for all hits."""
    if not hits or n <= 0:
        return {}
    rows = conn.execute(sql.SQL(_WINDOW).format(s=sql.Identifier(s)), {
        "ids": [h.message_id for h in hits], "sessions": [h.session_id for h in hits],
        "positions": [h.position for h in hits], "tenant": tenant, "n": n,
        "valid_at": at.valid_at, "p": at.position}).fetchall()
    sides: dict[str, dict[str, list[Turn]]] = {h.message_id: {"before": [], "after": []}
                                               for h in hits}
    for hit, side, *turn in rows:
        sides[hit][side].append(Turn(message_id=turn[0], position=turn[1], role=turn[2],
                                     participant=turn[3], content=turn[4], said_at=turn[5]))
    return {hit: Window(before=sorted(found["before"], key=_position), after=found["after"])
            for hit, found in sides.items()}


def _position(turn: Turn) -> int:
    return turn.position


@dataclass(frozen=True)
class SessionFilters:
    """Which sessions of a space to list (every filter optional); windows are half-open."""

    agent_id: str | None = None
    participant: str | None = None
    status: Literal["active", "ended"] | None = None
    started_from: datetime | None = None
    started_to: datetime | None = None
    ended_from: datetime | None = None
    ended_to: datetime | None = None


_SESSIONS = """
SELECT x.session_id::text, x.space_id, x.title, x.agent_id, x.status, x.started_at,
       x.ended_at, coalesce(m.messages, 0), coalesce(m.participants, '{{}}'), m.first_said,
       m.last_said
FROM {s}.sessions x
LEFT JOIN LATERAL (
    SELECT count(*) AS messages,
           array_agg(DISTINCT participant) FILTER (WHERE participant IS NOT NULL)
               AS participants,
           min(coalesce(said_at, recorded_at)) AS first_said,
           max(coalesce(said_at, recorded_at)) AS last_said
    FROM {s}.messages WHERE tenant_id = x.tenant_id AND session_id = x.session_id) m ON true
WHERE x.tenant_id = %(tenant)s AND x.space_id = %(space)s"""
_FILTERS = (
    ("agent_id", "x.agent_id = %(agent_id)s"),
    ("status", "x.status = %(status)s"),
    ("started_from", "x.started_at >= %(started_from)s"),
    ("started_to", "x.started_at < %(started_to)s"),
    ("ended_from", "x.ended_at >= %(ended_from)s"),
    ("ended_to", "x.ended_at < %(ended_to)s"),
    ("participant", "EXISTS (SELECT 1 FROM {s}.messages p WHERE p.tenant_id = x.tenant_id "
                    "AND p.session_id = x.session_id AND p.participant = %(participant)s)"))


def sessions(conn: Connection[Any], s: str, tenant: str, space: str, filters: SessionFilters,
             limit: int, after: tuple[datetime, str] | None = None) -> list[SessionSummary]:
    """The space's sessions that pass ``filters``, most recently started first (``after``:
    the (started_at, session_id) of the last one of the previous page)."""
    params: dict[str, Any] = {"tenant": tenant, "space": space, "limit": limit,
                              **filters.__dict__}
    where = "".join(f" AND {clause}" for name, clause in _FILTERS
                    if params[name] is not None)
    if after is not None:
        where += " AND (x.started_at, x.session_id) < (%(after_at)s, %(after_id)s::uuid)"
        params.update(after_at=after[0], after_id=after[1])
    query = sql.SQL(_SESSIONS + where + " ORDER BY x.started_at DESC, x.session_id DESC "
                    "LIMIT %(limit)s").format(s=sql.Identifier(s))
    return [SessionSummary(
        session_id=r[0], space_id=r[1], title=r[2], agent_id=r[3], status=r[4],
        started_at=r[5], ended_at=r[6], messages=r[7], participants=sorted(r[8]),
        first_said_at=r[9], last_said_at=r[10]) for r in conn.execute(query, params)]
