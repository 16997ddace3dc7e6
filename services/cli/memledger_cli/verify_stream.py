"""``memledger verify``: the JetStream events stream against the event store, and its repair.

Both are read in position order, a chunk at a time, and merged: every committed position must
be in the stream exactly once, in order, as the very document the store holds (SHA-256 of the
stored document against the message data) under its subject and ``Nats-Msg-Id``. Memory stays
bounded: per (tenant, space) counters and the first few examples of each kind of difference.

Repair is honest about what the relay's chain guard allows: a stream that is only *behind*
(a tail not yet published) is caught up by the relay's own publish path; a stream with gaps,
repeats, foreign or altered messages cannot be mended in place, so it needs a reset (the stream
deleted and recreated, every event republished from position 1), done only when asked.
"""

import asyncio
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError, ServiceUnavailableError

from memledger_platform import bus
from memledger_platform.eventstore import EventStore, RecordedEvent
from memledger_relay.relay import Relay
from memledger_schemas.subjects import HDR_MSG_ID, HDR_POSITION, Subjects

Progress = Callable[[int, int], None]
EXAMPLES = 10
_CHUNK = 5_000
_FETCH = 500
UNAVAILABLE_RETRIES = 60
"""How many pulls answered "no responders" are made again (``UNAVAILABLE_PAUSE_SECONDS``
apart): in a JetStream cluster a new consumer answers so until its leader is elected (seconds
after a node came back, longer on a busy machine)."""
UNAVAILABLE_PAUSE_SECONDS = 0.5


@dataclass
class Examples:
    """How many of one kind of difference, and the first few."""

    count: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.count += 1
        if len(self.first) < EXAMPLES:
            self.first.append(text)


@dataclass
class Ranges:
    """Positions as runs of neighbours in store order: [first, last, how many]."""

    count: int = 0
    runs: list[list[int]] = field(default_factory=list)
    _open: bool = False

    def add(self, position: int) -> None:
        self.count += 1
        if self._open and self.runs:
            self.runs[-1][1:] = [position, self.runs[-1][2] + 1]
        elif len(self.runs) < EXAMPLES:
            self.runs.append([position, position, 1])
        self._open = True

    def skip(self) -> None:
        self._open = False


