"""Integration tests for the embedded engines: real PostgreSQL and nats-server processes.

"Owner" processes are child Python interpreters that start an engine and are
then SIGKILLed, to exercise what happens when the process owning an engine
dies abruptly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import psutil
import psycopg
import pytest

from memledger_platform import engines
from memledger_platform.engines import (
    EmbeddedNats,
    EmbeddedPostgres,
    PortInUseError,
)
from tests.support import eventually_sync

STREAM = "MEMORY"
SUBJECT = "memory.facts"

# Starts one engine, prints {"pid", "address"} and waits to be killed.  With
# "no-death-signal" it behaves like an owner whose engines outlive it (as on
# platforms without PR_SET_PDEATHSIG), leaving a stale server behind.
_OWNER_SCRIPT = """
import json, signal, sys
from pathlib import Path
from memledger_platform import engines
from memledger_platform.engines import process

kind, data_dir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
if mode == "no-death-signal":
    process._parent_death_preexec = lambda sig: None
if kind == "postgres":
    pg = engines.EmbeddedPostgres(data_dir)
    address = pg.start().dsn
    pid = pg.pid
else:
    server = engines.EmbeddedNats(data_dir)
    address = server.start()
    pid = server.pid
print(json.dumps({"pid": pid, "address": address}), flush=True)
signal.pause()
"""


# --------------------------------------------------------------------------
# helpers


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (orphans may never be reaped in containers)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _process_tree(pid: int | None) -> list[psutil.Process]:
    """The process and all its descendants, e.g. a postmaster and its backends."""
    assert pid is not None
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _all_gone(procs: list[psutil.Process], timeout: float = 20.0, what: str = "") -> None:
    """Wait until every one of ``procs`` has exited; after ``timeout`` seconds, fail with
    ``what`` and the pids still running."""
    def gone() -> None:
        alive = [p.pid for p in procs if _alive(p)]
        assert not alive, f"{what or 'still running'}: {alive}"

    eventually_sync(gone, timeout)


def _live_postmasters_for(pgdata: Path) -> list[int]:
    """Pids of live postgres processes started on ``pgdata``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if _alive(proc) and proc.name() == "postgres" and str(pgdata) in proc.cmdline():
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def owners() -> Iterator[list[subprocess.Popen[str]]]:
    """Owner processes started by a test; killed and reaped afterwards."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for owner in started:
        owner.kill()
        owner.wait()


def _start_owner(
    owners: list[subprocess.Popen[str]], kind: str, data_dir: Path, mode: str = "normal"
) -> dict[str, Any]:
    """Start ``kind`` from a separate owner process; return its pid and address."""
    package_root = Path(engines.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package_root), *sys.path])}
    stderr_path = data_dir.parent / f"owner-{kind}-{len(owners)}.err"
    with stderr_path.open("w") as stderr:
        owner = subprocess.Popen(
            [sys.executable, "-c", _OWNER_SCRIPT, kind, str(data_dir), mode],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        )
    owners.append(owner)
    assert owner.stdout is not None
    line = owner.stdout.readline()  # the owner exits (EOF) if start() fails
    assert line, f"owner process failed:\n{stderr_path.read_text()}"
    info: dict[str, Any] = json.loads(line)
    return info


def _kill_owner(owner: subprocess.Popen[str]) -> None:
    owner.send_signal(signal.SIGKILL)
    owner.wait()


def _fetch_one(dsn: str, query: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


async def _publish(url: str, payload: bytes) -> int:
    """Create the test stream and publish ``payload``; return its sequence."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=STREAM, subjects=[f"{SUBJECT}.>"])
        ack = await js.publish(f"{SUBJECT}.one", payload)
        return int(ack.seq)
    finally:
        await nc.close()


async def _read(url: str, seq: int) -> bytes:
    nc = await nats.connect(url)
    try:
        msg = await nc.jetstream().get_msg(STREAM, seq)
        assert msg.data is not None
        return bytes(msg.data)
    finally:
        await nc.close()


# --------------------------------------------------------------------------
# PostgreSQL


