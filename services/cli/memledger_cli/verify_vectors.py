"""``memledger verify``: the vector index against what the log implies, per (tenant, space).

Both sides are ``memledger_query.core.vector_summary`` digests as of one position: the expected ones
from the PostgreSQL rebuild of the log (its item versions are the same rectangles the vector
fold makes points of), the actual ones from the index. The index is read in this process when
it can be opened here (a Qdrant server, or Qdrant Edge while no ``memledger up`` holds it:
Edge takes an exclusive lock on its write-ahead log and has no read-only mode), and otherwise
through the query service (``GET /v1/query/vectors/summary``, once per tenant).

Repair re-drives the vector fold over the whole log into an index opened here: applying an
item's first event rolls the item back entirely, so every item the log names ends exactly as
the log says (its embeddings come from the log too). Points of items the log never named are
counted, not removed.
"""

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from memledger_platform.auth import TENANT_HEADER
from memledger_platform.events import decode
from memledger_platform.eventstore import EventStore
from memledger_platform.vectorindex.port import VectorIndex
from memledger_query.core.vector_summary import (
    Digests,
    Row,
    SpaceDigest,
    point_row,
    summarize,
)
from memledger_schemas.api.vectors import SUMMARY_PATH
from memledger_vectors.fold import EVENT_TYPES, VectorFold

Progress = Callable[[int, int], None]
_BATCH = 2_000


@dataclass
class VectorComparison:
    source: str
    position: int
    """The position both sides were digested as of."""
    expected: Digests = field(default_factory=dict)
    actual: Digests = field(default_factory=dict)
    projected: int | None = None
    """The query service's vector projector position (reported over HTTP only)."""
    unaccounted: int | None = None
    """Points in the index that belong to no item of the log (in-process only)."""
    skipped: str = ""

    def differences(self) -> list[dict[str, Any]]:
        found = []
        for key in sorted(set(self.expected) | set(self.actual)):
            mine = self.actual.get(key, SpaceDigest())
            wanted = self.expected.get(key, SpaceDigest())
            if (mine.points, mine.current, mine.digest) != (wanted.points, wanted.current,
                                                             wanted.digest):
                what = "content differs" if mine.points == wanted.points else "point count differs"
                found.append({"tenant": key[0], "space": key[1], "points": mine.points,
                              "expected_points": wanted.points, "current": mine.current,
                              "expected_current": wanted.current, "what": what})
        if self.unaccounted:
            found.append({"tenant": "*", "space": "*", "points": self.unaccounted,
                          "expected_points": 0, "what": "points of items the log never named"})
        return found


def local(index: VectorIndex, items: Iterable[tuple[str, str, str]], expected: Digests,
          position: int, source: str) -> VectorComparison:
    """Digest an index opened in this process (every item of the log, then the total)."""
    seen = 0

    def rows() -> Iterator[tuple[str, str, Row]]:
        nonlocal seen
        for tenant, space, item in items:
            points = index.points(tenant, item)
            seen += len(points)
            yield from ((tenant, str(p.payload.get("space", space)), point_row(p))
                        for p in points)

    actual = summarize(rows(), position)
    return VectorComparison(source, position, expected, actual,
                            unaccounted=max(0, index.count() - seen))


async def remote(url: str, tenants: Iterable[str], expected: Digests, position: int,
                 wait_ms: int, transport: httpx.AsyncBaseTransport | None = None,
                 api_key: str | None = None) -> VectorComparison:
    """Digest the index of a running query service, tenant by tenant (``api_key``: an admin
    key, where the service requires keys; it answers for its own tenant only)."""
    result = VectorComparison(f"query service at {url}", position, expected)
    auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=url, timeout=120.0, transport=transport,
                                 headers=auth) as client:
        for tenant in sorted(set(tenants)):
            try:
                response = await client.get(SUMMARY_PATH, headers={TENANT_HEADER: tenant},
                                            params={"as_of_position": position,
                                                    "wait_ms": wait_ms})
            except httpx.HTTPError as error:
                result.skipped = f"the query service at {url} did not answer ({error!r})"
                return result
            if response.status_code != 200:
                result.skipped = (f"{SUMMARY_PATH} answered {response.status_code} for "
                                  f"tenant {tenant!r}: {response.text[:200]}")
                return result
            body = response.json()
            result.projected = body["projected_position"]
            for space in body["spaces"]:
                result.actual[(tenant, space["space_id"])] = SpaceDigest(
                    space["points"], space["current"], int(space["digest"], 16))
    return result


def redrive(index: VectorIndex, store: EventStore, model: str,
            progress: Progress | None = None) -> int:
    """Fold the whole log into ``index`` again; return how many memory events were applied."""
    fold = VectorFold(index.points, model, sessions=index.session_messages, vectors=index.vectors)
    after = applied = 0
    end = store.max_position()
    while batch := store.read_all(after, _BATCH):
        for event in batch:
            if event.event_type in EVENT_TYPES:
                fold.apply(decode(event.document()))
                applied += 1
        upserts, gone = fold.take()
        index.upsert(upserts)
        index.delete(gone)
        after = batch[-1].position
        if progress is not None:
            progress(after, max(end, after))
    index.optimize()
    return applied
