"""Faults injected one after another under a running load, and how long each took to recover
from: until a write sent after the fault was acknowledged, until each read model had that write
(the PostgreSQL one through a read of the item, the vector index through a search, both naming
its position) and until the enricher had embedded it."""

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import psycopg

from tests.faults.cluster import Cluster
from tests.faults.cluster_faults import CLUSTER_FAULTS
from tests.faults.load import Acked, Load
from tests.support import eventually_sync, holds_sync, probe


@dataclass(frozen=True)
class Plan:
    faults: tuple[str, ...]
    pause_seconds: float = 35.0
    """How long nats-server stays stopped: past the ack wait of the projector (15 s), the
    vector projector and the intake consumer (30 s each)."""
    warmup_acks: int = 40
    """Acknowledgements to see before each fault, so it strikes a loaded system."""
    recovery_timeout: float = 300.0


@dataclass(frozen=True)
class Recovery:
    fault: str
    injected_at: float
    """``time.monotonic()``."""
    wall_clock: str
    """When, in UTC (to find it in the services' logs)."""
    first_ack_seconds: float | None
    postgres_seconds: float | None
    vectors_seconds: float | None
    enriched_seconds: float | None


def _planless(fault: Callable[[Cluster, Load], None]) -> Callable[[Cluster, Load, Plan], None]:
    return lambda cluster, load, _: fault(cluster, load)


FAULTS: dict[str, tuple[str, Callable[[Cluster, Load, Plan], None]]] = {
    "ingest": ("kill -9 ingest", lambda c, _l, _p: c.kill("ingest")),
    "relay": ("kill -9 relay", lambda c, _l, _p: c.kill("relay")),
    "projector": ("kill -9 projector", lambda c, _l, _p: c.kill("projector")),
    "enricher": ("kill -9 enricher", lambda c, _l, _p: c.kill("enricher")),
    "query": ("kill -9 query", lambda c, _l, _p: c.kill("query")),
    "vectors": ("kill -9 vectors (the vector projector)", lambda c, _l, _p: c.kill("vectors")),
    "vector-index": ("kill -9 the vector index process", lambda c, _l, _p: c.kill_child(
        "vectors", "memledger_platform.vectorindex.process")),
    "nats": ("kill -9 nats-server", lambda c, _l, _p: c.kill_engine("nats")),
    "postgres": ("kill -9 postgres", lambda c, _l, _p: c.kill_engine("postgres")),
    "nats-pause": ("SIGSTOP nats-server", lambda c, _l, p: _pause_nats(c, p.pause_seconds)),
    **{name: (label, _planless(fault)) for name, (label, fault) in CLUSTER_FAULTS.items()},
}
"""Each injects its fault and returns once the thing it hit is being restarted."""


def _pause_nats(cluster: Cluster, seconds: float) -> None:
    with cluster.paused("nats"):
        time.sleep(seconds)  # the fault itself: nats-server stays stopped this long


def run_faults(cluster: Cluster, load: Load, plan: Plan) -> list[Recovery]:
    recoveries = []
    for fault in plan.faults:
        _steady(cluster, load, plan)
        started, wall_clock = time.monotonic(), datetime.now(UTC).isoformat()
        FAULTS[fault][1](cluster, load, plan)
        recoveries.append(_recovery(cluster, load, fault, started, wall_clock,
                                    plan.recovery_timeout))
    _steady(cluster, load, plan)
    return recoveries


def _steady(cluster: Cluster, load: Load, plan: Plan) -> None:
    """Wait for the read models and the enricher to be caught up, then for some more load."""
    last = _last_ack(load)
    if last is not None:
        _until(lambda: _enriched(cluster, last.item_id, last.position) and _caught_up(
            cluster, last), plan.recovery_timeout, "caught up before the next fault", cluster)
    since = time.monotonic()
    _until(lambda: len(load.outcomes.acks_after(since)) >= plan.warmup_acks,
           plan.recovery_timeout, "load acknowledged before the next fault", cluster)


def _recovery(cluster: Cluster, load: Load, fault: str, started: float, wall_clock: str,
              timeout: float) -> Recovery:
    acks = _until(lambda: load.outcomes.sent_after(started), timeout, "", cluster)
    if not acks:
        return Recovery(fault, started, wall_clock, None, None, None, None)
    first = min(acks, key=lambda a: a.at)
    reached = _reach({"postgres": lambda: _in_postgres(cluster, first),
                      "vectors": lambda: _in_vectors(cluster, first.position),
                      "enriched": lambda: _enriched(cluster, first.item_id, first.position)},
                     timeout)
    return Recovery(fault, started, wall_clock, first.at - started,
                    *(_since(reached[k], started) for k in ("postgres", "vectors", "enriched")))


