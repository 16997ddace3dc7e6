"""After the load: where each write landed. Every copy is read whole, straight from its engine
(the event store through its port, the events stream with a throw-away consumer, the PostgreSQL
read model's tables, the vector index opened in this process once the query service has
stopped), and counted per write, so a write found twice is as visible as one not found."""

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import ServiceUnavailableError
from psycopg import sql

from memledger_platform import bus
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.readmodel import schema
from memledger_platform.settings import Settings
from memledger_platform.vectorindex.factory import open_index
from memledger_schemas.subjects import HDR_MSG_ID, Subjects

PLACES = ("store", "stream", "items", "versions", "changes", "vectors", "dense", "embedded")
"""Where an acknowledged write must be exactly once: the event store (by idempotency key), the
events stream (by event id), the PostgreSQL read model (its items row, its current version row,
its changes-feed row), the vector index (points of the item, and those with a dense vector)
and its one ``memory.embedded`` event (the enricher's work, recorded once however often it was
redelivered)."""


@dataclass
class Copies:
    """How often each thing was found in each place."""

    by_key: dict[str, Counter[str]] = field(default_factory=dict)
    """place → counts by idempotency key as stored (store, stream)."""
    by_event: dict[str, Counter[str]] = field(default_factory=dict)
    """place → counts by event id (stream, changes)."""
    by_item: dict[str, Counter[str]] = field(default_factory=dict)
    """place → counts by item id (store asserts, items, versions, vectors, embedded)."""
    stream_problems: list[str] = field(default_factory=list)
    store_events: dict[int, str] = field(default_factory=dict)
    """Event type by position, of every event in the store (the enricher's too)."""
    changes_positions: set[int] = field(default_factory=set)
    stored_key: Callable[[str], str] = str
    """How the event store holds an idempotency key (a keyed digest, with a master key)."""

    def not_projected(self) -> dict[int, str]:
        """Events of the store without their row in the changes feed of the PostgreSQL
        read model (one row per event, whoever wrote it)."""
        return {p: t for p, t in self.store_events.items() if p not in self.changes_positions}

    def count(self, place: str, key: str, event_id: str, item_id: str) -> int:
        """Copies of one acknowledged write in ``place``."""
        if place == "store":
            return self.by_key["store"][self.stored_key(key)]
        if place in ("stream", "changes"):
            return self.by_event[place][event_id]
        return self.by_item[place][item_id]

    def anywhere(self, key: str, item_id: str) -> list[str]:
        """The places a refused write was found in (none, if all is well)."""
        found = [p for p, counts in self.by_key.items() if counts[self.stored_key(key)]]
        return found + [p for p, counts in self.by_item.items() if item_id and counts[item_id]]


def read_copies(dsn: str, nats_url: str, home: Path, items: set[str],
                stored_key: Callable[[str], str] = str) -> Copies:
    """Every copy; the vector index is read for ``items`` and every item the store holds."""
    copies = Copies(stored_key=stored_key)
    _read_store(dsn, copies)
    asyncio.run(_read_stream(nats_url, copies))
    _read_models(dsn, copies)
    _read_vectors(home, items | set(copies.by_item["store"]), copies)
    return copies


def _read_store(dsn: str, copies: Copies) -> None:
    keys: Counter[str] = Counter()
    asserted: Counter[str] = Counter()
    embedded: Counter[str] = Counter()
    with _event_store(dsn) as store:
        for event in _all_events(store):
            copies.store_events[event.position] = event.event_type
            fields = event.fields()
            item = str(fields["payload"].get("item_id", ""))
            if event.event_type == "memory.asserted":
                asserted[item] += 1
                keys[fields.get("idempotency_key") or ""] += 1
            elif event.event_type == "memory.embedded":
                embedded[item] += 1
    copies.by_key["store"] = keys
    copies.by_item |= {"store": asserted, "embedded": embedded}


@contextmanager
def _event_store(dsn: str) -> Iterator[PostgresEventStore]:
    store = PostgresEventStore(datastore_from_dsn(dsn, pool_size=1))
    try:
        yield store
    finally:
        store.close()


