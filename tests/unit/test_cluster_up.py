"""``memledger cluster up``'s options: replica counts within bounds, an odd NATS cluster; its
services started as ``memledger up`` starts them (the enricher niced)."""

import shutil
from pathlib import Path
from typing import Any

import pytest

from memledger_cli import cluster
from memledger_cli.main import parser


def test_the_defaults_are_two_ingest_two_query_and_three_nats_nodes() -> None:
    args = parser().parse_args(["cluster", "up"])

    assert (args.ingest, args.query, args.nats_nodes) == (2, 2, 3)


def test_replica_counts_are_taken() -> None:
    args = parser().parse_args(["cluster", "up", "--ingest", "3", "--query", "1",
                                "--nats-nodes", "5"])

    assert (args.ingest, args.query, args.nats_nodes) == (3, 1, 5)


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--ingest", "0", "replicas: between 1 and 8, not 0"),
    ("--query", "9", "replicas: between 1 and 8, not 9"),
    ("--nats-nodes", "2", "nats-nodes: an odd number (a quorum), not 2")])
def test_a_count_out_of_bounds_is_refused_naming_it(capsys: pytest.CaptureFixture[str],
                                                    option: str, value: str, says: str) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["cluster", "up", option, value])

    assert exited.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("nice") is None, reason="no nice(1) on this machine")
def test_the_enricher_yields_the_cores_in_a_cluster_as_under_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: dict[str, list[str]] = {}

    def popen(argv: list[str], **_: Any) -> None:
        started[argv[-1]] = argv

    monkeypatch.setattr("memledger_cli.cluster.subprocess.Popen", popen)
    deployment = cluster.Cluster(tmp_path)
    for name in ("enricher", "query-1"):
        deployment._tend(cluster.Service(name, {}, tmp_path / f"{name}.log"))

    assert started["enricher"][:3] == ["nice", "-n", "10"]
    assert started["query"][0] != "nice"
