"""The ingest bench's CPU by process: each process of a private server is named by its command
line, and only the server's own tree is counted."""

import os

import pytest

from memledger_cli.bench import cpu
from memledger_cli.bench.ingest_raw import stored_event_bytes


@pytest.mark.parametrize(("cmdline", "role"), [
    ("/v/bin/python -m memledger_cli up", "ingest"),
    ("/v/bin/python -m memledger_cli relay", "relay"),
    ("/v/bin/python -m memledger_cli projector", "projector"),
    ("/v/bin/python -m memledger_cli enricher", "enricher"),
    ("/v/bin/python -m memledger_cli lifecycle", "lifecycle"),
    ("/v/bin/python -m memledger_cli vectors", "vectors"),
    ("/v/bin/python -m memledger_platform.vectorindex.process /h/vectors 3 info", "vector_index"),
    ("/v/bin/python -m memledger_platform.vectorindex.aside /h/vectors.build 3", "vector_index"),
    ("postgres: postgres memledger 127.0.0.1(5) idle", "postgres"),
    ("/v/pginstall/bin/postgres -D /tmp/memledger-bench-x/postgres/pgdata", "postgres"),
    ("/v/bin/nats-server -c /tmp/memledger-bench-x/nats/nats.conf", "nats"),
    ("/bin/sh -c true", "other"),
    ("/v/bin/python -m pytest tests/test_eventstore_postgres.py", "other"),
])
def test_each_process_of_a_server_is_named_by_its_command_line(cmdline: str, role: str) -> None:
    assert cpu.role_of(cmdline) == role


def test_the_tree_holds_the_root_and_its_descendants_but_no_stranger() -> None:
    procs = [cpu.Proc(1, 0, 5, "init"), cpu.Proc(10, 1, 100, "python -m memledger_cli up"),
             cpu.Proc(11, 10, 7, "python -m memledger_cli relay"),
             cpu.Proc(12, 11, 3, "nats-server -c x"),
             cpu.Proc(20, 1, 50, "python -m memledger_cli relay")]
    assert cpu.tree(10, procs) == {10: ("ingest", 100), 11: ("relay", 7), 12: ("nats", 3)}


def test_cpu_used_is_summed_by_role_and_a_new_process_counts_from_zero() -> None:
    hz = os.sysconf("SC_CLK_TCK")
    before = {10: ("ingest", 100), 11: ("postgres", 10)}
    after = {10: ("ingest", 100 + hz), 11: ("postgres", 10 + hz), 12: ("postgres", hz)}
    assert cpu.used(before, after) == {"ingest": 1.0, "postgres": 2.0}


def test_cpu_per_fact_is_in_milliseconds_with_a_total_and_empty_without_facts() -> None:
    assert cpu.per_fact_ms({"ingest": 1.0, "relay": 0.5}, 1_000) == {
        "ingest": 1.0, "relay": 0.5, "total": 1.5}
    assert cpu.per_fact_ms({"ingest": 1.0}, 0) == {}


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_snapshot_of_this_process_finds_it_with_its_cpu_so_far() -> None:
    role, ticks = cpu.snapshot(os.getpid())[os.getpid()]
    assert role == "other"
    assert ticks > 0


def test_the_raw_baselines_rows_are_about_a_stored_event() -> None:
    assert 400 < len(stored_event_bytes(7)) < 1_000


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_the_memory_of_this_process_is_what_it_holds_now_and_at_its_peak() -> None:
    held = bytearray(64 << 20)  # 64 MiB touched: resident
    held[::4096] = b"x" * len(held[::4096])
    memory = cpu.resident_mb(os.getpid())["other"]
    assert memory["now"] >= 64
    assert memory["peak"] >= memory["now"] * 0.9
    del held


def test_kib_fields_are_read_by_name_and_other_lines_left_out() -> None:
    text = "Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t3\n"
    assert cpu._fields(text) == {"VmHWM": 2048, "VmRSS": 1024}