def _reach(checks: dict[str, Callable[[], bool]], timeout: float) -> dict[str, float | None]:
    """When (``time.monotonic()``) each check first passed; ``None`` for one that did not
    within ``timeout``."""
    reached: dict[str, float | None] = dict.fromkeys(checks)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and None in reached.values():
        for name, check in checks.items():
            if reached[name] is None and check():
                reached[name] = time.monotonic()
        time.sleep(0.05)  # a measurement, not a wait: when each check first holds
    return reached


def _since(reached: float | None, started: float) -> float | None:
    return None if reached is None else reached - started


def _until(check: Callable[[], Any], timeout: float, what: str, cluster: Cluster) -> Any:
    """Poll ``check`` until it returns something true; return that, or (after ``timeout``)
    ``None``, or raise if ``what`` names something that must happen."""
    try:
        return eventually_sync(holds_sync(check), timeout)
    except AssertionError:
        if what:
            raise AssertionError(f"not {what} in {timeout:.0f}s\n{cluster.logs()}") from None
        return None


def _last_ack(load: Load) -> Acked | None:
    with load.outcomes.lock:
        return max(load.outcomes.acked, key=lambda a: a.position, default=None)


def _caught_up(cluster: Cluster, acked: Acked) -> bool:
    return _in_postgres(cluster, acked) and _in_vectors(cluster, acked.position)


def _in_postgres(cluster: Cluster, acked: Acked) -> bool:
    """Whether the PostgreSQL read model has the write (a read of its item naming its position:
    the query service waits up to a second for it)."""
    return _answers(lambda: probe().get(
        f"{cluster.query_url}/v1/spaces/{acked.space}/items/{acked.item_id}",
        params={"min_position": acked.position, "wait_ms": 1_000}, timeout=10))


def _in_vectors(cluster: Cluster, position: int) -> bool:
    """Whether the vector index has reached ``position`` (a search naming it)."""
    return _answers(lambda: probe().post(f"{cluster.query_url}/v1/search", json={
        "query": "probe", "spaces": ["load-0"], "k": 1, "min_position": position,
        "wait_ms": 1_000}, timeout=10))


def _answers(request: Callable[[], httpx.Response]) -> bool:
    try:
        return request().status_code == 200
    except httpx.HTTPError:
        return False


def _enriched(cluster: Cluster, item_id: str, position: int) -> bool:
    """Whether the enricher's ``memory.embedded`` of the item is in the event store."""
    try:
        with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(
                "SELECT 1 FROM memledger_events WHERE notification_id > %s AND topic = "
                "'memory.embedded' AND convert_from(state, 'UTF8')::jsonb #>> "
                "'{payload,item_id}' = %s LIMIT 1", (position, item_id)).fetchone() is not None
    except psycopg.Error:
        return False


def settle(cluster: Cluster, load: Load, timeout: float = 300.0) -> None:
    """After the load has stopped: wait until the relay, the read models and the enricher have
    everything (the enricher's own writes included), the same position twice in a row."""
    acked = {a.item_id for a in load.outcomes.acked}
    seen = -1

    def done() -> bool:
        nonlocal seen
        position = _committed(cluster)
        if position is None or _embedded_items(cluster, acked) < len(acked):
            return False
        if _relay_lag(cluster) != 0 or (_projected(cluster) or 0) < position:
            return False
        if not _in_vectors(cluster, position):
            return False
        stable, seen = position == seen, position
        return stable

    _until(done, timeout, "settled after the load", cluster)


def _committed(cluster: Cluster) -> int | None:
    try:
        return int(probe().get(f"{cluster.ingest_url}/health", timeout=10).json()["position"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def _projected(cluster: Cluster) -> int | None:
    """The PostgreSQL read model's position."""
    try:
        return int(probe().get(f"{cluster.query_url}/v1/query/health",
                             timeout=10).json()["projected_position"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def _relay_lag(cluster: Cluster) -> int | None:
    try:
        lag = probe().get(f"{cluster.ingest_url}/health", timeout=10).json()["relay_lag"]
    except (httpx.HTTPError, ValueError, KeyError):
        return None
    return None if lag is None else int(lag)


def _embedded_items(cluster: Cluster, items: set[str]) -> int:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT DISTINCT convert_from(state, 'UTF8')::jsonb #>> '{payload,item_id}' "
            "FROM memledger_events WHERE topic = 'memory.embedded'").fetchall()
    return len(items & {str(r[0]) for r in rows})


def run_verify(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    """``memledger verify --json`` against the running deployment: its exit code and report."""
    done = subprocess.run(
        [sys.executable, "-m", "memledger_cli", "verify", "--json", "--wait", "120",
         "--query-url", cluster.query_url], env=cluster.env(), capture_output=True,
        timeout=600, check=False)
    try:
        report: dict[str, Any] = orjson.loads(done.stdout)
    except orjson.JSONDecodeError:
        report = {"stdout": done.stdout.decode(errors="replace"),
                  "stderr": done.stderr.decode(errors="replace")[-3000:]}
    return done.returncode, report
