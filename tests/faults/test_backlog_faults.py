"""Faults that land where they hurt: with thousands of events in flight behind a consumer,
in the middle of a rebuild and in the middle of an erasure, under a mixed load (assert, revise,
retract, supersede, batches of 100, session messages, feedback, erasures), with the local
embedder the package ships and API keys required. Afterwards every acknowledged write is in
every read model exactly once (the current state, the bi-temporal table, the vector index),
no refused write is anywhere, no erased subject's plaintext is in any tuple or file scanned,
and ``memledger verify`` passes.

The full run (``make test-faults``) strikes every consumer, a rebuild and an erasure; the
reduced one (in ``make test``) the projector behind a backlog and an erasure."""

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faults import reliability
from tests.faults.backlog import BacklogPlan, Struck, caught_up, run_backlog_faults
from tests.faults.checker import Observed, judge
from tests.faults.cluster import Cluster
from tests.faults.mixed import Ledger, MixedLoad
from tests.faults.observe import observe
from tests.faults.scenario import run_verify

FULL = ("relay", "projector", "query", "vectors", "enricher", "rebuild", "erasure")
SEED_ENV = "MEMLEDGER_FAULTS_SEED"
WARMUP_ACKS = 30


@dataclass
class Run:
    ledger: Ledger
    observed: Observed
    struck: list[Struck]
    settled: bool
    verify_code: int
    verified: dict[str, Any]
    stored_key: Any


def _seed() -> int:
    return int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1_000_000))


def _run(home: Path, plan: BacklogPlan, workers: int, rate: float) -> Run:
    cluster = Cluster(home, embedder="local", auth=True)
    try:
        cluster.start()
        load = MixedLoad(cluster.ingest_url, cluster.headers(), workers, rate)
        load.start()
        try:
            _until(lambda: len(load.ledger.acked) >= WARMUP_ACKS, plan.recovery_timeout)
            struck = run_backlog_faults(cluster, load, plan)
        finally:
            ledger = load.stop()
        settled = caught_up(cluster, load, ledger.last_position(), plan.recovery_timeout)
        code, verified = run_verify(cluster)
        cluster.stop_services()
        observed = observe(cluster, ledger)
    finally:
        cluster.close()
    return Run(ledger, observed, struck, settled is not None, code, verified, cluster.stored_key)


def _until(check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "no load acknowledged"
        time.sleep(0.1)


def _check(run: Run, name: str, plan: BacklogPlan, tables: list[str]) -> None:
    made = reliability.rows(run.ledger, run.observed, run.struck)
    table = reliability.markdown(made)
    tables.append(f"{name} (seed {plan.seed})\n{table}")
    reliability.write_section(name, _section(run, plan, table))
    verdict = judge(run.ledger, run.observed, run.stored_key)
    assert verdict.problems() == []
    assert run.ledger.unresolved == []
    assert run.settled, "the read models never caught up after the load"
    assert run.verify_code == 0, run.verified
    assert [s.fault for s in run.struck if s.recovery_seconds is None] == []
    assert all(row.acked for row in made), "every fault window had acknowledged writes"
    assert run.ledger.erased, "the load erased subjects"


def _section(run: Run, plan: BacklogPlan, table: str) -> str:
    ops: dict[str, int] = {}
    for write in run.ledger.acked:
        ops[write.op] = ops.get(write.op, 0) + (len(write.effects) if write.op == "batch" else 1)
    return (f"{reliability.run_of()}, seed {plan.seed}, backlog {plan.backlog} events per fault; "
            f"acknowledged by kind: {', '.join(f'{k} {v}' for k, v in sorted(ops.items()))}; "
            f"refused {len(run.ledger.refused)}; erased subjects {len(run.ledger.erased)}; "
            f"client retries {run.ledger.retries}; `memledger verify`: exit "
            f"{run.verify_code}.\n\n{table}")


@pytest.mark.timeout(900)
def test_a_projector_killed_behind_a_backlog_and_an_interrupted_erasure_lose_nothing(
        tmp_path: Path, results_tables: list[str]) -> None:
    plan = BacklogPlan(faults=("projector", "erasure"), backlog=400, seed=_seed())
    _check(_run(tmp_path / "home", plan, workers=2, rate=2.0), "reduced", plan,
           results_tables)


@pytest.mark.faults
@pytest.mark.timeout(5_400)
def test_every_consumer_killed_behind_thousands_of_events_loses_and_repeats_nothing(
        tmp_path: Path, results_tables: list[str]) -> None:
    plan = BacklogPlan(faults=FULL, backlog=2_000, seed=_seed())
    _check(_run(tmp_path / "home", plan, workers=3, rate=3.0), "backlog-faults", plan,
           results_tables)
