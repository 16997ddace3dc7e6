"""``memledger verify [--repair [--reset-stream]] [--json]``: prove the event store, the
JetStream events stream and every read model agree; exit 0 if they do, 1 if not.

Three checks, each against the event store (the commit, the only source of truth):

- the events stream (``verify_stream``): every position exactly once, in order, byte for byte;
- the PostgreSQL read models (``verify_models``): equal to a scratch rebuild from the log, table
  by table and (tenant, space) by (tenant, space), with the checkpoint's lag apart;
- the vector index (``verify_vectors``): its points as of that position equal to the rows the
  log implies, read in process or through the query service.

Before comparing, verify waits (``--wait``) for the relay and the projector to reach the
committed position, so a running system is not reported for ordinary lag. ``--repair`` then
mends what it honestly can (catch the stream up, rebuild the PostgreSQL model blue/green,
re-drive the vector index when it is held here), says what it cannot, and verifies again.
"""

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
from nats.js import JetStreamContext

from memledger_cli import verify_models, verify_report, verify_stream, verify_vectors
from memledger_cli.embedded import RUNTIME_FILE, attach
from memledger_cli.progress import Bar
from memledger_cli.verify_report import Found, Report
from memledger_platform import bus
from memledger_platform.crypto import Opener
from memledger_platform.eventstore import EventStore
from memledger_platform.eventstore.opened import OpenedEventStore
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.keyring_postgres import keyring_for, with_home_master_key
from memledger_platform.readmodel import schema
from memledger_platform.settings import DEFAULT_HTTP_PORT, Settings
from memledger_platform.stream_cursor import RelayOutOfSync, stream_cursor
from memledger_platform.vectorindex.port import VectorIndex
from memledger_projector.core import rebuild
from memledger_schemas.subjects import Subjects


@dataclass
class Target:
    """What to verify, and where the vector index can be read."""

    store: EventStore
    js: JetStreamContext
    subjects: Subjects
    dsn: str
    names: schema.Names
    replicas: int = 1
    index: VectorIndex | None = None
    """The vector index opened in this process, if it could be."""
    index_label: str = ""
    model: str = ""
    query_url: str | None = None
    """Otherwise: the query service to ask for the vector digests."""
    api_key: str | None = None
    """An admin key for that service (``MEMLEDGER_API_KEY``, else the one ``up`` made)."""
    skip_vectors: str = ""
    opened: EventStore | None = None
    """The log with sealed personal data opened, as the read models were built from it (the
    events stream must equal the raw ``store``, byte for byte)."""

    @property
    def log(self) -> EventStore:
        return self.opened or self.store


async def verify(target: Target, wait_seconds: float = 10.0) -> tuple[Report, Found]:
    committed = await asyncio.to_thread(target.store.max_position)
    deadline = time.monotonic() + wait_seconds
    await _until(deadline, lambda: _relayed_through(target, committed))
    with Bar("verify events stream", committed) as bar:
        stream = await verify_stream.compare_every_partition(
            target.store, target.js, target.subjects, committed, bar.update)
    await _until(deadline, lambda: asyncio.to_thread(_projected_through, target, committed))
    with Bar("verify postgres (rebuild to compare)", committed) as bar:
        models = await asyncio.to_thread(
            verify_models.compare, target.dsn, target.log, target.names, committed,
            bar.update, vectors=not target.skip_vectors, items=target.index is not None)
    vectors = await _vectors(target, models, stream)
    found = Found(stream, models, vectors)
    return verify_report.build(committed, found, target.skip_vectors), found


async def _vectors(target: Target, models: verify_models.ModelComparison,
                   stream: verify_stream.StreamComparison
                   ) -> verify_vectors.VectorComparison | None:
    if target.skip_vectors or models.missing:
        return None
    if target.index is not None:
        return await asyncio.to_thread(verify_vectors.local, target.index, models.items,
                                       models.vectors, models.position, target.index_label)
    tenants = {t for t, _ in models.vectors} | {t for t, _ in stream.in_store.counts}
    assert target.query_url is not None
    return await verify_vectors.remote(target.query_url, tenants, models.vectors,
                                       models.position, wait_ms=2_000,
                                       api_key=target.api_key)


