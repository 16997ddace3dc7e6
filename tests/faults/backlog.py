"""Faults that land while work is in flight, under a running mixed load: a consumer is stopped
(SIGSTOP) until thousands of events wait for it, let go, and killed -9 once it has worked
through a random part of them (the rest still in flight); ``memledger rebuild`` is killed -9
at a random moment and run again; an erasure is asked while the projector and the query
service (the vector projector) are killed -9.

Each fault reports how long recovery took: until the read models (the PostgreSQL one and the
vector index) held every write acknowledged before the kill (and, for the enricher, until it
had embedded the last memory of them). Reported, never asserted. The load goes on meanwhile,
so the enricher (slower than the read models with the local embedder) may stay behind until
the load stops."""

import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from tests.faults.cluster import Cluster
from tests.faults.mixed import Effect, MixedLoad
from tests.faults.scenario import _enriched
from tests.support import probe


@dataclass(frozen=True)
class BacklogPlan:
    faults: tuple[str, ...]
    backlog: int = 2_000
    """Events to let pile up behind a stopped consumer before it is let go."""
    seed: int = 0
    recovery_timeout: float = 600.0


@dataclass(frozen=True)
class Struck:
    fault: str
    injected_at: float
    """``time.monotonic()``."""
    wall_clock: str
    behind: int
    """Events acknowledged and not yet in the read models when the fault struck."""
    recovery_seconds: float | None


Fault = Callable[[Cluster, MixedLoad, BacklogPlan, random.Random], int]
"""Injects a fault; returns how far the read models were behind when it struck."""


