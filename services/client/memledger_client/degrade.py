"""Graceful degradation: a circuit breaker per endpoint group, and a stale cache for recall.

When memledger is down or slow, an agent is better served by a quick "not now" (or by what it
was told a minute ago, marked as such) than by a request that hangs for the client's whole
timeout on every turn. Pure state machines: time comes from the ``clock`` they are given, so
they are tested without a network or a wall clock.

    closed ──(``failures`` in a row)──► open ──(``recovery_seconds``)──► half-open
      ▲                                   ▲                                  │ one probe
      └──────────────── probe answered ───┴──────────── probe failed ◄──────┘
"""

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Literal

import orjson

Group = Literal["write", "read", "recall"]
"""Endpoint groups with a breaker each: a failing search must not stop writes, nor the reverse."""
State = Literal["closed", "open", "half-open"]
Clock = Callable[[], float]


@dataclass(frozen=True)
class BreakerPolicy:
    """When a group's breaker opens and for how long. The defaults follow what agent-memory
    designs ask of a client: a 2 s timeout for recall (search and context: an agent's turn
    waits on them), open after 5 failures in a row, a probe after 30 s."""

    failures: int = 5
    recall_timeout_seconds: float = 2.0
    recovery_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.failures < 1:
            raise ValueError("failures: must be at least 1")
        if self.recall_timeout_seconds <= 0 or self.recovery_seconds <= 0:
            raise ValueError("recall_timeout_seconds and recovery_seconds: must be positive")


class CircuitBreaker:
    """One group's breaker. ``admit`` before each attempt; ``succeeded`` or ``failed`` after
    it (a failure is no answer, a timeout, or 502/503/504; any other answer is a success)."""

    def __init__(self, policy: BreakerPolicy, clock: Clock) -> None:
        self._policy, self._clock = policy, clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> State:
        with self._lock:
            return self._state()

    def admit(self) -> float | None:
        """None if the attempt may go ahead; else the seconds until a probe will be let
        through. In half-open state exactly one caller (the probe) is admitted."""
        with self._lock:
            state = self._state()
            if state == "closed":
                return None
            if state == "half-open" and not self._probing:
                self._probing = True
                return None
            return self._wait()

    def succeeded(self) -> None:
        with self._lock:
            self._failures, self._opened_at, self._probing = 0, None, False

    def failed(self) -> None:
        with self._lock:
            self._failures += 1
            if self._probing or self._failures >= self._policy.failures:
                self._opened_at, self._probing = self._clock(), False

    def _state(self) -> State:
        if self._opened_at is None:
            return "closed"
        return "half-open" if self._wait() <= 0 else "open"

    def _wait(self) -> float:
        assert self._opened_at is not None
        return max(self._opened_at + self._policy.recovery_seconds - self._clock(), 0.0)


@dataclass(frozen=True)
class StaleCache:
    """How many recall answers to keep (least recently used go first) and how old an answer may
    be when it stands in for one memledger cannot give now."""

    entries: int = 256
    max_age_seconds: float = 600.0


class RecallCache:
    """The last answer of each distinct search or context request (the position a client
    waits for is not part of the request's identity: the cache answers when the server
    cannot, whatever the client had written)."""

    def __init__(self, config: StaleCache, clock: Clock) -> None:
        self._config, self._clock = config, clock
        self._lock = threading.Lock()
        self._answers: OrderedDict[Hashable, tuple[float, object]] = OrderedDict()

    def put(self, key: Hashable, answer: object) -> None:
        with self._lock:
            self._answers[key] = (self._clock(), answer)
            self._answers.move_to_end(key)
            while len(self._answers) > self._config.entries:
                self._answers.popitem(last=False)

    def get(self, key: Hashable) -> tuple[object, float] | None:
        """The answer kept for ``key`` and its age in seconds, if young enough."""
        with self._lock:
            found = self._answers.get(key)
        if found is None:
            return None
        age = self._clock() - found[0]
        return (found[1], age) if age <= self._config.max_age_seconds else None


_VOLATILE = frozenset({"min_position", "wait_ms"})


def recall_key(path: str, body: object) -> Hashable:
    """A request's identity for the cache: its path and body, without read-your-writes."""
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in _VOLATILE}
    return path, orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
