"""Failover of a clustered deployment under load: a 3-node JetStream cluster (streams R3), two
ingest replicas and two query replicas (the deployment ``memledger cluster up`` runs), clients
spread over the replicas, while writes, reads of items, as-of reads and searches
run. One NATS node is killed (the events stream's leader), an ingest replica and a query
replica are killed, and the relay is killed while a NATS node is down. Afterwards every
acknowledged write is everywhere exactly once, ``memledger verify`` passes, no read answered
a wrong result and clients saw retryable errors only; how long each read path went
unanswered is reported, not asserted."""

import json
from pathlib import Path

import pytest

from tests.faults import report
from tests.faults.audit import read_copies
from tests.faults.cluster import Cluster, Topology
from tests.faults.load import Load
from tests.faults.reads import Reads
from tests.faults.scenario import Plan, run_faults, run_verify, settle

TOPOLOGY = Topology(nats_nodes=3, ingest_replicas=2, query_replicas=2)
FAULTS = ("nats-leader", "ingest-replica", "query-replica", "relay-node-down")


def _failover(home: Path, plan: Plan, workers: int, rate: float, tables: list[str]) -> None:
    cluster = Cluster(home, TOPOLOGY)
    try:
        cluster.start()
        load = Load(cluster.ingest_urls, workers, rate)
        load.start()
        reads = Reads(cluster.query_urls, load.outcomes)
        reads.start()
        try:
            recoveries = run_faults(cluster, load, plan)
        finally:
            outcomes = load.stop()
            read_outcomes = reads.stop()
        settle(cluster, load)
        code, verified = run_verify(cluster)
        cluster.stop_services()
        items = {a.item_id for a in outcomes.acked} | {r.item_id for r in outcomes.refused}
        copies = read_copies(cluster.dsn, cluster.nats_url, cluster.home, items - {""},
                             cluster.stored_key)
    finally:
        cluster.close()
    made = report.rows(outcomes, copies, recoveries)
    tables.append(report.table(made) + "\nread paths unanswered: " + json.dumps(
        read_outcomes.report()))
    assert report.problems(outcomes, copies, recoveries) == []
    assert code == 0, verified
    assert read_outcomes.wrong == []
    assert read_outcomes.not_retryable == []
    assert all(r.reads for r in read_outcomes.paths.values()), read_outcomes.report()


def test_a_cluster_loses_a_nats_node_an_ingest_and_a_query_replica_and_the_relay_under_load(
        tmp_path: Path, results_tables: list[str]) -> None:
    plan = Plan(faults=FAULTS, warmup_acks=15)
    _failover(tmp_path / "home", plan, workers=2, rate=4.0, tables=results_tables)


@pytest.mark.faults
@pytest.mark.timeout(3_600)
def test_a_cluster_survives_each_failover_twice_under_a_heavier_load(
        tmp_path: Path, results_tables: list[str]) -> None:
    plan = Plan(faults=FAULTS + FAULTS)
    _failover(tmp_path / "home", plan, workers=4, rate=10.0, tables=results_tables)
