"""``memledger status``: how far behind each stage of the pipeline is, read from the engines.

- **relay lag**: positions committed in the event store but not yet in the events stream (the
  position in the stream's last message, as the relay itself resumes from it);
- **projection lag**: the PostgreSQL read model's checkpoint (committed with its rows) and the
  vector index's position (the event at its consumer's ack floor: every event up to it is in
  the index), each against the committed position;
- **consumers**: every durable on the events and intake streams, with its pending and
  unacknowledged counts and, on the events stream, the position it has acknowledged up to;
- **dead letters**: messages in the dead-letter stream, per subject (source and tenant).

It reads only (as the NATS user ``operator``); it attaches to a running ``memledger up``
(``$MEMLEDGER_HOME/runtime.json``, and the passwords beside the engines' data) or,
in distributed mode, to ``MEMLEDGER_POSTGRES_DSN`` and ``MEMLEDGER_NATS_URL``. It never starts
engines: a status of engines it started itself would say nothing.
"""

import argparse
import asyncio
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import nats
import psycopg
from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo
from nats.js.errors import NotFoundError
from psycopg import sql

from memledger_cli.embedded import RUNTIME_FILE, running
from memledger_platform import bus
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import EVENTS_TABLE
from memledger_platform.nats_permissions import OPERATOR
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_platform.settings import Settings
from memledger_platform.stream_cursor import stream_cursor
from memledger_schemas.subjects import HDR_POSITION, Subjects
from memledger_vectors.consumer import DURABLE as VECTORS_DURABLE

_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Relay:
    stream: str
    relayed_position: int
    stream_sequence: int
    lag: int | None


@dataclass(frozen=True)
class Projection:
    name: str
    """``postgres`` or ``vectors``."""
    source: str
    """Where its position was read: the read-model schema, or the index's consumer."""
    position: int | None
    lag: int | None


@dataclass(frozen=True)
class Consumer:
    stream: str
    name: str
    pending: int
    """Messages not yet delivered to it."""
    ack_pending: int
    """Delivered, not yet acknowledged."""
    redelivered: int
    waiting: int
    """Pull requests waiting: more than zero means a process is fetching right now."""
    acked_sequence: int
    acked_position: int | None
    """Events stream only: the position of the event at the ack floor."""
    lag: int | None


@dataclass(frozen=True)
class DeadLetters:
    stream: str
    total: int
    by_subject: dict[str, int]


@dataclass
class Status:
    mode: str
    postgres: str
    nats: str
    committed_position: int | None = None
    relay: Relay | None = None
    projections: list[Projection] = field(default_factory=list)
    consumers: list[Consumer] = field(default_factory=list)
    dead_letters: DeadLetters | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def caught_up(self) -> bool:
        """Nothing unreached, unprojected or unacknowledged, and every figure was read."""
        lags = [self.relay.lag if self.relay else None] + [p.lag for p in self.projections]
        busy = any(c.pending or c.ack_pending for c in self.consumers)
        return not self.errors and all(lag == 0 for lag in lags) and not busy

    def document(self) -> dict[str, Any]:
        return {**asdict(self), "caught_up": self.caught_up}


def add_parser(commands: Any) -> None:
    status = commands.add_parser(
        "status", help="relay lag, projection lag, consumer pending counts, dead letters")
    status.add_argument("--json", action="store_true", dest="as_json",
                        help="print one JSON object (else a table on a terminal, plain lines "
                        "otherwise)")
    status.set_defaults(handler=run_status)


def run_status(args: argparse.Namespace, settings: Settings) -> int:
    """Print the status; exit 1 if an engine could not be reached (what was read is shown)."""
    endpoints = locate(settings)
    if endpoints is None:
        home = settings.home.expanduser().resolve()
        print(f"memledger: no running `memledger up` found for {home} (no live "
              f"{RUNTIME_FILE}); start it, set MEMLEDGER_HOME to its data directory, or use "
              "MEMLEDGER_MODE=distributed with MEMLEDGER_POSTGRES_DSN and MEMLEDGER_NATS_URL",
              file=sys.stderr)
        return 1
    status = collect(settings, endpoints)
    from memledger_cli import status_view

    if args.as_json:
        print(json.dumps(status.document(), default=str))
    elif sys.stdout.isatty():
        status_view.print_tables(status)
    else:
        status_view.print_lines(status)
    return 1 if status.errors else 0


def locate(settings: Settings) -> Endpoints | None:
    """The engines to read: from settings (distributed), or those of a running ``up``."""
    if settings.mode == "distributed":
        return Endpoints(settings.postgres_dsn or "", settings.nats_url or "")
    found = running(settings)
    return None if found is None else found.endpoints(OPERATOR)


