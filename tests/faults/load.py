"""A sustained write load from several concurrent HTTP clients, each write with an idempotency
key and retried with that same key (after a connection error, a timeout, a 429 or a 5xx) until
it is acknowledged (200/201) or definitively refused (any other 4xx). Every outcome is recorded.
Given several ingest replicas, each worker starts on its own and a retry goes to the next.

Some writes are meant to be refused: one in ``REFUSE_EVERY`` goes to a space that does not exist
(refused by the domain, in the writer: 404) and one to an unknown memory kind (refused by
validation: 422). They carry an item id of their own, so their absence can be checked anywhere.
"""

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

SPACE = "load-{worker}"
MISSING_SPACE = "never-created"
REFUSE_EVERY = 25
RETRY_PAUSE_SECONDS = 0.2


@dataclass(frozen=True)
class Acked:
    key: str
    space: str
    item_id: str
    event_id: str
    position: int
    at: float
    """``time.monotonic()`` when the acknowledgement arrived."""
    sent: float
    """``time.monotonic()`` when the first attempt was sent."""
    attempts: int
    duplicate: bool
    """The acknowledgement of a retry: the first attempt had committed."""


@dataclass(frozen=True)
class Refused:
    key: str
    item_id: str
    status: int
    at: float


@dataclass
class Outcomes:
    acked: list[Acked] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    """Writes neither acknowledged nor refused when the load was told to give up."""
    retries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acks_after(self, instant: float) -> list[Acked]:
        with self.lock:
            return [a for a in self.acked if a.at > instant]

    def sent_after(self, instant: float) -> list[Acked]:
        """The acknowledged writes first sent after ``instant``."""
        with self.lock:
            return [a for a in self.acked if a.sent > instant]

    def last_position(self) -> int:
        with self.lock:
            return max((a.position for a in self.acked), default=0)


class Load:
    """``workers`` threads, each writing to its own space at about ``rate`` writes a second,
    until ``stop``; a write in flight is then finished (``give_up`` ends even that)."""

    def __init__(self, url: str | list[str], workers: int = 4, rate: float = 10.0) -> None:
        self.urls = [url] if isinstance(url, str) else url
        self.workers = workers
        self.interval = 1.0 / rate
        self.outcomes = Outcomes()
        self._stop = threading.Event()
        self._give_up = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        with httpx.Client(timeout=30) as client:
            for worker in range(self.workers):
                response, _ = self._settle(client, worker, "/v1/spaces", {
                    "space_id": SPACE.format(worker=worker), "idempotency_key": f"space-{worker}"})
                assert response is not None
                assert response.status_code in (200, 201), response.text
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True,
                                          name=f"faults-load-{w}") for w in range(self.workers)]
        for thread in self._threads:
            thread.start()

    def stop(self, settle_seconds: float = 180.0) -> Outcomes:
        """Stop writing; wait for the writes in flight to settle (``settle_seconds`` at most)."""
        stop_writers(self._threads, self._stop, self._give_up, settle_seconds)
        return self.outcomes

    def _run(self, worker: int) -> None:
        with httpx.Client(timeout=10) as client:
            n = 0
            while not self._stop.is_set():
                started = time.monotonic()
                self._write(client, worker, n)
                n += 1
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def _write(self, client: httpx.Client, worker: int, n: int) -> None:
        key = f"w{worker}-{n}"
        space, body = SPACE.format(worker=worker), {
            "kind": "fact", "idempotency_key": key,
            "content": f"probe {key}: sensor reading {n} recorded on channel {worker}"}
        if n % REFUSE_EVERY == REFUSE_EVERY - 1:
            space = MISSING_SPACE
            body["item_id"] = str(uuid.uuid5(uuid.NAMESPACE_URL, key))
        elif n % REFUSE_EVERY == REFUSE_EVERY // 2:
            body |= {"kind": "no-such-kind", "item_id": str(uuid.uuid5(uuid.NAMESPACE_URL, key))}
        sent = time.monotonic()
        self._record(key, space, body, sent,
                     self._settle(client, worker, f"/v1/spaces/{space}/memories", body))

    def _settle(self, client: httpx.Client, worker: int, path: str, body: dict[str, Any]
                ) -> tuple[httpx.Response | None, int]:
        return post_until_definitive(client, self.urls[worker:] + self.urls[:worker], path, body,
                                     self._give_up, self._retried)

    def _retried(self) -> None:
        with self.outcomes.lock:
            self.outcomes.retries += 1

    def _record(self, key: str, space: str, body: dict[str, Any], sent: float,
                settled: tuple[httpx.Response | None, int]) -> None:
        response, attempts = settled
        now = time.monotonic()
        with self.outcomes.lock:
            if response is None:
                self.outcomes.unresolved.append(key)
            elif response.status_code in (200, 201):
                answer = response.json()
                self.outcomes.acked.append(Acked(
                    key, space, answer["ids"]["item_id"], answer["event_ids"][0],
                    answer["position"], now, sent, attempts, answer["duplicate"]))
            else:
                self.outcomes.refused.append(Refused(key, body.get("item_id", ""),
                                                     response.status_code, now))


def post_until_definitive(client: httpx.Client, urls: list[str], path: str,
                          body: dict[str, Any], give_up: threading.Event,
                          retried: Callable[[], None]) -> tuple[httpx.Response | None, int]:
    """Post until the answer is definitive (not a connection error, a timeout, a 429 or a
    5xx), each attempt to the next of ``urls``; return it (None: ``give_up`` was set first)
    and the attempts made."""
    attempts = 0
    while not give_up.is_set():
        url = urls[attempts % len(urls)]
        attempts += 1
        try:
            response = client.post(url + path, json=body)
        except httpx.TransportError:
            response = None
        if response is not None and not _transient(response.status_code):
            return response, attempts
        retried()
        give_up.wait(RETRY_PAUSE_SECONDS)
    return None, attempts


def stop_writers(threads: list[threading.Thread], stop: threading.Event,
                 give_up: threading.Event, settle_seconds: float) -> None:
    """Tell the writing threads to stop; give the writes in flight ``settle_seconds`` to
    settle, then make them give up."""
    stop.set()
    deadline = time.monotonic() + settle_seconds
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    give_up.set()
    for thread in threads:
        thread.join()


def _transient(status: int) -> bool:
    return status == 429 or status >= 500