def test_postgres_starts_accepts_queries_and_keeps_data_across_restarts(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path / "engine data", dbname="ledger")
    try:
        endpoint = pg.start()
        assert endpoint.host == "127.0.0.1"
        assert endpoint.public_dsn == f"postgresql://postgres@127.0.0.1:{endpoint.port}/ledger"
        assert endpoint.dsn == (f"postgresql://postgres:{endpoint.password}@127.0.0.1:"
                                f"{endpoint.port}/ledger")
        assert pg.start() == endpoint, "start() while running returns the same endpoint"
        with psycopg.connect(endpoint.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            conn.execute("CREATE TABLE facts (id int PRIMARY KEY, body text NOT NULL)")
            conn.execute("INSERT INTO facts VALUES (1, 'the user prefers tea')")
        pg.stop()
        assert pg.pid is None

        again = pg.start()
        assert (
            _fetch_one(again.dsn, "SELECT body FROM facts WHERE id = 1") == "the user prefers tea"
        )
        assert _fetch_one(again.dsn, "SHOW fsync") == "on"
    finally:
        pg.stop()


def test_postgres_and_nats_exit_when_their_owner_process_is_killed(
    tmp_path: Path, owners: list[subprocess.Popen[str]]
) -> None:
    pg_info = _start_owner(owners, "postgres", tmp_path / "data")
    nats_info = _start_owner(owners, "nats", tmp_path / "data")
    pg_tree = _process_tree(pg_info["pid"])
    nats_server = psutil.Process(nats_info["pid"])
    if os.geteuid() == 0:  # the death signal must survive the switch to the pg account
        assert pg_tree[0].uids().real == pwd.getpwnam(engines.PG_SYSTEM_USER).pw_uid

    for owner in owners:
        _kill_owner(owner)

    _all_gone(pg_tree, what="PostgreSQL outlived its owner")
    _all_gone([nats_server], what="nats-server outlived its owner")

    pg = EmbeddedPostgres(tmp_path / "data")  # the next owner starts cleanly
    try:
        assert _fetch_one(pg.start().dsn, "SELECT 1") == 1
    finally:
        pg.stop()


def test_stale_postgres_left_by_a_killed_owner_is_replaced_and_fully_stopped(
    tmp_path: Path, owners: list[subprocess.Popen[str]]
) -> None:
    data_dir = tmp_path / "data"
    stale = _start_owner(owners, "postgres", data_dir, mode="no-death-signal")
    with psycopg.connect(stale["address"], autocommit=True) as conn:
        conn.execute("CREATE TABLE facts (body text)")
        conn.execute("INSERT INTO facts VALUES ('written before the crash')")
    stale_tree = _process_tree(stale["pid"])
    _kill_owner(owners[0])
    assert _alive(stale_tree[0]), "the server should have outlived its owner"

    pg = EmbeddedPostgres(data_dir)
    try:
        endpoint = pg.start()
        assert pg.pid != stale["pid"]
        _all_gone(stale_tree, timeout=1, what="the stale server must be gone after start()")
        assert _fetch_one(endpoint.dsn, "SELECT body FROM facts") == "written before the crash"
        fresh_tree = _process_tree(pg.pid)
    finally:
        pg.stop()

    _all_gone(fresh_tree, timeout=1)
    assert _live_postmasters_for(data_dir / "pgdata") == []


def test_postgres_starts_over_the_pid_file_of_a_crashed_server(
    tmp_path: Path, owners: list[subprocess.Popen[str]]
) -> None:
    # SIGKILL of the whole server tree leaves postmaster.pid behind, naming a
    # pid that may linger as an unreaped zombie; start() must not be blocked.
    data_dir = tmp_path / "data"
    crashed = _start_owner(owners, "postgres", data_dir, mode="no-death-signal")
    crashed_tree = _process_tree(crashed["pid"])
    _kill_owner(owners[0])
    for proc in crashed_tree:
        with contextlib.suppress(psutil.NoSuchProcess):  # short-lived backends
            proc.kill()
    _all_gone(crashed_tree)
    assert (data_dir / "pgdata" / "postmaster.pid").exists()

    pg = EmbeddedPostgres(data_dir)
    try:
        assert _fetch_one(pg.start().dsn, "SELECT 1") == 1
    finally:
        pg.stop()


# --------------------------------------------------------------------------
# NATS


def test_nats_starts_with_jetstream_and_keeps_stream_messages_across_restarts(
    tmp_path: Path,
) -> None:
    server = EmbeddedNats(tmp_path / "engine data")
    payload = b"m" * (2 * 1024 * 1024)  # above NATS's 1 MB default, within our 8 MB limit
    try:
        url = server.start()
        assert url.startswith("nats://admin:")
        assert url == server.url("admin")
        assert (server.address or "").startswith("nats://127.0.0.1:")
        seq = asyncio.run(_publish(url, payload))
        assert asyncio.run(_read(url, seq)) == payload
        server.stop()
        assert server.pid is None

        url = server.start()
        assert asyncio.run(_read(url, seq)) == payload
    finally:
        server.stop()


def test_stale_nats_left_by_a_killed_owner_is_replaced_and_keeps_its_stream(
    tmp_path: Path, owners: list[subprocess.Popen[str]]
) -> None:
    data_dir = tmp_path / "data"
    stale = _start_owner(owners, "nats", data_dir, mode="no-death-signal")
    seq = asyncio.run(_publish(stale["address"], b"before the crash"))
    stale_server = psutil.Process(stale["pid"])
    _kill_owner(owners[0])
    assert _alive(stale_server), "the server should have outlived its owner"

    server = EmbeddedNats(data_dir)
    try:
        url = server.start()
        _all_gone([stale_server], timeout=1)
        assert asyncio.run(_read(url, seq)) == b"before the crash"
    finally:
        server.stop()


# --------------------------------------------------------------------------
# Shared behaviour


def test_an_explicit_busy_port_raises_port_in_use_error_naming_the_setting(
    tmp_path: Path,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]

        server = EmbeddedNats(tmp_path, port=port, port_setting="MEMLEDGER_NATS_PORT")
        with pytest.raises(PortInUseError) as nats_error:
            server.start()
        pg = EmbeddedPostgres(tmp_path, port=port, port_setting="MEMLEDGER_PG_PORT")
        with pytest.raises(PortInUseError) as pg_error:
            pg.start()

    assert str(nats_error.value) == (
        f"port {port} is already in use (set MEMLEDGER_NATS_PORT to another port, "
        "or leave it unset to pick a free one)"
    )
    assert f"port {port} is already in use (set MEMLEDGER_PG_PORT" in str(pg_error.value)
    assert server.pid is None
    assert pg.pid is None


def test_stop_is_idempotent_and_leaves_no_engine_process(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path)
    server = EmbeddedNats(tmp_path)
    pg.stop()  # never started: nothing to do
    server.stop()
    try:
        pg.start()
        server.start()
        processes = [*_process_tree(pg.pid), psutil.Process(server.pid)]
    finally:
        for _ in range(2):
            pg.stop()
            server.stop()

    assert pg.pid is None
    assert server.pid is None
    _all_gone(processes, timeout=1)
    assert _live_postmasters_for(tmp_path / "pgdata") == []
