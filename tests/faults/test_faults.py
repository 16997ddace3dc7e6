"""Faults injected into real processes under a sustained write load: afterwards every
acknowledged write is in the event store, the events stream and every read model exactly once,
no refused write is anywhere, and ``memledger verify`` passes.

The full suite (``make test-faults``) kills -9, one after another, every service and both
engines, and stops nats-server past the consumers' ack wait; the reduced one (in ``make test``)
kills ingest, the relay, the vector index's process and PostgreSQL under a shorter load (a
PostgreSQL restart once ended the vector projector's task for good)."""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.faults import reliability, report
from tests.faults.audit import Copies, read_copies
from tests.faults.cluster import Cluster
from tests.faults.load import Load, Outcomes
from tests.faults.scenario import Plan, Recovery, run_faults, run_verify, settle

FULL = ("relay", "projector", "enricher", "query", "vectors", "vector-index", "ingest", "nats",
        "postgres", "nats-pause")


@dataclass
class Run:
    outcomes: Outcomes
    recoveries: list[Recovery]
    copies: Copies
    verify_code: int
    verified: dict[str, Any]
    exits: dict[str, list[int]]
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds spent starting, under faults, settling, verifying, auditing."""


def _run(home: Path, plan: Plan, workers: int, rate: float) -> Run:
    cluster, phases = Cluster(home), _Phases()
    try:
        cluster.start()
        load = Load(cluster.ingest_url, workers, rate)
        load.start()
        phases.done("start")
        try:
            recoveries = run_faults(cluster, load, plan)
        finally:
            outcomes = load.stop()
        phases.done("faults")
        settle(cluster, load)
        phases.done("settle")
        code, verified = run_verify(cluster)
        phases.done("verify")
        cluster.stop_services()
        exits = {s.name: s.exits for s in cluster.services.values()}
        items = {a.item_id for a in outcomes.acked} | {r.item_id for r in outcomes.refused}
        copies = read_copies(cluster.dsn, cluster.nats_url, cluster.home, items - {""},
                             cluster.stored_key)
        phases.done("audit")
    finally:
        cluster.close()
    return Run(outcomes, recoveries, copies, code, verified, exits, phases.seconds)


class _Phases:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name], self._last = round(now - self._last, 1), now


def _check(run: Run, tables: list[str], section: str = "") -> None:
    made = report.rows(run.outcomes, run.copies, run.recoveries)
    tables.append(report.table(made))
    if section:
        reliability.write_section(section, f"{reliability.run_of()} (`make test-faults`)."
                                  f"\n\n{report.markdown(made)}")
    report.write_json(made, {"verify": {"exit_code": run.verify_code, **run.verified},
                             "unresolved": len(run.outcomes.unresolved),
                             "client_retries": run.outcomes.retries,
                             "service_exits": run.exits, "phases_seconds": run.phases,
                             "events_not_in_postgres_model": sorted(
                                 run.copies.not_projected().items())})
    assert report.problems(run.outcomes, run.copies, run.recoveries) == []
    assert run.verify_code == 0, run.verified
    assert all(row.acked for row in made), "every fault window had acknowledged writes"


def test_killed_services_and_postgres_neither_lose_nor_repeat_an_acknowledged_write(
        tmp_path: Path, results_tables: list[str]) -> None:
    plan = Plan(faults=("ingest", "relay", "vector-index", "postgres"), warmup_acks=20)
    _check(_run(tmp_path / "home", plan, workers=3, rate=5.0), results_tables)


@pytest.mark.faults
@pytest.mark.timeout(3_600)
def test_every_acknowledged_write_survives_every_fault_exactly_once(
        tmp_path: Path, results_tables: list[str]) -> None:
    _check(_run(tmp_path / "home", Plan(faults=FULL), workers=4, rate=10.0), results_tables,
           "caught-up-faults")
