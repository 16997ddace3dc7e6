"""A mixed write load: each worker, in its own space, asserts, revises, retracts and supersedes
its own memories, sends batches of 100, appends to a session, records feedback, and now and
then erases the data subject it has been writing about. Every write carries an idempotency key
and is retried with it (after a connection error, a timeout, a 429 or a 5xx) until it is
acknowledged or definitively refused; every outcome is recorded with the events it made, so
the audit knows where each must be.

Some writes are meant to be refused (a space that does not exist, an unknown kind); they carry
an item id of their own, so their absence can be checked anywhere.
"""

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.faults.load import post_until_definitive, stop_writers

SPACE = "mixed-{worker}"
BATCH = 100
CYCLE = ("assert", "revise", "message", "assert", "feedback", "subject", "retract", "assert",
         "supersede", "message", "subject", "batch", "refuse-space", "assert", "refuse-kind",
         "subject")
"""One worker's writes, in turn; every ``ERASE_EVERY``-th cycle ends with an erasure."""
ERASE_EVERY = 2


def token(worker: int, subject: int) -> str:
    """The plaintext a data subject's writes carry: unique, and in no other text."""
    return f"zq{worker}subj{subject}plain"


def subject_id(worker: int, subject: int) -> str:
    """The data subject's id (kept in the clear, as ids are; its plaintext is ``token``)."""
    return f"subject-{worker}-{subject}"


@dataclass(frozen=True)
class Effect:
    """One event an acknowledged write made, and what it must have left in the read models."""

    event_id: str
    position: int
    item_id: str = ""
    """A memory item's: a bi-temporal row (and a vector point) made at ``position``."""
    message_id: str = ""
    signal: bool = False
    """A feedback signal row at ``position``."""


@dataclass(frozen=True)
class Write:
    op: str
    key: str
    at: float
    """``time.monotonic()`` when the acknowledgement arrived."""
    attempts: int
    effects: tuple[Effect, ...]
    subject: str = ""
    """The data subject the write was about (``token``'s), if any."""


@dataclass(frozen=True)
class Refusal:
    op: str
    key: str
    item_id: str
    status: int
    at: float


@dataclass
class Ledger:
    """Everything the load was told, by outcome."""

    acked: list[Write] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    erased: dict[str, str] = field(default_factory=dict)
    """Erased subject id → its plaintext token."""
    retries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acks_after(self, instant: float) -> list[Write]:
        with self.lock:
            return [w for w in self.acked if w.at > instant]

    def last_position(self) -> int:
        with self.lock:
            return max((e.position for w in self.acked for e in w.effects), default=0)

    def events_after(self, instant: float) -> int:
        with self.lock:
            return sum(len(w.effects) for w in self.acked if w.at > instant)


@dataclass
class _Worker:
    number: int
    space: str
    session: str
    live: list[str] = field(default_factory=list)
    """Its items still live (neither retracted nor superseded), not about a subject."""
    subject: int = 0
    cycles: int = 0


