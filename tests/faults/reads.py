"""Reads running beside the write load, through every query replica as a client with a retry
policy would (the next replica after a connection error or a 5xx): each read names a write
already acknowledged, so its right answer is known. A read path is unavailable from its first
read that no replica answered until its next answered one; those spans are reported."""

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.faults.load import Acked, Outcomes

PATHS = ("item", "as_of", "search")
RETRYABLE = (502, 503, 504)


@dataclass
class PathRecord:
    reads: int = 0
    unanswered: int = 0
    """Reads no replica answered (each replica tried once)."""
    outages: list[float] = field(default_factory=list)
    """Seconds of each span without an answer."""
    down_since: float | None = None


@dataclass
class ReadOutcomes:
    paths: dict[str, PathRecord] = field(default_factory=lambda: {p: PathRecord()
                                                                  for p in PATHS})
    wrong: list[str] = field(default_factory=list)
    """Answers that were not the right one (a 200 with other content, a basis behind the
    position asked for, an item where there was none yet)."""
    not_retryable: list[str] = field(default_factory=list)
    """Errors a client's retry policy would not handle (a 4xx where the read was valid, a
    500, a 503 without Retry-After)."""

    def report(self) -> dict[str, Any]:
        return {path: {"reads": r.reads, "unanswered": r.unanswered,
                       "unavailable_seconds": round(sum(r.outages), 2),
                       "longest_outage_seconds": round(max(r.outages, default=0.0), 2)}
                for path, r in self.paths.items()}


class Reads:
    """``workers`` threads reading until ``stop``."""

    def __init__(self, urls: list[str], writes: Outcomes, workers: int = 2) -> None:
        self.urls = urls
        self.writes = writes
        self.outcomes = ReadOutcomes()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True,
                                          name=f"faults-reads-{w}") for w in range(workers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> ReadOutcomes:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        now = time.monotonic()
        for record in self.outcomes.paths.values():
            if record.down_since is not None:
                record.outages.append(now - record.down_since)
        return self.outcomes

    def _run(self, worker: int) -> None:
        rng = random.Random(worker)
        with httpx.Client(timeout=10) as client:
            while not self._stop.wait(0.2):
                with self.writes.lock:
                    acked = [a for a in self.writes.acked[-50:] if not a.duplicate]
                if acked:
                    self._read(client, rng.choice(PATHS), rng.choice(acked), worker)

    def _read(self, client: httpx.Client, path: str, write: Acked, worker: int) -> None:
        request, check = _READS[path](write)
        for attempt in range(len(self.urls)):
            url = self.urls[(worker + attempt) % len(self.urls)]
            try:
                response = request(client, url)
            except httpx.TransportError:
                continue
            if response.status_code in RETRYABLE:
                if response.status_code == 503 and "retry-after" not in response.headers:
                    self._note("not_retryable", f"{path}: 503 without Retry-After")
                continue
            self._answered(path, True)
            problem = check(response)
            if problem:
                self._note("wrong" if response.status_code < 400 or path == "as_of"
                           else "not_retryable", f"{path} {write.key}: {problem}")
            return
        self._answered(path, False)

    def _answered(self, path: str, answered: bool) -> None:
        now = time.monotonic()
        with self._lock:
            record = self.outcomes.paths[path]
            record.reads += 1
            if not answered:
                record.unanswered += 1
                record.down_since = record.down_since or now
            elif record.down_since is not None:
                record.outages.append(now - record.down_since)
                record.down_since = None

    def _note(self, kind: str, text: str) -> None:
        with self._lock:
            getattr(self.outcomes, kind).append(text)


Request = Callable[[httpx.Client, str], httpx.Response]
Check = Callable[[httpx.Response], str]


def _item(write: Acked) -> tuple[Request, Check]:
    """The item, once the read models have its write: the write's content."""
    def request(client: httpx.Client, url: str) -> httpx.Response:
        return client.get(f"{url}/v1/spaces/{write.space}/items/{write.item_id}",
                          params={"min_position": write.position, "wait_ms": 2_000})
    return request, lambda r: _content(r, write)


def _as_of(write: Acked) -> tuple[Request, Check]:
    """The item as of the position just before its write: not there yet."""
    def request(client: httpx.Client, url: str) -> httpx.Response:
        return client.get(f"{url}/v1/spaces/{write.space}/items/{write.item_id}",
                          params={"as_of_position": write.position - 1, "wait_ms": 2_000})
    return request, lambda r: "" if r.status_code == 404 else f"{r.status_code} {r.text[:200]}"


def _search(write: Acked) -> tuple[Request, Check]:
    """A search of the write's space once the index has the write: a basis at or past it."""
    def request(client: httpx.Client, url: str) -> httpx.Response:
        return client.post(f"{url}/v1/search", json={
            "query": f"sensor reading {write.key}", "spaces": [write.space], "k": 3,
            "min_position": write.position, "wait_ms": 2_000})
    return request, lambda r: _basis_reaches(r, write.position)


_READS: dict[str, Callable[[Acked], tuple[Request, Check]]] = {
    "item": _item, "as_of": _as_of, "search": _search}


def _content(response: httpx.Response, write: Acked) -> str:
    if response.status_code != 200:
        return f"{response.status_code} {response.text[:200]}"
    content = response.json()["item"].get("content", "")
    return "" if f"probe {write.key}:" in content else f"content {content!r}"


def _basis_reaches(response: httpx.Response, position: int) -> str:
    if response.status_code != 200:
        return f"{response.status_code} {response.text[:200]}"
    basis = int(response.json()["basis"]["position"])
    return "" if basis >= position else f"basis {basis} behind {position}"
