"""What the engines hold after a mixed load, read whole and straight from each (the event store
through its port, the events stream with a throw-away consumer, the PostgreSQL read model's
tables, the vector index opened in this process once the query service has stopped), and where
each erased subject's plaintext still is: in any tuple, live or dead, of the event store's or
the read models' tables, in any file of the vector index or of the JetStream store."""

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from memledger_platform.embedding.embedder import HashingEmbedder, LocalMiniLmEmbedder
from memledger_platform.readmodel import schema
from memledger_platform.settings import Settings
from memledger_platform.vectorindex.factory import open_index
from memledger_platform.vectorindex.port import IndexedPoint
from tests.faults.audit import Copies, _all_events, _event_store, _read_stream
from tests.faults.checker import Observed
from tests.faults.cluster import Cluster
from tests.faults.mixed import Ledger
from tests.integration.erasure_support import tables_of, tuple_hits


def observe(cluster: Cluster, ledger: Ledger) -> Observed:
    """Everything the checker needs; call with the services stopped, the engines running."""
    observed = Observed()
    _read_store(cluster.dsn, observed)
    copies = Copies()
    asyncio.run(_read_stream(cluster.nats_url, copies))
    observed.events["stream"] = copies.by_event["stream"]
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        _read_models(conn, observed)
        _read_vectors(cluster, ledger, observed)
        observed.refused_items = Counter({r.item_id: observed.items[r.item_id]
                                          for r in ledger.refused if observed.items[r.item_id]})
        observed.plaintext = {token: plaintext_hits(conn, cluster.home, token)
                              for token in ledger.erased.values()}
    return observed


def _read_store(dsn: str, observed: Observed) -> None:
    events: Counter[str] = Counter()
    keys: Counter[str] = Counter()
    with _event_store(dsn) as store:
        for event in _all_events(store):
            fields = event.fields()
            events[str(fields["event_id"])] += 1
            keys[fields.get("idempotency_key") or ""] += 1
    observed.events["store"], observed.stored_keys = events, keys


def _read_models(conn: psycopg.Connection[Any], observed: Observed) -> None:
    names = schema.Names()
    live = sql.Identifier(names.schema(schema.live_version(conn, names)))

    def rows(query: str) -> list[tuple[Any, ...]]:
        return conn.execute(sql.SQL(query).format(live)).fetchall()

    observed.events["changes"] = Counter(
        {str(e): int(n) for e, n in rows("SELECT event_id, count(*) FROM {}.changes GROUP BY 1")})
    observed.items = Counter(
        {str(i): int(n) for i, n in rows("SELECT item_id, count(*) FROM {}.items GROUP BY 1")})
    observed.messages["messages"] = Counter({str(m): int(n) for m, n in rows(
        "SELECT message_id, count(*) FROM {}.messages GROUP BY 1")})
    observed.signals = Counter({int(p): int(n) for p, n in rows(
        "SELECT position, count(*) FROM {}.signals GROUP BY 1")})
    versions = rows("SELECT item_id, sys_from, valid::text, count(*) FROM {}.item_versions "
                    "GROUP BY 1, 2, 3")
    _tally_rows(observed, "bitemporal", [((str(i), int(p)), v, int(n)) for i, p, v, n in versions])


def _tally_rows(observed: Observed, place: str,
                found: list[tuple[tuple[str, int], str, int]]) -> None:
    """``found``: ((item, position), valid range, how many alike)."""
    counts: Counter[tuple[str, int]] = Counter()
    twice = set()
    for at, _, n in found:
        counts[at] += n
        if n > 1:
            twice.add(at)
    observed.rows[place], observed.twice[place] = counts, twice


def _read_vectors(cluster: Cluster, ledger: Ledger, observed: Observed) -> None:
    embedder = LocalMiniLmEmbedder if cluster.embedder == "local" else HashingEmbedder
    index = open_index(Settings(home=cluster.home, embedder=cluster.embedder),
                       embedder.model_id, embedder.dims)
    items = {e.item_id for w in ledger.acked for e in w.effects if e.item_id}
    messages = {e.message_id for w in ledger.acked for e in w.effects if e.message_id}
    try:
        points = {item: index.points(cluster.TENANT, item) for item in items}
        observed.messages["message-vectors"] = Counter(
            {m: n for m in messages if (n := len(index.points(cluster.TENANT, m)))})
        for refusal in ledger.refused:
            if found := len(index.points(cluster.TENANT, refusal.item_id)):
                observed.refused_items[refusal.item_id] += found
    finally:
        index.close()
    alike = Counter((item, _position(p), _valid(p)) for item, ps in points.items() for p in ps)
    _tally_rows(observed, "vectors", [((i, pos), v, n) for (i, pos, v), n in alike.items()])


def _position(point: IndexedPoint) -> int:
    return int(point.payload["sys_from"])


def _valid(point: IndexedPoint) -> str:
    return f"{point.payload['valid_from']}/{point.payload['valid_to']}"


def plaintext_hits(conn: psycopg.Connection[Any], home: Path, token: str) -> list[str]:
    """Where ``token`` still is: tables (every tuple, live or dead, of the event store and
    of every projection version) and files (the vector index's, the JetStream store's)."""
    schemas = [r[0] for r in conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname = 'public' OR nspname LIKE "
        "'memledger\\_rm\\_%'").fetchall()]
    tables = [t for s in schemas for t in tables_of(conn, s)]
    return tuple_hits(conn, tables, token.encode()) + [
        str(p.relative_to(home)) for d in (home / "vectors", home / "nats" / "jetstream")
        for p in d.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
