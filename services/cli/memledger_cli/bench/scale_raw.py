"""The raw engine beside ``bench scale``: PostgreSQL doing the phase's operations directly, from
as many clients and for as long: single-row inserts of a stored event's size, one transaction
each (the writes), and primary-key selects of such rows (the as-of reads)."""

import argparse
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from memledger_cli.bench.common import percentile
from memledger_cli.bench.ingest_raw import stored_event_bytes

ROWS = 1_000
"""Rows there before the clock starts, for the selects to read."""


def raw_postgres_ops(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    """``args.writers`` clients inserting and ``args.readers`` selecting at once, for
    ``args.seconds``: their throughput and latencies."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_scale_raw (id uuid PRIMARY KEY, position bigserial, "
                     "state bytea, recorded_at timestamptz DEFAULT clock_timestamp())")
        ids = [uuid.uuid4() for _ in range(ROWS)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO bench_scale_raw (id, state) VALUES (%s, %s)",
                            [(i, stored_event_bytes(n)) for n, i in enumerate(ids)])
        try:
            return _concurrently(dsn, args, ids)
        finally:
            conn.execute("DROP TABLE bench_scale_raw")


def _concurrently(dsn: str, args: argparse.Namespace, ids: list[uuid.UUID]) -> dict[str, Any]:
    clients = args.writers + args.readers
    start: list[float] = []
    ready = threading.Barrier(clients, action=lambda: start.append(time.monotonic()))
    payload = stored_event_bytes(0)

    def client(n: int) -> tuple[str, list[float]]:
        latencies: list[float] = []
        writing = n < args.writers
        with psycopg.connect(dsn, autocommit=True) as conn:
            ready.wait()
            while time.monotonic() < start[0] + args.seconds:
                sent = time.perf_counter()
                if writing:
                    conn.execute("INSERT INTO bench_scale_raw (id, state) VALUES (%s, %s)",
                                 (uuid.uuid4(), payload))
                else:
                    conn.execute("SELECT state FROM bench_scale_raw WHERE id = %s",
                                 (random.choice(ids),)).fetchone()
                latencies.append((time.perf_counter() - sent) * 1000)
        return ("insert" if writing else "select"), latencies

    with ThreadPoolExecutor(clients) as pool:
        done = list(pool.map(client, range(clients)))
    elapsed = time.monotonic() - start[0]
    found: dict[str, Any] = {}
    for op in ("insert", "select"):
        latencies = [x for name, values in done if name == op for x in values]
        found[f"postgres_{op}"] = {"per_s": round(len(latencies) / elapsed, 1),
                                   "p50_ms": round(percentile(latencies, 50), 2),
                                   "p99_ms": round(percentile(latencies, 99), 2)}
    return found