def _all_events(store: PostgresEventStore) -> Iterator[Any]:
    after = 0
    while page := store.read_all(after, 5_000):
        yield from page
        after = page[-1].position


async def _read_stream(nats_url: str, copies: Copies) -> None:
    subjects = Subjects()
    nc = await bus.connect(nats_url, "memledger-faults-audit")
    try:
        js = nc.jetstream()
        total = (await js.stream_info(subjects.events_stream)).state.messages
        sub = await js.pull_subscribe(subjects.all_events, stream=subjects.events_stream,
                                      config=ConsumerConfig(ack_policy=AckPolicy.NONE,
                                                            deliver_policy=DeliverPolicy.ALL,
                                                            inactive_threshold=30.0))
        documents: list[tuple[str, dict[str, Any]]] = []
        while len(documents) < total:
            for msg in await _fetch(sub, min(1_000, total - len(documents))):
                documents.append(((msg.headers or {}).get(HDR_MSG_ID, ""), orjson.loads(msg.data)))
        await sub.unsubscribe()
    finally:
        await nc.close()
    _tally_stream(documents, copies)


async def _fetch(sub: JetStreamContext.PullSubscription, count: int) -> list[Msg]:
    """The next ``count`` messages. A cluster that has just lost a node may answer a fetch
    with 503 (no responder: its consumer's leader still being chosen): asked again then, for
    up to ``FETCH_RETRY_S``."""
    deadline = time.monotonic() + FETCH_RETRY_S
    while True:
        try:
            return await sub.fetch(count, timeout=10.0)
        except ServiceUnavailableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


FETCH_RETRY_S = 30.0


def _tally_stream(documents: list[tuple[str, dict[str, Any]]], copies: Copies) -> None:
    by_event: Counter[str] = Counter()
    by_key: Counter[str] = Counter()
    previous = 0
    for msg_id, document in documents:
        by_event[document["event_id"]] += 1
        if document["event_type"] == "memory.asserted":
            by_key[document.get("idempotency_key") or ""] += 1
        if msg_id != document["event_id"]:
            copies.stream_problems.append(f"message id {msg_id} carries {document['event_id']}")
        if document["global_position"] <= previous:
            copies.stream_problems.append(f"position {document['global_position']} after "
                                          f"{previous}")
        previous = document["global_position"]
    copies.by_event["stream"] = by_event
    copies.by_key["stream"] = by_key


def _read_models(dsn: str, copies: Copies) -> None:
    names = schema.Names()
    with psycopg.connect(dsn, autocommit=True) as conn:
        live = sql.Identifier(names.schema(schema.live_version(conn, names)))
        copies.by_item["items"] = _counts(conn, sql.SQL(
            "SELECT item_id::text, count(*) FROM {}.items GROUP BY 1").format(live))
        copies.by_item["versions"] = _counts(conn, sql.SQL(
            "SELECT item_id::text, count(*) FROM {}.item_versions WHERE sys_to IS NULL "
            "GROUP BY 1").format(live))
        copies.changes_positions = {int(r[0]) for r in conn.execute(sql.SQL(
            "SELECT position FROM {}.changes").format(live)).fetchall()}
        copies.by_event["changes"] = _counts(conn, sql.SQL(
            "SELECT event_id::text, count(*) FROM {}.changes GROUP BY 1").format(live))


def _counts(conn: psycopg.Connection[Any], query: sql.Composed) -> Counter[str]:
    return Counter({str(k): int(n) for k, n in conn.execute(query).fetchall()})


def _read_vectors(home: Path, items: set[str], copies: Copies) -> None:
    """Points per item (the index is read by item)."""
    embedder = HashingEmbedder()
    settings = Settings(home=home, embedder="hashing")
    index = open_index(settings, embedder.model_id, embedder.dims)
    try:
        points = {item: index.points("default", item) for item in items}
        copies.by_item["vectors"] = Counter({i: len(p) for i, p in points.items() if p})
        copies.by_item["dense"] = Counter(
            {i: n for i, p in points.items() if (n := sum(x.vector is not None for x in p))})
    finally:
        index.close()