def _behind_then_kill(service: str, child: str = "") -> Fault:
    """Stop ``service`` until ``plan.backlog`` events wait for it, let it go, and kill -9 it
    (or its child process running ``child``) once it has worked through a random part of
    them (a tenth to nine tenths): the rest is in flight."""
    def fault(cluster: Cluster, load: MixedLoad, plan: BacklogPlan, rng: random.Random) -> int:
        cluster.suspend(service)
        try:
            made = load.burst(load.side(), batches=max(1, plan.backlog // 100))
        finally:
            cluster.resume(service)
        midway = made[int(len(made) * rng.uniform(0.1, 0.9))]
        _until_reached(PROGRESS[service](cluster, midway), plan.recovery_timeout)
        if child:
            cluster.kill_child(service, child)
        else:
            cluster.kill(service)
        return made[-1].position - midway.position
    return fault


Progress = Callable[[Cluster, Effect], Callable[[], bool]]
PROGRESS: dict[str, Progress] = {
    "relay": lambda c, e: lambda: _relayed(c) >= e.position,
    "projector": lambda c, e: lambda: _projected(c) >= e.position,
    "query": lambda c, e: lambda: _searchable(c, e.position, wait_ms=0),
    "enricher": lambda c, e: lambda: _enriched(c, e.item_id, e.position),
}
"""For each service: whether it has got as far as a given event of the backlog."""


def _until_reached(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)


def _rebuild(cluster: Cluster, load: MixedLoad, plan: BacklogPlan, rng: random.Random) -> int:
    """``memledger rebuild postgres`` killed -9 a random moment in, then run to the end."""
    load.burst(load.side(), batches=max(1, plan.backlog // 100))
    started = _operator(cluster, "rebuild", "postgres")
    time.sleep(rng.uniform(0.5, 4.0))  # the fault itself: a random moment of the rebuild
    behind = _lag(cluster, load)
    started.kill()
    started.wait()
    again = _operator(cluster, "rebuild", "postgres")
    assert again.wait(timeout=plan.recovery_timeout) == 0, cluster.logs()
    return behind


def _erasure(cluster: Cluster, load: MixedLoad, plan: BacklogPlan, rng: random.Random) -> int:
    """An erasure asked while a backlog is in flight; the projector and the query service are
    killed -9 a random moment after it is sent."""
    worker = load.side()
    load.burst(worker, batches=max(1, plan.backlog // 200))
    erasing = threading.Thread(target=load.erase_subject, args=(worker, 5), daemon=True)
    erasing.start()
    time.sleep(rng.uniform(0.5, 3.0))  # the fault itself: a random moment of the erasure
    behind = _lag(cluster, load)
    cluster.kill("projector")
    cluster.kill("query")
    erasing.join(timeout=plan.recovery_timeout)
    return behind


FAULTS: dict[str, tuple[str, Fault]] = {
    "relay": ("kill -9 relay, backlog in flight", _behind_then_kill("relay")),
    "projector": ("kill -9 projector, backlog in flight", _behind_then_kill("projector")),
    "query": ("kill -9 query (vector projector), backlog", _behind_then_kill("query")),
    "vectors": ("kill -9 vector index process, backlog", _behind_then_kill(
        "query", "memledger_platform.vectorindex.process")),  # the query's progress
    "enricher": ("kill -9 enricher, backlog in flight", _behind_then_kill("enricher")),
    "rebuild": ("kill -9 memledger rebuild mid-way", _rebuild),
    "erasure": ("kill -9 projector+query in an erasure", _erasure),
}


def run_backlog_faults(cluster: Cluster, load: MixedLoad, plan: BacklogPlan) -> list[Struck]:
    rng, struck = random.Random(plan.seed), []
    for fault in plan.faults:
        started, wall_clock = time.monotonic(), datetime.now(UTC).isoformat(timespec="seconds")
        behind = FAULTS[fault][1](cluster, load, plan, rng)
        target = load.ledger.last_position()
        recovered = caught_up(cluster, load, target, plan.recovery_timeout,
                              enriched=fault == "enricher")
        struck.append(Struck(fault, started, wall_clock, behind,
                             None if recovered is None else recovered - started))
    return struck


def caught_up(cluster: Cluster, load: MixedLoad, position: int, timeout: float, *,
              enriched: bool = False) -> float | None:
    """When (``time.monotonic()``) the read models had reached ``position`` (and, if
    ``enriched``, the last memory acknowledged by then was embedded); ``None`` if not within
    ``timeout``."""
    last = max(((e.item_id, e.position) for w in load.ledger.acks_after(float("-inf"))
                for e in w.effects if w.op in ("assert", "batch") and e.position <= position),
               key=lambda pair: pair[1], default=None) if enriched else None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _reached(cluster, position) and (last is None or _enriched(cluster, *last)):
            return time.monotonic()
        time.sleep(0.1)
    return None


def _reached(cluster: Cluster, position: int) -> bool:
    """Whether the PostgreSQL read model and the vector index have reached ``position``."""
    return _projected(cluster) >= position and _searchable(cluster, position, wait_ms=1_000)


def _projected(cluster: Cluster) -> int:
    """The PostgreSQL read model's position (-1: no answer)."""
    try:
        return int(probe().get(f"{cluster.query_url}/v1/query/health", headers=cluster.headers(),
                             timeout=10).json()["projected_position"])
    except (httpx.HTTPError, ValueError, KeyError):
        return -1


def _relayed(cluster: Cluster) -> int:
    """The position the relay has published up to (-1: no answer)."""
    try:
        health = probe().get(f"{cluster.ingest_url}/health", timeout=10).json()
        return int(health["position"]) - int(health["relay_lag"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return -1


def _searchable(cluster: Cluster, position: int, wait_ms: int) -> bool:
    """Whether the vector index has reached ``position`` (a search naming it answers)."""
    try:
        return probe().post(f"{cluster.query_url}/v1/search", headers=cluster.headers(), json={
            "query": "probe", "spaces": ["mixed-0"], "k": 1, "min_position": position,
            "wait_ms": wait_ms}, timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def _lag(cluster: Cluster, load: MixedLoad) -> int:
    """Acknowledged events not yet in the PostgreSQL read model."""
    projected = _projected(cluster)
    return -1 if projected < 0 else max(0, load.ledger.last_position() - projected)


def _operator(cluster: Cluster, *command: str) -> "subprocess.Popen[bytes]":
    log = (cluster.home / "logs" / f"{command[0]}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "memledger_cli", *command],
                            env=cluster.env(), stdout=log, stderr=subprocess.STDOUT)