@dataclass
class Tally:
    """Counts per (tenant, space) and the range of positions seen."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    first: int | None = None
    last: int | None = None

    def add(self, tenant: str, space: str, position: int) -> None:
        self.counts[(tenant, space)] += 1
        self.first = position if self.first is None else min(self.first, position)
        self.last = position if self.last is None else max(self.last, position)


@dataclass
class StreamComparison:
    stream: str
    until: int
    """The committed position compared through."""
    in_store: Tally = field(default_factory=Tally)
    in_stream: Tally = field(default_factory=Tally)
    relayed: int = 0
    """The highest position in the stream (beyond ``until`` too)."""
    gaps: Ranges = field(default_factory=Ranges)
    behind: Ranges = field(default_factory=Ranges)
    extra: Examples = field(default_factory=Examples)
    repeated: Examples = field(default_factory=Examples)
    foreign: Examples = field(default_factory=Examples)
    altered: Examples = field(default_factory=Examples)
    digest: str = ""
    """SHA-256 over the documents compared, in position order."""

    @property
    def differs(self) -> bool:
        """Something only a reset can mend."""
        return any(k.count for k in (self.gaps, self.extra, self.repeated, self.foreign,
                                     self.altered))


async def compare_every_partition(store: EventStore, js: JetStreamContext, subjects: Subjects,
                                  until: int, progress: Progress | None = None
                                  ) -> StreamComparison:
    """``compare`` for each partition's stream (one: the events stream), merged: the
    partitions together must hold every committed position once (docs/adr/0016)."""
    found = [await compare(store, js, partition, until, progress)
             for partition in subjects.every_partition()]
    return found[0] if len(found) == 1 else _merged(found, until)


def _merged(found: list[StreamComparison], until: int) -> StreamComparison:
    merged = StreamComparison(", ".join(f.stream for f in found), until,
                              relayed=max(f.relayed for f in found))
    digest = hashlib.sha256()  # over each partition's digest, in partition order
    for part in found:
        for mine, theirs in ((merged.in_store, part.in_store),
                             (merged.in_stream, part.in_stream)):
            mine.counts.update(theirs.counts)
            mine.first = min(p for p in (mine.first, theirs.first) if p is not None) \
                if theirs.first is not None else mine.first
            mine.last = max(p for p in (mine.last, theirs.last) if p is not None) \
                if theirs.last is not None else mine.last
        for ranges in ("gaps", "behind"):
            into, of = getattr(merged, ranges), getattr(part, ranges)
            into.count += of.count
            into.runs.extend(of.runs[:EXAMPLES - len(into.runs)])
        for kind in ("extra", "repeated", "foreign", "altered"):
            into, of = getattr(merged, kind), getattr(part, kind)
            into.count += of.count
            into.first.extend(of.first[:EXAMPLES - len(into.first)])
        digest.update(bytes.fromhex(part.digest))
    merged.digest = digest.hexdigest()
    return merged


async def compare(store: EventStore, js: JetStreamContext, subjects: Subjects, until: int,
                  progress: Progress | None = None) -> StreamComparison:
    """Merge the store (through ``until``; one partition's events, if partitioned) with the
    stream, in position order."""
    result = StreamComparison(subjects.events_stream, until)
    events = _Cursor(store, until, subjects.partition if subjects.partitioned else None)
    await events.fill()
    digest, last = hashlib.sha256(), 0
    async for msg in _messages(js, subjects):
        position = _position(msg)
        if position is None:
            result.foreign.add(f"sequence {_seq(msg)} on {msg.subject} has no {HDR_POSITION}")
            continue
        result.relayed = max(result.relayed, position)
        if position > until:
            continue
        tenant, space = _scope(msg.subject, subjects)
        result.in_stream.add(tenant, space, position)
        if position <= last:
            word = "again" if position == last else "out of order, after position " + str(last)
            result.repeated.add(f"position {position} at sequence {_seq(msg)} {word}")
            continue
        last = position
        while (event := await events.peek()) is not None and event.position < position:
            _count(result, event)
            result.gaps.add(event.position)
            events.pop()
        result.gaps.skip()
        event = await events.peek()
        if event is not None and event.position == position:
            _count(result, event)
            _compare_one(result, event, msg, subjects, digest)
            events.pop()
        else:
            result.extra.add(f"position {position} (sequence {_seq(msg)}) is not in the store")
        if progress is not None:
            progress(position, until)
    while (event := await events.peek()) is not None:
        _count(result, event)
        (result.behind if event.position > result.relayed else result.gaps).add(event.position)
        events.pop()
    ends = await asyncio.to_thread(store.max_position)
    if result.relayed > ends:  # read again: later commits may have been relayed meanwhile
        result.extra.add(f"the stream holds positions up to {result.relayed}; the store "
                         f"ends at {ends}")
    result.digest = digest.hexdigest()
    return result


def _compare_one(result: StreamComparison, event: RecordedEvent, msg: Msg,
                 subjects: Subjects, digest: "hashlib._Hash") -> None:
    document = event.document()
    stored, published = hashlib.sha256(document), hashlib.sha256(msg.data or b"")
    digest.update(stored.digest())
    fields = event.fields()
    expected = subjects.event(fields["tenant_id"], fields["space_id"], event.event_type)
    problems = []
    if stored.digest() != published.digest():
        problems.append(f"data sha256 {published.hexdigest()[:12]} != stored "
                        f"{stored.hexdigest()[:12]}")
    if (msg.headers or {}).get(HDR_MSG_ID) != str(fields["event_id"]):
        problems.append(f"{HDR_MSG_ID} is not event {fields['event_id']}")
    if msg.subject != expected:
        problems.append(f"subject {msg.subject} != {expected}")
    if problems:
        result.altered.add(f"position {event.position}: " + "; ".join(problems))


def _count(result: StreamComparison, event: RecordedEvent) -> None:
    fields = event.fields()
    result.in_store.add(fields["tenant_id"], fields["space_id"], event.position)


class _Cursor:
    """The store's events through ``until`` (of ``partition`` only, if given), read a chunk at
    a time off the event loop."""

    def __init__(self, store: EventStore, until: int, partition: int | None = None) -> None:
        self._store, self._until, self._partition = store, until, partition
        self._chunk: list[RecordedEvent] = []
        self._at, self._after, self._done = 0, 0, until == 0

    async def fill(self) -> None:
        if self._at < len(self._chunk) or self._done:
            return
        chunk = await asyncio.to_thread(self._read)
        self._chunk = [e for e in chunk if e.position <= self._until]
        self._at = 0
        self._done = len(self._chunk) < len(chunk) or len(chunk) < _CHUNK
        if self._chunk:
            self._after = self._chunk[-1].position

    def _read(self) -> list[RecordedEvent]:
        if self._partition is None:
            return self._store.read_all(self._after, _CHUNK)
        return self._store.read_partition(self._partition, self._after, _CHUNK)

    async def peek(self) -> RecordedEvent | None:
        await self.fill()
        return self._chunk[self._at] if self._at < len(self._chunk) else None

    def pop(self) -> None:
        self._at += 1


async def _messages(js: JetStreamContext, subjects: Subjects) -> AsyncIterator[Msg]:
    """Every message now in the events stream, in sequence order (an ephemeral consumer)."""
    try:
        info = await js.stream_info(subjects.events_stream)
    except NotFoundError:
        return
    last, left = info.state.last_seq, info.state.messages
    if left == 0:
        return
    sub = await js.pull_subscribe(subjects.all_events, stream=subjects.events_stream,
                                  config=ConsumerConfig(ack_policy=AckPolicy.NONE,
                                                        deliver_policy=DeliverPolicy.ALL,
                                                        inactive_threshold=30.0))
    try:
        unavailable = 0
        while left > 0:
            try:
                msgs = await sub.fetch(min(_FETCH, left), timeout=5.0)
            except TimeoutError:
                return
            except ServiceUnavailableError:
                unavailable += 1
                if unavailable > UNAVAILABLE_RETRIES:
                    raise
                await asyncio.sleep(UNAVAILABLE_PAUSE_SECONDS)
                continue
            for msg in msgs:
                yield msg
                left -= 1
                if _seq(msg) >= last or msg.metadata.num_pending == 0:
                    return
    finally:
        await sub.unsubscribe()


def _position(msg: Msg) -> int | None:
    value = (msg.headers or {}).get(HDR_POSITION)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _seq(msg: Msg) -> int:
    return int(msg.metadata.sequence.stream)


def _scope(subject: str, subjects: Subjects) -> tuple[str, str]:
    parts = subject[len(subjects.prefix) + 1:].split(".")
    return (parts[1], parts[2]) if len(parts) > 3 else ("?", "?")


# --- repair -----------------------------------------------------------------------------------

async def catch_up(store: EventStore, js: JetStreamContext, subjects: Subjects,
                   progress: Progress | None = None) -> int:
    """Publish what each partition's stream (one: the stream) lacks after its last message,
    as the relay does; return how many. Raises ``RelayOutOfSync`` if a stream's last message
    is not the relay's."""
    total = 0
    for partition in subjects.every_partition():
        total += await _catch_up(store, js, partition, progress)
    return total


async def _catch_up(store: EventStore, js: JetStreamContext, subjects: Subjects,
                    progress: Progress | None) -> int:
    relay = Relay(store, js, subjects)
    relay.cursor = await relay.resume()
    total, end = 0, await asyncio.to_thread(store.max_position)
    while moved := await relay.relay_once():
        total += moved
        if progress is not None:
            progress(relay.cursor.position, max(end, relay.cursor.position))
    return total


async def reset(store: EventStore, js: JetStreamContext, subjects: Subjects, replicas: int,
                progress: Progress | None = None) -> int:
    """Delete and recreate the events stream (each partition's), then republish every event
    from position 1.

    Deleting (rather than purging) clears the stream's duplicate window, which would otherwise
    drop a republished event id for two minutes, and restarts its sequence, so a relay still
    running with an old cursor is refused and resyncs instead of publishing first. The
    stream's consumers go with it: run this with memledger stopped; on their next start the
    projectors and the enricher read the log again (harmlessly: by position, rollback and
    idempotency keys)."""
    for partition in subjects.every_partition():
        await js.delete_stream(partition.events_stream)
    await bus.ensure_streams(js, subjects, replicas)
    return await catch_up(store, js, subjects, progress)


def per_scope(comparison: StreamComparison) -> Iterator[dict[str, Any]]:
    """(tenant, space) rows with the store's and the stream's counts."""
    scopes = sorted(set(comparison.in_store.counts) | set(comparison.in_stream.counts))
    for tenant, space in scopes:
        yield {"tenant": tenant, "space": space,
               "store": comparison.in_store.counts[(tenant, space)],
               "stream": comparison.in_stream.counts[(tenant, space)]}