async def _until(deadline: float, reached: Callable[[], Awaitable[bool]]) -> None:
    """Poll ``reached`` until it is true or ``deadline`` passes."""
    while True:
        if await reached() or time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.2)


async def _relayed_through(target: Target, position: int) -> bool:
    try:
        # partitioned: until one partition's relay got there (each publishes its own only)
        return max([(await stream_cursor(target.js, partition)).position for partition
                    in target.subjects.every_partition()]) >= position
    except (RelayOutOfSync, Exception):
        return True  # nothing to wait for: the comparison will say what is wrong


def _projected_through(target: Target, position: int) -> bool:
    try:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            live = target.names.schema(schema.live_version(conn, target.names))
            return verify_models.projected_through(conn, target.names, live) >= position
    except (LookupError, psycopg.Error):
        return True


# --- repair ---------------------------------------------------------------------------------

async def repair(target: Target, found: Found, *, reset_stream: bool) -> list[str]:
    """Mend what can be mended; return what was done (and what could not be)."""
    done = await _repair_stream(target, found.stream, reset_stream)
    if found.models.missing or found.models.differences() or found.models.lag:
        done.append(await asyncio.to_thread(_rebuild, target))
    if found.vectors is not None and found.vectors.differences():
        done.append(await asyncio.to_thread(_redrive, target))
    return done


async def _repair_stream(target: Target, s: verify_stream.StreamComparison,
                         reset_stream: bool) -> list[str]:
    if s.differs and not reset_stream:
        return ["events stream: NOT repaired: it has gaps, repeats, foreign or altered "
                "messages, which cannot be mended in place; stop memledger and run "
                "`memledger verify --repair --reset-stream` (deletes the stream and "
                "republishes every event from position 1)"]
    if s.differs:
        with Bar("reset events stream", s.until) as bar:
            count = await verify_stream.reset(target.store, target.js, target.subjects,
                                              target.replicas, bar.update)
        return [f"events stream: reset, {count} events republished"]
    if s.behind.count:
        try:
            with Bar("catch up events stream", s.until) as bar:
                count = await verify_stream.catch_up(target.store, target.js, target.subjects,
                                                     bar.update)
        except RelayOutOfSync as refused:
            return [f"events stream: NOT caught up: {refused} (an event removed from the "
                    "stream less than its duplicate window, 2 minutes, after it was published "
                    "cannot be published again until then: retry later, or reset)"]
        return [f"events stream: caught up, {count} events published"]
    return []


def _rebuild(target: Target) -> str:
    with psycopg.connect(target.dsn, autocommit=True) as conn, \
            Bar("rebuild postgres", target.store.max_position()) as bar:
        done = rebuild.rebuild(conn, target.log, target.names, bar.update)
    return (f"postgres read model: rebuilt blue/green as version {done.version} (was "
            f"{done.previous}) through position {done.position}")


def _redrive(target: Target) -> str:
    if target.index is None:
        return ("vector index: NOT repaired: it is held by the running query service; stop "
                "memledger and run `memledger verify --repair` to re-drive it from the log")
    with Bar("re-drive vector index", target.store.max_position()) as bar:
        count = verify_vectors.redrive(target.index, target.log, target.model, bar.update)
    return f"vector index: re-driven from the log ({count} memory events folded)"


# --- the command ----------------------------------------------------------------------------

def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    command = commands.add_parser(
        "verify", help="prove the event store, the events stream and every read model agree "
        "(exit 0), or report how they differ (exit 1)")
    command.add_argument("--repair", action="store_true",
                         help="mend what can be mended, then verify again")
    command.add_argument("--reset-stream", action="store_true",
                         help="with --repair: delete the events stream and republish every "
                         "event (what gaps need; run it with memledger stopped)")
    command.add_argument("--json", action="store_true", help="a JSON report on stdout")
    command.add_argument("--wait", type=float, default=10.0, metavar="SECONDS",
                         help="how long to wait for the relay and projector to catch up "
                         "(default 10)")
    command.add_argument("--query-url", help="the query service, to read the vector index "
                         "through while it holds it (default: this machine's HTTP port)")
    command.add_argument("--skip-vectors", action="store_true",
                         help="leave the vector index out")
    command.set_defaults(handler=run_verify)


