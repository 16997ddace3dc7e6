"""A digest of the vector read model per (tenant, space), as of a position: what
``memledger verify`` compares with the same digest of a rebuild from the log.

A point is one bi-temporal row of a memory item (``memledger_vectors.fold``) or one
conversation message, and rows are only ever closed, never changed: the index as of position P
is its points with ``sys_from <= P``, with a ``sys_to`` or ``archived_from`` beyond P read as
open. So an index that has moved on since can still be compared at P, exactly. The digest is a
sum of per-row hashes (order-independent, so both sides stream their rows in any order and hold
only the sums).

``GET /v1/query/vectors/summary`` serves it for the caller's tenant (admin role): counts and
digests only, no content. It lists the tenant's items and messages from the PostgreSQL read
model and reads the points of each, so points of one that model lacks are not counted.
"""

import hashlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import sql

from memledger_platform.auth import Denied, Principal, require
from memledger_platform.vectorindex.port import OPEN, IndexedPoint, VectorIndex
from memledger_query.core.index_progress import Progress
from memledger_query.core.reader import Reader
from memledger_query.entrypoints.api import Problem
from memledger_schemas.api.vectors import SpaceSummary, VectorSummary

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MASK = 2**64 - 1
_PAGE = 2_000


@dataclass(frozen=True)
class Row:
    """What a point and a read-model row of an item version have in common."""

    item_id: str
    sys_from: int
    sys_to: int | None
    valid_from_us: int
    valid_to_us: int | None
    archived: int | None
    content: str

    def fingerprint(self, as_of: int) -> int:
        """A 64-bit hash of the row as known at ``as_of``."""
        sys_to = self.sys_to if self.sys_to is not None and self.sys_to <= as_of else None
        archived = self.archived if self.archived is not None and self.archived <= as_of else None
        text = (f"{self.item_id}|{self.sys_from}|{sys_to}|{self.valid_from_us}|"
                f"{self.valid_to_us}|{archived}|{self.content}")
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


@dataclass
class SpaceDigest:
    points: int = 0
    current: int = 0
    digest: int = 0

    def add(self, row: Row, as_of: int) -> None:
        if row.sys_from > as_of:
            return
        self.points += 1
        self.current += row.sys_to is None or row.sys_to > as_of
        self.digest = (self.digest + row.fingerprint(as_of)) & _MASK


Digests = dict[tuple[str, str], SpaceDigest]
"""Per (tenant, space)."""


def summarize(rows: Iterable[tuple[str, str, Row]], as_of: int) -> Digests:
    """The digests of ``(tenant, space, row)`` as of ``as_of``."""
    found: Digests = {}
    for tenant, space, row in rows:
        found.setdefault((tenant, space), SpaceDigest()).add(row, as_of)
    return found


def point_row(point: IndexedPoint) -> Row:
    p = point.payload
    return Row(str(p["item_id"]), int(p["sys_from"]), _open_int(p["sys_to"]),
               round(p["valid_from"] * 1_000_000),
               None if p["valid_to"] >= OPEN else round(p["valid_to"] * 1_000_000),
               _open_int(p.get("archived_from", OPEN)), str(p["content"]))


def micros(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


def _open_int(value: float) -> int | None:
    return None if value >= OPEN else int(value)


def index_rows(index: VectorIndex, items: Iterable[tuple[str, str, str]]
               ) -> Iterator[tuple[str, str, Row]]:
    """Every point of each ``(tenant, space, item_id)``, as rows."""
    for tenant, space, item in items:
        for point in index.points(tenant, item):
            yield tenant, str(point.payload.get("space", space)), point_row(point)


async def summary(index: VectorIndex, progress: Progress, reader: Reader,
                  run: Callable[..., Awaitable[Digests]], who: Principal,
                  as_of_position: int | None, wait_ms: int) -> VectorSummary:
    """The digests of ``who``'s tenant (an admin) as of ``as_of_position`` (default: as far as
    the index got), waiting up to ``wait_ms`` for the index to reach it. ``run(fn, *args)``:
    where the index is read (the search pool: a graph build holds the index for seconds, and
    every item's points are read here). An admin key limited to some spaces sees only
    theirs."""
    try:
        require(who, "admin")
    except Denied as denied:
        raise Problem(denied.status, denied.code, denied.message, denied.path) from None
    reached = await progress.reached()
    at = reached if as_of_position is None else as_of_position
    if at > reached:
        await progress.wait_for(at, wait_ms / 1000)
    found = await run(_tenant_digests, index, reader, who.tenant, at)
    return VectorSummary(
        tenant=who.tenant, as_of_position=at, projected_position=await progress.reached(),
        spaces=[SpaceSummary(space_id=space, points=d.points, current=d.current,
                             digest=f"{d.digest:016x}")
                for (_, space), d in sorted(found.items()) if who.sees(space)])


def _tenant_digests(index: VectorIndex, reader: Reader, tenant: str, as_of: int) -> Digests:
    return summarize(index_rows(index, _items(reader, tenant)), as_of)


def _items(reader: Reader, tenant: str) -> Iterator[tuple[str, str, str]]:
    """The tenant's items in the live read model, a page at a time."""
    after = ""
    while True:
        page: list[Any] = reader.run(_item_page, tenant, after)
        yield from ((tenant, space, item) for space, item in page)
        if len(page) < _PAGE:
            return
        after = page[-1][1]


def _item_page(conn: Any, s: str, tenant: str, after: str) -> list[Any]:
    """The next page of the tenant's items and messages (each one or more points), by id."""
    query = sql.SQL(
        "SELECT space_id, id FROM (SELECT space_id, item_id::text AS id FROM {s}.items WHERE "
        "tenant_id = %(t)s AND item_id::text > %(after)s UNION ALL SELECT space_id, "
        "message_id::text FROM {s}.messages WHERE tenant_id = %(t)s AND message_id::text > "
        "%(after)s) found ORDER BY id LIMIT %(n)s").format(s=sql.Identifier(s))
    return list(conn.execute(query, {"t": tenant, "after": after, "n": _PAGE}).fetchall())
