"""Operator commands: ``memledger replay`` (export events as NDJSON) and ``memledger rebuild``."""

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import IO, Any

import psycopg

from memledger_cli import verify
from memledger_cli.embedded import attach
from memledger_cli.progress import Bar
from memledger_platform.crypto import Opener
from memledger_platform.eventstore import EventStore, RecordedEvent
from memledger_platform.eventstore.opened import OpenedEventStore
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.keyring_postgres import keyring_for, with_home_master_key
from memledger_platform.readmodel import schema
from memledger_platform.settings import Settings
from memledger_projector.core import rebuild as blue_green

_BATCH = 5_000


def add_parsers(commands: Any) -> None:
    replay = commands.add_parser("replay", help="export events as NDJSON, in position order")
    replay.add_argument("--from-position", type=int, default=1, help="first position (incl.)")
    replay.add_argument("--to-position", type=int, help="last position (inclusive)")
    replay.add_argument("--since", type=_instant, help="recorded strictly after (ISO 8601)")
    replay.add_argument("--until", type=_instant, help="recorded at or before (ISO 8601)")
    replay.add_argument("--tenant", help="only this tenant")
    replay.add_argument("--space", help="only this space")
    replay.add_argument("--type", action="append", dest="types", help="event type (repeat)")
    replay.add_argument("--output", "-o", help="file to write (default: standard output)")
    replay.set_defaults(handler=run_replay)
    rebuild = commands.add_parser("rebuild", help="rebuild a projection (blue/green)")
    rebuild.add_argument("projection", choices=["postgres"], help="which read models")
    rebuild.set_defaults(handler=run_rebuild)
    verify.add_parser(commands)


def run_replay(args: argparse.Namespace, settings: Settings) -> int:
    with attach(settings) as endpoints, _store(endpoints.postgres_dsn, settings) as store, \
            _output(args.output) as out:
        last = args.to_position or store.max_position()
        written = 0
        with Bar("replay", last) as bar:
            for event in _events(store, args.from_position - 1, last):
                if _wanted(event, args):
                    out.write(event.document() + b"\n")
                    written += 1
                bar.update(event.position, last)
    print(json.dumps({"exported": written, "through_position": last}), file=sys.stderr)
    return 0


def run_rebuild(args: argparse.Namespace, settings: Settings) -> int:
    with attach(settings) as endpoints, _store(endpoints.postgres_dsn, settings) as store, \
            psycopg.connect(endpoints.postgres_dsn, autocommit=True) as conn:
        target = store.max_position()
        with Bar("rebuild postgres", target) as bar:
            try:
                done = blue_green.rebuild(conn, store, _names(settings),
                                          bar.update)
            except blue_green.RebuildStopped as stopped:
                print(f"memledger: {stopped}", file=sys.stderr)
                return 1
    print(json.dumps({"projection": args.projection, "version": done.version,
                      "previous_version": done.previous, "position": done.position,
                      "events": done.events}))
    return 0


def _events(store: EventStore, after: int, last: int) -> Iterator[RecordedEvent]:
    while after < last:
        batch = store.read_all(after, _BATCH)
        if not batch:
            return
        for event in batch:
            if event.position > last:
                return
            yield event
        after = batch[-1].position


def _wanted(event: RecordedEvent, args: argparse.Namespace) -> bool:
    if args.since and event.recorded_at <= args.since:
        return False
    if args.until and event.recorded_at > args.until:
        return False
    if args.types and event.event_type not in args.types:
        return False
    if args.tenant or args.space:
        fields = event.fields()
        return (args.tenant in (None, fields["tenant_id"])
                and args.space in (None, fields["space_id"]))
    return True


@contextmanager
def _store(dsn: str, settings: Settings) -> Iterator[EventStore]:
    """The event store, read through the subjects' keys (sealed personal data opened, or its
    placeholders once erased)."""
    store = PostgresEventStore(datastore_from_dsn(dsn, schema=settings.postgres_schema,
                                                  pool_size=1))
    keyring, pool = keyring_for(with_home_master_key(settings), dsn)
    try:
        yield OpenedEventStore(store, Opener(keyring))
    finally:
        store.close()
        if pool is not None:
            pool.close()


@contextmanager
def _output(path: str | None) -> Iterator[IO[bytes]]:
    if path is None:
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    with open(path, "wb") as handle:
        yield handle


def _instant(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} needs a timezone offset, e.g. ...Z")
    return value


def _names(settings: Settings) -> schema.Names:
    """The read models, with a checkpoint per partition of the events."""
    return schema.Names(settings.postgres_schema, settings.event_partitions)
