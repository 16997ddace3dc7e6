"""Group commit: one writer thread turns concurrent submissions into shared transactions.

A *submission* is one command, or an atomic batch of commands, from one tenant. The writer
takes every submission queued while the previous transaction was in flight, decides them in
order against the current stream states (each submission sees the effects of those before it),
and commits all accepted events in one ``EventStore.append``. If another writer took a stream
version or idempotency key meanwhile, the cached states are dropped and each submission of the
group is retried on its own, so only a real conflict is refused.

A group is bounded by commands and by bytes (a submission larger than the byte bound commits
alone: it is atomic). Each commit attempt has a deadline (``commit_watch``): one past it fails
its callers with a retryable error, and the writer goes on with the next group.
"""

import asyncio
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import orjson
from opentelemetry.trace import SpanKind

from memledger_ingest.core.commit_watch import CommitTimedOut, CommitWatch, WriterStopping
from memledger_ingest.core.results import (
    CommandResult,
    Rejected,
    command_name,
    encoded,
    key_record,
    replayed,
    request_hash,
)
from memledger_ingest.core.sealing import stored_key, subjects_of
from memledger_ingest.core.state_cache import StateCache, fold_state
from memledger_ingest.domain.decide import Context, Decision, decide, reads_of, target_of
from memledger_ingest.domain.errors import Conflict, DomainError, Invalid
from memledger_ingest.domain.streams import STATEFUL, StreamRef, StreamState, evolve
from memledger_ingest.domain.targets import IndexModel
from memledger_platform import telemetry
from memledger_platform.crypto import (
    PERSONAL,
    CipherMemo,
    Keyring,
    SourceErased,
    SubjectKey,
    combined,
    seal_payload,
)

__all__ = ["CommandResult", "CommitTimedOut", "GroupCommitWriter", "Rejected", "WriterStopping"]
from memledger_platform.clock import Clock, SystemClock
from memledger_platform.eventstore import (
    EventStore,
    IdempotencyKeyTaken,
    IdempotencyRecord,
    Interrupted,
    NewEvent,
    StreamConflict,
)
from memledger_platform.eventstore.port import IdempotentResult
from memledger_platform.ids import uuid7
from memledger_schemas.commands import CommandBase, EraseSubject

log = logging.getLogger(__name__)
_tracer = telemetry.tracer(__name__)
_jitter = random.Random()  # noqa: S311  (retry spacing, not security)

_RETRIES = 25
"""Attempts for a submission that keeps losing races to other writers on the same stream."""

KeySet = frozenset[tuple[str, str, str]]
"""(tenant, subject, space) of subject keys."""
_AHEAD_SECONDS = 0.05
"""How soon after a commit the next group must start to use the keys looked up during it (a
group after a quiet spell looks its keys up itself, not with ones that old)."""


@dataclass
class _Unit:
    tenant: str
    commands: tuple[CommandBase, ...]
    contexts: tuple[Context, ...]
    traceparent: str | None
    done: Callable[[list[CommandResult] | BaseException], None]
    json: tuple[bytes, ...]
    """Each command's JSON: its request hash, and its size."""
    size: int
    """The commands' JSON size in bytes: about what the unit adds to a group's commit."""


@dataclass(frozen=True)
class WriterLimits:
    """How much one group may hold, and how long its commit may take."""

    max_group_events: int = 4_000
    max_group_bytes: int = 8 * 1024 * 1024
    commit_timeout_seconds: float = 20.0


@dataclass(frozen=True)
class WriterTuning:
    """How groups form and what the writer keeps between them: a group of fewer than
    ``linger_below`` units waits up to ``linger_seconds`` for more; ``cache_size`` streams'
    states are kept; a command may name a valid time up to ``clock_skew_seconds`` ahead of
    the clock."""

    linger_seconds: float = 0.002
    linger_below: int = 16
    cache_size: int = 200_000
    clock_skew_seconds: float = 300.0