def run_verify(args: argparse.Namespace, settings: Settings) -> int:
    running = up_is_running(settings)
    if args.reset_stream and (not args.repair or running):
        print("memledger: --reset-stream needs --repair, and memledger stopped (its relay and "
              "consumers must not run while the stream is replaced)", file=sys.stderr)
        return 2
    with attach(settings) as endpoints:
        return asyncio.run(_run(args, settings, endpoints.postgres_dsn, endpoints.nats_url,
                                running))


async def _run(args: argparse.Namespace, settings: Settings, dsn: str, nats_url: str,
               running: bool) -> int:
    async with _target(args, settings, dsn, nats_url, running) as target:
        report, found = await verify(target, args.wait)
        before = None
        if args.repair and not report.ok:
            repairs = await repair(target, found, reset_stream=args.reset_stream)
            before, (report, _) = report, await verify(target, args.wait)
            report.repairs = repairs
    return verify_report.emit(report, before, args.json)


@asynccontextmanager
async def _target(args: argparse.Namespace, settings: Settings, dsn: str, nats_url: str,
                  running: bool) -> AsyncIterator[Target]:
    event_store = PostgresEventStore(datastore_from_dsn(dsn, schema=settings.postgres_schema,
                                                        pool_size=2))
    nc = await bus.connect(nats_url, "memledger-verify")
    target = Target(event_store, nc.jetstream(), settings.subjects, dsn,
                    schema.Names(settings.postgres_schema, settings.event_partitions),
                    settings.nats_stream_replicas)
    keyring, keyring_pool = keyring_for(with_home_master_key(settings), dsn)
    target.opened = OpenedEventStore(event_store, Opener(keyring))
    try:
        if args.skip_vectors:
            target.skip_vectors = "--skip-vectors"
        elif settings.qdrant_url or (settings.mode == "embedded" and not running):
            _open_index(target, settings)
        else:
            from memledger_query.bootstrap import QUERY_PORT

            port = settings.http_port or (DEFAULT_HTTP_PORT if settings.mode == "embedded"
                                          else QUERY_PORT)
            target.query_url = args.query_url or f"http://{settings.http_host}:{port}"
            target.api_key = os.environ.get("MEMLEDGER_API_KEY") or _home_key(settings)
        yield target
    finally:
        if target.index is not None:
            target.index.close()
        await nc.close()
        event_store.close()
        if keyring_pool is not None:
            keyring_pool.close()


def _open_index(target: Target, settings: Settings) -> None:
    from memledger_platform.embedding import factory as embedders
    from memledger_platform.vectorindex.factory import index_path, open_index

    try:
        embedder = embedders.from_settings(settings)
        target.index = open_index(settings, embedder.model_id, embedder.dims)
    except Exception as error:
        target.skip_vectors = f"the vector index could not be opened here ({error!r})"
        return
    target.model = embedder.model_id
    target.index_label = (f"Qdrant at {settings.qdrant_url}" if settings.qdrant_url else
                          f"index {index_path(settings, embedder.model_id)}")


def up_is_running(settings: Settings) -> bool:
    """Whether a ``memledger up`` holds this data directory (and so its vector index)."""
    runtime = Path(settings.home).expanduser().resolve() / RUNTIME_FILE
    try:
        pid = int(json.loads(runtime.read_text()).get("pid", 0))
    except (OSError, ValueError, AttributeError):
        return False
    return settings.mode == "embedded" and pid > 0 and psutil.pid_exists(pid)


def _home_key(settings: Settings) -> str | None:
    path = settings.home.expanduser() / "admin.key"
    return path.read_text().strip() if path.exists() else None