def collect(settings: Settings, endpoints: Endpoints) -> Status:
    """Every figure that can be read; what cannot is named in ``errors``."""
    status = Status(settings.mode, redact(endpoints.postgres_dsn), redact(endpoints.nats_url))
    try:
        status.committed_position, postgres = _read_postgres(endpoints.postgres_dsn,
                                                             settings.postgres_schema)
        status.projections.append(postgres)
    except (psycopg.Error, LookupError) as error:
        status.errors.append(f"postgres: {error}".strip())
    try:
        asyncio.run(_read_nats(endpoints.nats_url, settings.subjects, status))
    except Exception as error:  # unreachable, timed out, refused: report, do not crash
        status.errors.append(f"nats: {type(error).__name__}: {error}".rstrip(": "))
    return status


def redact(url: str) -> str:
    """``url`` without its password."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def _lag(committed: int | None, position: int | None) -> int | None:
    if committed is None or position is None:
        return None
    return max(0, committed - position)


# --- PostgreSQL: the committed position and the read model's checkpoint ---------------------

def _read_postgres(dsn: str, base: str) -> tuple[int, Projection]:
    names = schema.Names(base)
    with psycopg.connect(dsn, autocommit=True, connect_timeout=int(_TIMEOUT_SECONDS)) as conn:
        committed = _committed(conn, base)
        version = schema.live_version(conn, names)
        checkpoint = read_checkpoint(conn, names.schema(version))
    source = names.schema(version)
    return committed, Projection("postgres", source, checkpoint.position,
                                 _lag(committed, checkpoint.position))


def _committed(conn: psycopg.Connection[Any], base: str) -> int:
    row = conn.execute(sql.SQL("SELECT max(notification_id) FROM {}.{}").format(
        sql.Identifier(base), sql.Identifier(EVENTS_TABLE))).fetchone()
    return int(row[0] or 0) if row else 0


# --- NATS: the relayed position, consumers and dead letters ---------------------------------

async def _read_nats(url: str, subjects: Subjects, status: Status) -> None:
    # Two tries, then give up (0 would mean "forever" to nats-py); failures are reported once,
    # by the caller, not logged on every try.
    nc = await asyncio.wait_for(nats.connect(
        bus.servers(url), name="memledger-status", connect_timeout=_TIMEOUT_SECONDS,
        allow_reconnect=False, max_reconnect_attempts=1, reconnect_time_wait=0.5, error_cb=_quiet),
        2 * _TIMEOUT_SECONDS + 1)
    try:
        js = nc.jetstream(timeout=_TIMEOUT_SECONDS)
        cursor = await stream_cursor(js, subjects)
        status.relay = Relay(subjects.events_stream, cursor.position, cursor.sequence,
                             _lag(status.committed_position, cursor.position))
        positions = _Positions(js, subjects.events_stream)
        for stream in (subjects.events_stream, subjects.intake_stream):
            for info in sorted(await js.consumers_info(stream), key=lambda i: i.name):
                status.consumers.append(await _consumer(info, positions, status))
        status.projections.extend(_vector_projections(status.consumers))
        status.dead_letters = await _dead_letters(js, subjects.dead_letter_stream)
    finally:
        await nc.close()


async def _quiet(error: Exception) -> None:
    return None


class _Positions:
    """Event-store positions of events-stream messages, read from their headers."""

    def __init__(self, js: JetStreamContext, stream: str) -> None:
        self._js = js
        self.stream = stream
        self._known: dict[int, int | None] = {0: 0}

    async def at(self, sequence: int) -> int | None:
        if sequence not in self._known:
            try:
                msg = await self._js.get_msg(self.stream, seq=sequence)
                value = (msg.headers or {}).get(HDR_POSITION)
                self._known[sequence] = int(value) if value is not None else None
            except NotFoundError:  # removed by the stream's limits
                self._known[sequence] = None
        return self._known[sequence]


async def _consumer(info: ConsumerInfo, positions: _Positions, status: Status) -> Consumer:
    acked = info.ack_floor.stream_seq if info.ack_floor else 0
    pending, unacked = info.num_pending or 0, info.num_ack_pending or 0
    position = None
    if info.stream_name == positions.stream:
        # A consumer with nothing pending or unacknowledged has taken in the whole stream;
        # its ack floor stays at the last message its filter matched, which may be older.
        idle = not pending and not unacked and status.relay is not None
        position = status.relay.relayed_position if idle and status.relay else \
            await positions.at(acked)
    return Consumer(info.stream_name, info.name, pending, unacked, info.num_redelivered or 0,
                    info.num_waiting or 0, acked, position,
                    _lag(status.committed_position, position))


def _vector_projections(consumers: list[Consumer]) -> list[Projection]:
    """One per vector-index consumer (one per embedding model)."""
    return [Projection("vectors", c.name, c.acked_position, c.lag) for c in consumers
            if c.name.startswith(VECTORS_DURABLE)]


async def _dead_letters(js: JetStreamContext, stream: str) -> DeadLetters:
    info = await js.stream_info(stream, subjects_filter=">")
    return DeadLetters(stream, info.state.messages, dict(sorted(
        (info.state.subjects or {}).items())))