@dataclass
class _Plan:
    """A unit's outcome within a group before the commit."""

    unit: _Unit
    events: list[NewEvent]
    keys: list[IdempotencyRecord]
    slices: list[tuple[int, int, Decision | None]]
    states: dict[UUID, StreamState]
    replayed: list[CommandResult | None] = field(default_factory=list)
    claims: dict[tuple[str, str], str] = field(default_factory=dict)


class GroupCommitWriter:
    """The single writer of one ingest process. ``submit`` is called from the event loop."""

    def __init__(self, store: EventStore, *, limits: WriterLimits = WriterLimits(),
                 tuning: WriterTuning = WriterTuning(),
                 on_commit: Callable[[int], None] | None = None,
                 new_id: Callable[[], UUID] = uuid7, clock: Clock | None = None,
                 keyring: Keyring | None = None, index: IndexModel | None = None) -> None:
        """``index``: the embedding model of the server's vector index, which an imported
        embedding must be of (``None``: not checked)."""
        self._store = store
        self._index = index
        self._limits = limits
        self._watch = CommitWatch(limits.commit_timeout_seconds, store.interrupt)
        self._stopping = False
        self._skew = timedelta(seconds=tuning.clock_skew_seconds)
        self._keyring = keyring
        self._group_keys: dict[tuple[str, str, str], SubjectKey] = {}
        self._ciphers = CipherMemo()
        self._ahead: tuple[KeySet, Future[dict[tuple[str, str, str], SubjectKey]]] | None = None
        self._lookups: ThreadPoolExecutor | None = None
        self._ahead_until = 0.0
        self._live_sources: set[str] = set()
        self._absent: set[UUID] = set()
        self._stored_keys: dict[tuple[str, str], str] = {}
        self._clock = clock or SystemClock()
        self._linger = tuning.linger_seconds
        self._linger_below = tuning.linger_below
        self._cache = StateCache(tuning.cache_size)
        self._on_commit = on_commit
        self._new_id = new_id
        self._queue: queue.SimpleQueue[_Unit | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._watch.start()
        if self._keyring is not None:
            self._lookups = ThreadPoolExecutor(1, "memledger-writer-keys")
        self._thread = threading.Thread(target=self._run, name="memledger-writer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Finish what is queued, then stop; with ``timeout``, give up (``abandon``) on what
        is not committed by then, and return even if a commit never does."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.abandon()
                self._thread.join(timeout)
            self._thread = None
            self._watch.stop()
            if self._lookups is not None:
                self._lookups.shutdown(wait=False, cancel_futures=True)
                self._lookups = None

    def abandon(self) -> None:
        """Fail every submission not committed yet with ``WriterStopping`` (the commit in
        flight too: the store is interrupted), and every later one: for a stop that cannot
        wait any longer. Thread-safe; returns at once."""
        self._stopping = True
        self._watch.stopping()
        stopped = False
        while True:
            try:
                unit = self._queue.get_nowait()
            except queue.Empty:
                break
            stopped = stopped or unit is None
            if unit is not None:
                unit.done(_stopping())
        if stopped:
            self._queue.put(None)

    def state(self) -> dict[str, Any]:
        """For health: ``stuck`` while a commit has been in flight past its deadline."""
        stuck = self._watch.stuck_seconds()
        return {"status": "ok" if stuck is None else "stuck",
                "commit_in_flight_seconds": None if stuck is None else round(stuck, 1),
                "commit_timeout_seconds": self._watch.timeout_seconds,
                "commits_timed_out": self._watch.timed_out, "queued": self._queue.qsize()}

    async def submit(self, tenant: str, commands: Sequence[CommandBase], *,
                     actor: str = "api", traceparent: str | None = None) -> list[CommandResult]:
        """Decide and commit ``commands`` atomically; raise ``Rejected`` if one is refused.

        ``actor`` is recorded on every event: who sent them, as the entrypoint authenticated
        it (a command's own ``actor`` field is the entrypoint's to read, never the writer's)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[CommandResult]] = loop.create_future()

        def done(outcome: list[CommandResult] | BaseException) -> None:
            loop.call_soon_threadsafe(_settle, future, outcome)

        now = self._clock.now()
        contexts = tuple(Context(tenant, self._new_id(), actor, now, self._skew, self._index)
                         for _ in commands)
        json = tuple(map(encoded, commands))
        self._queue.put(_Unit(tenant, tuple(commands), contexts, traceparent, done, json,
                              sum(map(len, json))))
        return await future

    # --- writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        carried: _Unit | None = None
        while (first := carried or self._queue.get()) is not None:
            group, carried, stopping = self._drain(first)
            self._commit_group(group)
            if stopping:
                if carried is not None:
                    self._commit_group([carried])
                return

    def _drain(self, first: _Unit) -> tuple[list[_Unit], _Unit | None, bool]:
        """The next group: all that is queued, and (like PostgreSQL's commit_delay) up to
        ``linger_seconds`` more while the group is small, so that one transaction's fixed cost
        is shared by more commands when writes arrive one by one from many clients. Returns
        the group, the unit taken that would have made it too large (carried to the next),
        and whether a stop was asked for."""
        group, size, weight = [first], len(first.commands), first.size
        deadline = time.monotonic() + self._linger
        while size < self._limits.max_group_events:
            wait = deadline - time.monotonic() if size < self._linger_below else 0.0
            try:
                unit = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if unit is None:
                return group, None, True
            if weight + unit.size > self._limits.max_group_bytes:
                return group, unit, False
            group.append(unit)
            size, weight = size + len(unit.commands), weight + unit.size
        return group, None, False

    def _commit_group(self, group: list[_Unit]) -> None:
        if self._stopping:
            _fail(group, _stopping())
            return
        try:
            self._attempt(group)
        except (StreamConflict, IdempotencyKeyTaken):
            self._cache.clear()
            for unit in group:
                self._commit_alone(unit)
        except Exception as error:
            self._failed(error)
            _fail(group, error)

    def _commit_alone(self, unit: _Unit) -> None:
        """Retry one submission with fresh state until it commits or is refused; a race lost
        to another writer is transient, so only a hot stream that never lets it through ends
        in a 409 (never in a raw store error)."""
        for attempt in range(_RETRIES):
            if self._stopping:
                unit.done(_stopping())
                return
            try:
                self._attempt([unit])
                return
            except (StreamConflict, IdempotencyKeyTaken):
                self._cache.clear()
                # Exponential, jittered, capped: two writers hammering one stream on a busy
                # machine (a linear back-off lost 25 rounds in CI at load 10 on 2 cores).
                time.sleep(_jitter.uniform(0, min(0.2, 0.002 * 2 ** attempt)))
            except Exception as error:
                self._failed(error)
                unit.done(error)
                return
        unit.done(Rejected(0, Conflict(f"lost {_RETRIES} races to other writers on this "
                                       "stream; retry", -1)))

    def _failed(self, error: Exception) -> None:
        if isinstance(error, Interrupted | CommitTimedOut):
            log.warning("a commit was given up on: %s", error)
        else:
            log.exception("event store append failed")
        self._cache.clear()  # the commit may have been applied: its outcome is unknown

    def _attempt(self, group: list[_Unit]) -> None:
        self._watch.begin(lambda error: _fail(group, error))
        try:
            # The child of the submission's span, or linked to each of a group's.
            with telemetry.span(_tracer, "writer commit", [u.traceparent for u in group],
                                kind=SpanKind.INTERNAL,
                                attributes={"memledger.submissions": len(group)}):
                self._attempt_traced(group)
        finally:
            self._watch.end()

    def _attempt_traced(self, group: list[_Unit]) -> None:
        # Subject keys are looked up for each group (while the group before it commits), never
        # kept longer: a key destroyed by an erasure is never used again after the group that
        # was running and the next (never in a group that records the erasure).
        self._group_keys = {}
        self._ciphers.clear()  # as the keys: a group's ciphers are not kept for the next
        self._stored_keys = {}
        self._live_sources = self._sources_live(group)
        known = self._known_keys(group)
        states = self._load_states(group)
        self._group_keys = self._existing_keys(group, states)
        claims: dict[tuple[str, str], str] = {}
        plans = [p for unit in group
                 if (p := self._plan(unit, states, known, claims)) is not None]
        events = [e for p in plans for e in p.events]
        keys = [k for p in plans for k in p.keys]
        self._look_ahead()
        self._watch.raise_if_given_up()
        committed = self._store.append(events, keys) if events else []
        self._ahead_until = time.monotonic() + _AHEAD_SECONDS
        self._finish(plans, [c.position for c in committed])

    # --- idempotency ---------------------------------------------------------------------

    def _known_keys(self, group: list[_Unit]) -> dict[tuple[str, str], IdempotentResult]:
        """What the group's idempotency keys already recorded, by (tenant, key as sent). Keys
        are looked up as stored (their digest), and as sent too: recorded before digests."""
        by_tenant: dict[str, set[str]] = {}
        for unit in group:
            by_tenant.setdefault(unit.tenant, set()).update(
                c.idempotency_key for c in unit.commands if c.idempotency_key)
        known: dict[tuple[str, str], IdempotentResult] = {}
        for tenant, sent in by_tenant.items():
            if not sent:
                continue
            stored = {self._stored_key(tenant, k): k for k in sent}
            found = self._store.find_idempotent(tenant, sorted(sent | stored.keys()))
            known.update({(tenant, k): r for k, r in found.items() if k not in stored})
            known.update({(tenant, stored[k]): r for k, r in found.items() if k in stored})
        return known

    def _stored_key(self, tenant: str, key: str) -> str:
        """What ``key`` is stored as (``sealing.stored_key``), made once a group: a command's
        key is looked up, recorded and written in each of its events (a keyed digest each)."""
        found = self._stored_keys.get((tenant, key))
        if found is None:
            found = self._stored_keys[(tenant, key)] = stored_key(self._keyring, tenant,
                                                                  key) or key
        return found

    # --- state -----------------------------------------------------------------------------

    def _load_states(self, group: list[_Unit]) -> dict[UUID, StreamState]:
        """The state of every stream the group's commands read: from the cache, except that a
        stream named by an id minted for its command cannot exist yet (not looked up), and the
        target of a command with an ``expected_version`` is always read from the store (another
        writer may have moved it on, and a stale cache must not refuse a current version)."""
        wanted: set[UUID] = set()
        fresh: set[UUID] = set()
        for unit in group:
            for cmd, ctx in zip(unit.commands, unit.contexts, strict=True):
                refs = [r for r in reads_of(cmd, ctx) if r.key != ctx.fresh_key]
                wanted.update(r.stream_id(unit.tenant) for r in refs)
                if cmd.expected_version is not None:
                    fresh.add(target_of(cmd, ctx).stream_id(unit.tenant))
        states = {sid: cached for sid in wanted - fresh
                  if (cached := self._cache.get(sid)) is not None}
        unread = [sid for sid in wanted if sid not in states]
        found = self._read_states(unread)
        # Looked up and not there: a decision that asks again (an import's new item) is not
        # sent to the store once per command.
        self._absent = set(unread) - found.keys()
        return states | found

    def _read_states(self, sids: list[UUID]) -> dict[UUID, StreamState]:
        loaded = {sid: fold_state(events)
                  for sid, events in self._store.read_streams(sids).items() if events}
        self._remember(loaded)
        return loaded

    def _remember(self, states: dict[UUID, StreamState]) -> None:
        self._cache.put_all(states)

    # --- planning ------------------------------------------------------------------------

    def _plan(self, unit: _Unit, states: dict[UUID, StreamState],
              known: dict[tuple[str, str], IdempotentResult],
              claims: dict[tuple[str, str], str]) -> _Plan | None:
        """Decide every command of the unit against ``states`` and the idempotency keys
        ``claims``-ed earlier in the group (both updated in place only if the whole unit is
        accepted); report a refusal to the unit and return ``None``."""
        plan = _Plan(unit, [], [], [], dict(states), claims=dict(claims))
        try:
            for index, (cmd, ctx) in enumerate(zip(unit.commands, unit.contexts, strict=True)):
                self._plan_one(plan, index, cmd, ctx, known)
        except Rejected as rejection:
            unit.done(rejection)
            return None
        states.update(plan.states)
        claims.update(plan.claims)
        return plan

    def _plan_one(self, plan: _Plan, index: int, cmd: CommandBase, ctx: Context,
                  known: dict[tuple[str, str], IdempotentResult]) -> None:
        key = cmd.idempotency_key
        digest = request_hash(cmd, plan.unit.json[index]) if key is not None else ""
        if key is not None and self._repeats(plan, index, (ctx.tenant, key), digest, known):
            return
        overlay = plan.states

        def lookup(ref: StreamRef) -> StreamState | None:
            sid = ref.stream_id(ctx.tenant)
            if (sid not in overlay and ref.kind == "item" and ref.key != ctx.fresh_key
                    and sid not in self._absent):
                # An item found only through another stream's state (a slot's holder): read
                # now, since it could not be named before the decision began.
                overlay.update(self._read_states([sid]))
            return overlay.get(sid)

        try:
            self._source_not_erased(cmd)
            decision = decide(cmd, ctx, lookup)
            for caused in decision.also:
                plan.events.extend(self._envelopes(plan, cmd, ctx, caused))
            start = len(plan.events)
            plan.events.extend(self._envelopes(plan, cmd, ctx, decision))
        except DomainError as error:
            raise Rejected(index, error) from error
        plan.slices.append((start, len(plan.events), decision))
        plan.replayed.append(None)
        if key is not None:
            plan.claims[(ctx.tenant, key)] = digest
            plan.keys.append(key_record(ctx, self._stored_key(ctx.tenant, key),
                                        digest, plan.events[start:], cmd, decision))

    @staticmethod
    def _repeats(plan: _Plan, index: int, key: tuple[str, str], digest: str,
                 known: dict[tuple[str, str], IdempotentResult]) -> bool:
        """Whether the command repeats one already committed (its result is replayed) or
        one earlier in this group (its result is shared after the commit); a different request
        under the same key is refused."""
        earlier = known.get(key)
        claimed = earlier.record.request_hash if earlier else plan.claims.get(key)
        if claimed is None:
            return False
        if claimed != digest:
            raise Rejected(index, Invalid("idempotency_key",
                                          "already used for a different request in this tenant"))
        plan.slices.append((len(plan.events), len(plan.events), None))
        plan.replayed.append(replayed(earlier) if earlier else None)
        return True

    def _envelopes(self, plan: _Plan, cmd: CommandBase, ctx: Context, decision: Decision
                   ) -> list[NewEvent]:
        stream_id = decision.target.stream_id(ctx.tenant)
        events = []
        for payload in decision.events:
            state = plan.states.get(stream_id)
            version = (state.version if state else 0) + 1
            event_id = self._new_id()
            # Every value comes from a validated command or domain payload, so the stored
            # JSON is written directly rather than through EventEnvelope again: the envelope
            # fields by orjson, the payload by its own serializer, spliced together.
            subject, key = self._sealing(plan, cmd, ctx, decision, payload.event_type)
            head = orjson.dumps({
                "event_id": event_id, "event_type": payload.event_type,
                "schema_version": payload.schema_version, "stream_id": stream_id,
                "stream_version": version, "tenant_id": ctx.tenant,
                "space_id": decision.space_id, "session_id": decision.session_id,
                "agent_id": cmd.agent_id, "actor": ctx.actor, "valid_from": decision.valid_from,
                "valid_to": decision.valid_to,
                "idempotency_key": None if cmd.idempotency_key is None else self._stored_key(
                    ctx.tenant, cmd.idempotency_key),
                "causation_id": cmd.causation_id, "correlation_id": cmd.correlation_id,
                "traceparent": plan.unit.traceparent, "subject_id": subject,
                "key_id": key and key.key_id})
            if key is None:
                body = payload.__pydantic_serializer__.to_json(payload)
            else:  # personal data leaves this process sealed, never in the clear
                body = orjson.dumps(seal_payload(payload.model_dump(mode="json"),
                                                 payload.event_type, str(event_id), key,
                                                 self._ciphers))
            data = b"".join((head[:-1], b',"payload":', body, b"}"))
            events.append(NewEvent(event_id, stream_id, version, payload.event_type, data))
            plan.states[stream_id] = evolve(
                state, payload.event_type, decision.space_id, subject,
                payload.model_dump(mode="json") if payload.event_type in STATEFUL else None)
        return events

    def _sealing(self, plan: _Plan, cmd: CommandBase, ctx: Context, decision: Decision,
                 event_type: str) -> tuple[str | None, SubjectKey | None]:
        """The envelope's subject, and the key that seals the event (``sealing``)."""
        state = plan.states.get(decision.target.stream_id(ctx.tenant))
        if event_type not in PERSONAL:
            return cmd.subject_id or (state.subject if state else None), None
        subjects = subjects_of(cmd, state, decision.space_id, plan.states, ctx.tenant)
        source = cmd.__dict__.get("source_key_id")
        keys = [k for s in subjects
                if (k := self._key(ctx.tenant, s, decision.space_id, source)) is not None]
        return subjects[0], combined(keys) if keys else None

    def _look_ahead(self) -> None:
        """Look the keys this group used up again, for the next group, while this one commits:
        writes come from the same few subjects, so the next group's lookup is then off the
        path of its acknowledgements (a round trip of every group's commit otherwise)."""
        lookups = self._lookups
        if lookups is None or self._keyring is None or not self._group_keys:
            return
        asked = frozenset(self._group_keys)
        try:
            self._ahead = asked, lookups.submit(self._keyring.existing_for_writing, asked)
        except RuntimeError:  # stopped meanwhile: the next group (if any) looks them up itself
            return
        self._ahead_until = 0.0  # usable once this group has committed

    def _looked_ahead(self, group: list[_Unit]) -> tuple[KeySet, dict[tuple[str, str, str],
                                                                        SubjectKey]]:
        """What the lookup made while the previous group committed asked and found; nothing
        for a group recording an erasure (its keys may have been destroyed since)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None or time.monotonic() > self._ahead_until or any(
                isinstance(cmd, EraseSubject) for unit in group for cmd in unit.commands):
            return frozenset(), {}
        try:
            return ahead[0], ahead[1].result()
        except Exception:  # the lookup is asked again, on the writer's own thread
            log.warning("looking subject keys up ahead failed", exc_info=True)
            return frozenset(), {}

    def _existing_keys(self, group: list[_Unit], states: dict[UUID, StreamState]
                       ) -> dict[tuple[str, str, str], SubjectKey]:
        """The live keys of the subjects the group's commands will likely seal for (their
        ``subject_id``, else their target stream's subject, else their space's), in one
        lookup, or none when the previous group's lookup ahead asked for all of them; a
        subject missed here, or without a key yet, is looked up when sealing."""
        asked, found = self._looked_ahead(group)
        if self._keyring is None:
            return {}
        wanted: set[tuple[str, str, str]] = set()
        for unit in group:
            for cmd, ctx in zip(unit.commands, unit.contexts, strict=True):
                space = cmd.__dict__.get("space_id")
                if space is None:
                    continue
                state = states.get(target_of(cmd, ctx).stream_id(unit.tenant))
                subject = cmd.subject_id or (state.subject if state else None)
                wanted.add((unit.tenant, subject or f"space:{space}", space))
        found = {key: found[key] for key in wanted & found.keys()}
        rest = wanted - asked
        return found | self._keyring.existing_for_writing(rest) if rest else found

    def _sources_live(self, group: list[_Unit]) -> set[str]:
        """Which of the source keys named by the group's commands are live (one query)."""
        sources = {s for unit in group for cmd in unit.commands
                   if (s := cmd.__dict__.get("source_key_id")) is not None}
        return self._keyring.live(sources) if self._keyring is not None and sources else set()

    def _source_not_erased(self, cmd: CommandBase) -> None:
        """What was learned from sealed text (an embedding, a preference) is refused once that
        text's subject is erased: it would bring the erased data back under a new key."""
        # A model's fields are in its __dict__: a getattr of one the command does not have
        # goes through pydantic's __getattr__ and an AttributeError (3 µs, per command).
        source = cmd.__dict__.get("source_key_id")
        if (source is not None and self._keyring is not None
                and source not in self._live_sources):
            raise _source_erased()

    def _key(self, tenant: str, subject: str | None, space: str, source: str | None
             ) -> SubjectKey | None:
        """The key sealing ``subject``'s data in ``space``; with ``source``, data learned from
        text that key sealed: refused if that key was destroyed since the group's check."""
        if self._keyring is None or subject is None:
            return None
        found = self._group_keys.get((tenant, subject, space))
        if found is None:
            try:
                found = self._keyring.for_writing(tenant, subject, space, source)
            except SourceErased as erased:
                raise _source_erased() from erased
            self._group_keys[(tenant, subject, space)] = found
        return found

    # --- after commit ----------------------------------------------------------------------

    def _finish(self, plans: list[_Plan], positions: list[int]) -> None:
        offset = 0
        by_key: dict[tuple[str, str], CommandResult] = {}
        for plan in plans:
            self._remember({e.stream_id: plan.states[e.stream_id] for e in plan.events})
            results = _results(plan, positions[offset:offset + len(plan.events)], by_key)
            plan.unit.done(results)
            offset += len(plan.events)
        if positions:
            telemetry.EVENTS_WRITTEN.add(len(positions))
        if positions and self._on_commit is not None:
            self._on_commit(positions[-1])


def _results(plan: _Plan, positions: list[int],
             by_key: dict[tuple[str, str], CommandResult]) -> list[CommandResult]:
    """The unit's results; ``positions`` are those of the unit's own events. A command that
    repeated a key used earlier in the group gets that command's result (from ``by_key``,
    which this fills as it goes)."""
    results: list[CommandResult] = []
    tenant = plan.unit.tenant
    for cmd, (start, end, decision), prior in zip(plan.unit.commands, plan.slices,
                                                  plan.replayed, strict=True):
        key = (tenant, cmd.idempotency_key or "")
        if decision is None:
            result = prior or replace(by_key[key], duplicate=True)
        else:
            events = plan.events[start:end]
            result = CommandResult(
                command=command_name(cmd), event_ids=tuple(str(e.event_id) for e in events),
                positions=tuple(positions[start:end]),
                stream_version=events[-1].stream_version, ids=decision.ids)
            if cmd.idempotency_key:
                by_key[key] = result
        results.append(result)
    return results


def _fail(group: list[_Unit], error: BaseException) -> None:
    for unit in group:
        unit.done(error)


def _stopping() -> WriterStopping:
    return WriterStopping("the service is stopping; this write was not committed")


def _settle(future: "asyncio.Future[list[CommandResult]]",
            outcome: list[CommandResult] | BaseException) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _source_erased() -> Invalid:
    """The refusal of what was learned from text whose subject was erased."""
    return Invalid("source_key_id", "the data subject of the source was erased")
