"""Search without its embedder: the query's embedding waited for no longer than a deadline.

The query service embeds each search's query itself; a model that fails or hangs would make
every search fail or hang with it. ``BoundedEmbedding`` answers ``None`` instead once the
embedder raised or the deadline passed, and remembers why, so the search ranks by keywords
alone (``semantic.search``) and its answer says so (``degraded: ["embedder"]``, ``ranking:
"keyword"``).
"""

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Literal

EMBEDDER = "embedder"
"""The part a degraded answer names when the query's embedding was missing."""

Ranking = Literal["hybrid", "keyword", "dense"]
_log = logging.getLogger("memledger.query")


@dataclass
class BoundedEmbedding:
    """The query's embedding under way (``future``), to be answered by ``deadline`` (a
    ``monotonic`` reading): called, it returns the vector, or ``None`` with ``failure`` set
    ("timeout" or the error) if the embedder raised or is late. Calling it again answers the
    same without waiting again."""

    future: "Future[Sequence[float] | None]"
    deadline: float
    monotonic: Callable[[], float] = time.monotonic
    failure: str | None = field(default=None, init=False)
    _done: bool = field(default=False, init=False)
    _vector: Sequence[float] | None = field(default=None, init=False)

    def __call__(self) -> Sequence[float] | None:
        if not self._done:
            self._done = True
            self._vector = self._wait()
        return self._vector

    def _wait(self) -> Sequence[float] | None:
        try:
            return self.future.result(timeout=max(0.0, self.deadline - self.monotonic()))
        except FutureTimeout:
            self.failure = "timeout"
        except Exception as error:  # any failure of the model: keywords still answer
            self.failure = f"{type(error).__name__}: {error}"
        _log.warning("query embedding unavailable (%s): ranking by keywords alone",
                     self.failure)
        return None

    @property
    def ready(self) -> bool:
        """Whether calling answers at once: the embedding is done (or failed), or was waited
        for already."""
        return self._done or self.future.done()

    @property
    def degraded(self) -> list[str]:
        """What the answer lacked: ``["embedder"]`` once the embedding failed, else none."""
        return [EMBEDDER] if self.failure is not None else []


def ranking(dense_weight: float, keyword_weight: float, degraded: Sequence[str]) -> Ranking:
    """The ranking a search used: keyword alone when the embedder was missing (or dense search
    was weighted off), dense alone when keywords were, else both."""
    if EMBEDDER in degraded or dense_weight <= 0:
        return "keyword"
    return "dense" if keyword_weight <= 0 else "hybrid"
