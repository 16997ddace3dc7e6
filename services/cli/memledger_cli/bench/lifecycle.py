"""``memledger bench lifecycle``: the resident memory of the lifecycle scheduler's state as
the items grow, beside the bare data it is decided from.

Each size runs in a fresh interpreter (so one size's heap does not carry into the next). The
path: a synthetic log (items asserted with content and an embedding, as the scheduler receives
them once opened; a few spaces with retention and decay, one small space that consolidates
and forms themes, some feedback) folded by ``LifecycleFold`` and ``FormingFold``, then one
tick's decisions (archives, consolidations, themes, learned importance). Reported per size:
the RSS the fold added (``fold_mb``), the RSS after the tick and the process's peak, and its
peak before the tick (``fold_peak_rss_mb``): the tick takes the archives a chunk at a time and
the other decisions one by one, as the scheduler does. The raw
baseline, in its own interpreter: the same ids and vectors held as compactly as they can be
(a list of ids and one float32 matrix), which is what holding every item and vector costs at
the least.
"""

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import numpy as np

from memledger_cli.bench import corpus
from memledger_cli.bench.common import Scenario, emit
from memledger_platform.events import Event
from memledger_platform.settings import Settings
from memledger_schemas.event_types import EventType

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPACES = ("alpha", "beta", "gamma")
SMALL = "notes"
"""The space that consolidates and forms themes: every ``_SMALL_EVERY``-th item."""
_SMALL_EVERY = 1_000
_FEEDBACK_EVERY = 100
_MB = 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", default="10000,100000",
                        help="comma-separated item counts, each measured in its own process")
    parser.add_argument("--dims", type=int, default=384)


def run(args: argparse.Namespace, settings: Settings) -> int:
    sizes = [int(n) for n in str(args.items).split(",") if n.strip()]
    result: dict[str, Any] = {"scenario": "lifecycle", "dims": args.dims}
    for n in sizes:
        result[str(n)] = {"fold": _child("fold", n, args.dims),
                          "raw": _child("raw", n, args.dims)}
    emit(result, args.json)
    return 0


def _child(what: str, n: int, dims: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "memledger_cli.bench.lifecycle", what,
                           str(n), str(dims)], check=True, capture_output=True, text=True)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / _MB


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def events(n: int, dims: int) -> Iterator[Event]:
    """The synthetic log: policies, then each item asserted and embedded, some feedback."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((4, dims))
    bases = corpus.base_sentences(min(n, 10_000))
    position = 0

    def event(event_type: str, space: str, **payload: Any) -> Event:
        nonlocal position
        position += 1
        at = T0 + timedelta(seconds=position)
        return Event(position, at, event_type, str(UUID(int=position)), "acme", space,
                     "bench", None, None, None, None, payload)

    for space in SPACES:
        yield event(EventType.SPACE_POLICY_SET, space, policy_version=1, forget_below=0.05,
                    decay_half_life_days={"observation": 30.0}, retention_days={"event": 90})
    yield event(EventType.SPACE_POLICY_SET, SMALL, policy_version=1, consolidation="suggest",
                merge_cosine=0.9, theme_cosine=0.3)
    for i in range(n):
        item = str(UUID(int=(1 << 64) + i))
        space = SMALL if i % _SMALL_EVERY == 0 else SPACES[i % len(SPACES)]
        yield event(EventType.MEMORY_ASSERTED, space, item_id=item, kind=("observation", "event",
                    "fact")[i % 3], content=corpus.item_text(i, bases[i % len(bases)]),
                    importance=round(float(rng.random()), 3), confidence=1.0)
        vector = rng.standard_normal(dims)
        if space == SMALL:  # near one of a few centres: themes and near-duplicates to find
            vector = centres[(i // _SMALL_EVERY) % len(centres)] + 0.3 * vector
        yield event(EventType.MEMORY_EMBEDDED, space, item_id=item, item_version=1, model="m",
                    dims=dims, vector=vector.tolist())
        if i % _FEEDBACK_EVERY == 0:
            yield event(EventType.FEEDBACK_RECORDED, space, feedback_id=str(UUID(int=i)),
                        item_id=item, signal="used")


def measure_fold(n: int, dims: int) -> dict[str, Any]:
    from memledger_lifecycle.fold import LifecycleFold
    from memledger_lifecycle.forming_fold import FormingFold

    lifecycle, forming = LifecycleFold(), FormingFold()
    gc.collect()
    before, started = _rss_mb(), time.perf_counter()
    for e in events(n, dims):
        lifecycle.apply(e)
        forming.apply(e)
    gc.collect()
    folded, fold_s, fold_peak = _rss_mb(), time.perf_counter() - started, _peak_mb()
    started = time.perf_counter()
    # As the scheduler's tick takes them: archives a chunk at a time, the rest one by one.
    decided = {"archives": sum(len(chunk) for chunk in lifecycle.archive_chunks(
                   T0 + timedelta(days=120))),
               "consolidations": len(lifecycle.take_consolidations()),
               "themes": sum(1 for _ in forming.themes(lifecycle)),
               "importance": sum(1 for _ in forming.importance(lifecycle))}
    tick_s = time.perf_counter() - started
    gc.collect()
    return {"fold_mb": round(folded - before, 1), "bytes_per_item": round(
        (folded - before) * _MB / n), "after_tick_mb": round(_rss_mb() - before, 1),
        "peak_rss_mb": round(_peak_mb(), 1), "fold_peak_rss_mb": round(fold_peak, 1),
        "base_rss_mb": round(before, 1),
        "fold_s": round(fold_s, 2), "tick_s": round(tick_s, 2), "decided": decided}


def measure_raw(n: int, dims: int) -> dict[str, Any]:
    gc.collect()
    before = _rss_mb()
    ids = [str(UUID(int=(1 << 64) + i)) for i in range(n)]
    matrix = np.random.default_rng(7).standard_normal((n, dims), dtype=np.float32)
    gc.collect()
    held = _rss_mb() - before
    return {"held_mb": round(held, 1), "bytes_per_item": round(held * _MB / n),
            "items": len(ids), "matrix_mb": round(matrix.nbytes / _MB, 1)}


SCENARIO = Scenario("lifecycle", "resident memory of the lifecycle scheduler's fold as items "
                    "grow, beside the bare ids and float32 vectors", add_arguments, run)

if __name__ == "__main__":
    what, count, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps((measure_fold if what == "fold" else measure_raw)(count, width)))
