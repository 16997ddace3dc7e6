"""``memledger bench scale --json`` end to end on a small load: a clustered deployment, a phase
per replica shape, the raw engines beside it, and the checker's verdict."""

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(600)
def test_bench_scale_reports_each_shape_the_raw_engines_and_its_check() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memledger_cli", "bench", "scale", "--json", "--seconds", "1",
         "--nats-nodes", "1", "--configs", "1x1,2x2", "--warmup", "1", "--writers", "2",
         "--searchers", "1", "--readers", "1"],
        capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)

    assert result["scenario"] == "scale"
    assert result["ok"] is True
    assert [(p["ingest_replicas"], p["query_replicas"]) for p in result["phases"]] == [
        (1, 1), (2, 2)]
    for phase in result["phases"]:
        assert set(phase["ops"]) == {"write", "search", "as_of"}
        for op in phase["ops"].values():
            assert {"count", "per_s", "p50_ms", "p99_ms", "errors"} <= set(op)
        assert phase["ops"]["write"]["count"] > 0
        assert phase["cpu_ms_per_op"]["total"] > 0
    assert {"query", "query-1", "ingest", "ingest-1", "postgres", "nats"} <= set(
        result["phases"][1]["cpu_ms_per_op"])
    assert result["raw"]["postgres_insert"]["per_s"] > 0
    assert result["raw"]["postgres_select"]["per_s"] > 0
    assert result["raw"]["jetstream_publish_per_s"] > 0
    check = result["check"]
    # the warm-up's writes are checked too
    assert check["acked"] > sum(p["ops"]["write"]["count"] for p in result["phases"])
    assert result["warmup_seconds"] == 1
    assert (check["lost"], check["repeated"], check["wrong_reads"]) == (0, 0, 0)
    assert set(result["scaling"]) == {"1x1", "2x2"}
    assert len(result["load_average"]) == 3