class MixedLoad:
    """``workers`` threads, each writing about ``rate`` commands a second until ``stop``."""

    def __init__(self, url: str, headers: dict[str, str], workers: int = 3,
                 rate: float = 5.0, batch_every: int = 2) -> None:
        """``batch_every``: a worker sends its batch of 100 in one cycle of so many."""
        self.url, self.headers = url, headers
        self.batch_every = batch_every
        self.workers = workers
        self.interval = 1.0 / rate
        self.ledger = Ledger()
        self._stop = threading.Event()
        self._give_up = threading.Event()
        self._threads: list[threading.Thread] = []
        self._keys = itertools.count()
        self._sides = 0

    def start(self) -> None:
        workers = [self._open(n) for n in range(self.workers)]
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True,
                                          name=f"faults-mixed-{w.number}") for w in workers]
        for thread in self._threads:
            thread.start()

    def stop(self, settle_seconds: float = 180.0) -> Ledger:
        """Stop writing; wait for the writes in flight to settle (``settle_seconds`` at most)."""
        stop_writers(self._threads, self._stop, self._give_up, settle_seconds)
        return self.ledger

    def side(self) -> _Worker:
        """A worker of the test thread's own (its own space and session), for a fault's
        writes: ``burst`` and ``erase_subject``."""
        with self.ledger.lock:
            self._sides += 1
            number = 100 + self._sides
        return self._open(number)

    def burst(self, worker: _Worker, batches: int) -> list[Effect]:
        """``batches`` batches of 100 memories, one after another; the events they made."""
        made: list[Effect] = []
        with self._client() as client:
            for _ in range(batches):
                if (write := self._batch(client, worker)) is not None:
                    made += write.effects
        return made

    def erase_subject(self, worker: _Worker, memories: int) -> None:
        """``memories`` memories about a new subject of ``worker``, then its erasure."""
        with self._client() as client:
            for _ in range(memories):
                self._subject(client, worker)
            self._erase(client, worker)

    def _client(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(headers=self.headers, timeout=timeout)

    def _open(self, number: int) -> _Worker:
        space, session = SPACE.format(worker=number), str(uuid.uuid4())
        with self._client() as client:
            for path, body in (("/v1/spaces", {"space_id": space}),
                               (f"/v1/spaces/{space}/sessions", {"session_id": session})):
                response, _ = self._settle(client, path, {
                    **body, "idempotency_key": f"open-{number}-{path}"})
                assert response is not None, "never answered"
                assert response.status_code in (200, 201), response.text
        return _Worker(number, space, session)

    def _run(self, worker: _Worker) -> None:
        with self._client() as client:
            for step in itertools.count():
                if self._stop.is_set():
                    return
                started = time.monotonic()
                op = CYCLE[step % len(CYCLE)]
                if op != "batch" or worker.cycles % self.batch_every == 0:
                    OPS[op](self, client, worker)
                if step % len(CYCLE) == len(CYCLE) - 1:
                    self._end_cycle(client, worker)
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def _end_cycle(self, client: httpx.Client, worker: _Worker) -> None:
        worker.cycles += 1
        if worker.cycles % ERASE_EVERY == 0:
            self._erase(client, worker)

    # --- the operations -----------------------------------------------------------------------

    def _key(self, worker: _Worker, op: str) -> str:
        return f"w{worker.number}-{op}-{next(self._keys)}"

    def _assert(self, client: httpx.Client, worker: _Worker) -> None:
        key = self._key(worker, "assert")
        body = {"kind": "fact", "idempotency_key": key,
                "content": f"reading {key} logged on channel {worker.number}"}
        write = self._write(client, "assert", f"/v1/spaces/{worker.space}/memories", body)
        if write is not None:
            worker.live.append(write.effects[0].item_id)

    def _subject(self, client: httpx.Client, worker: _Worker) -> None:
        """A memory about the worker's current data subject, in plaintext it alone carries."""
        key, secret = self._key(worker, "subject"), token(worker.number, worker.subject)
        subject = subject_id(worker.number, worker.subject)
        self._write(client, "subject", f"/v1/spaces/{worker.space}/memories", {
            "kind": "preference", "idempotency_key": key, "subject_id": subject,
            "content": f"{secret} prefers window seats", "tags": [secret]}, subject=subject)

    def _revise(self, client: httpx.Client, worker: _Worker) -> None:
        if worker.live:
            item, key = worker.live[-1], self._key(worker, "revise")
            self._write(client, "revise", f"/v1/spaces/{worker.space}/memories/{item}/revise",
                        {"idempotency_key": key, "content": f"corrected reading {key}",
                         "reason": "recalibrated"})

    def _retract(self, client: httpx.Client, worker: _Worker) -> None:
        if worker.live:
            item = worker.live.pop(0)
            self._write(client, "retract", f"/v1/spaces/{worker.space}/memories/{item}/retract",
                        {"idempotency_key": self._key(worker, "retract"), "reason": "wrong"})

    def _supersede(self, client: httpx.Client, worker: _Worker) -> None:
        if len(worker.live) >= 2:
            old, new = worker.live.pop(0), worker.live[-1]
            self._write(client, "supersede",
                        f"/v1/spaces/{worker.space}/memories/{old}/supersede",
                        {"idempotency_key": self._key(worker, "supersede"),
                         "superseded_by": new, "reason": "newer reading"})

    def _message(self, client: httpx.Client, worker: _Worker) -> None:
        key = self._key(worker, "message")
        self._write(client, "message",
                    f"/v1/spaces/{worker.space}/sessions/{worker.session}/messages",
                    {"idempotency_key": key, "message_id": str(uuid.uuid5(uuid.NAMESPACE_URL, key)),
                     "role": "user", "content": f"note {key}: the pump hums again"})

    def _feedback(self, client: httpx.Client, worker: _Worker) -> None:
        if worker.live:
            self._write(client, "feedback", f"/v1/spaces/{worker.space}/feedback", {
                "idempotency_key": self._key(worker, "feedback"), "item_id": worker.live[-1],
                "signal": "rating", "rating": 4})

    def _batch(self, client: httpx.Client, worker: _Worker) -> Write | None:
        key = self._key(worker, "batch")
        return self._write(client, "batch", "/v1/batch", {"commands": [
            {"command": "assert_memory", "space_id": worker.space, "kind": "observation",
             "idempotency_key": f"{key}-{n}", "content": f"batch {key} line {n}: flow nominal"}
            for n in range(BATCH)]}, key=key)

    def _refuse(self, client: httpx.Client, worker: _Worker, op: str) -> None:
        key = self._key(worker, op)
        item = str(uuid.uuid5(uuid.NAMESPACE_URL, key))
        space, kind = ("never-created", "fact") if op == "refuse-space" else (
            worker.space, "no-such-kind")
        self._write(client, op, f"/v1/spaces/{space}/memories", {
            "kind": kind, "idempotency_key": key, "item_id": item,
            "content": f"refused {key}"}, refused_item=item)

    def _erase(self, client: httpx.Client, worker: _Worker) -> None:
        """Erase the worker's current subject (its memories were acknowledged before); the next
        subject memories are about a new one."""
        secret = token(worker.number, worker.subject)
        subject = subject_id(worker.number, worker.subject)
        worker.subject += 1
        with self._client(timeout=120.0) as slow:
            response, attempts = self._settle(slow, f"/v1/subjects/{subject}/erase",
                                              {"reason": "asked to"})
        if response is not None and response.status_code == 200:
            receipt = response.json()
            self._record(Write("erase", subject, time.monotonic(), attempts, (
                Effect(receipt["event_id"], int(receipt["position"])),), subject))
            with self.ledger.lock:
                self.ledger.erased[subject] = secret
        else:
            self._record_failure("erase", subject, "", response)

    # --- sending and recording ----------------------------------------------------------------

    def _write(self, client: httpx.Client, op: str, path: str, body: dict[str, Any], *,
               subject: str = "", key: str = "", refused_item: str = "") -> Write | None:
        key = key or str(body["idempotency_key"])
        response, attempts = self._settle(client, path, body)
        if response is None or response.status_code not in (200, 201):
            self._record_failure(op, key, refused_item, response)
            return None
        answer = response.json()
        results = answer["results"] if op == "batch" else [answer]
        write = Write(op, key, time.monotonic(), attempts,
                      tuple(e for r in results for e in _effects(op, body, r)), subject)
        self._record(write)
        return write

    def _settle(self, client: httpx.Client, path: str, body: dict[str, Any]
                ) -> tuple[httpx.Response | None, int]:
        return post_until_definitive(client, [self.url], path, body, self._give_up,
                                     self._retried)

    def _retried(self) -> None:
        with self.ledger.lock:
            self.ledger.retries += 1

    def _record(self, write: Write) -> None:
        with self.ledger.lock:
            self.ledger.acked.append(write)

    def _record_failure(self, op: str, key: str, item: str,
                        response: httpx.Response | None) -> None:
        with self.ledger.lock:
            if response is None:
                self.ledger.unresolved.append(key)
            elif item:
                self.ledger.refused.append(Refusal(op, key, item, response.status_code,
                                                   time.monotonic()))
            else:  # a write the load meant to be accepted
                self.ledger.unresolved.append(f"{key}: {response.status_code} {response.text}")


def _effects(op: str, body: dict[str, Any], result: dict[str, Any]) -> list[Effect]:
    pairs = zip(result["event_ids"], result["positions"], strict=True)
    if op == "message":
        return [Effect(e, p, message_id=str(body["message_id"])) for e, p in pairs]
    if op == "feedback":
        return [Effect(e, p, signal=True) for e, p in pairs]
    item = str(result["ids"].get("item_id", ""))
    return [Effect(e, p, item_id=item) for e, p in pairs]


Op = Callable[[MixedLoad, httpx.Client, _Worker], object]
OPS: dict[str, Op] = {
    "assert": MixedLoad._assert, "subject": MixedLoad._subject, "revise": MixedLoad._revise,
    "retract": MixedLoad._retract, "supersede": MixedLoad._supersede,
    "message": MixedLoad._message, "feedback": MixedLoad._feedback, "batch": MixedLoad._batch,
    "refuse-space": lambda load, client, w: load._refuse(client, w, "refuse-space"),
    "refuse-kind": lambda load, client, w: load._refuse(client, w, "refuse-kind")}
