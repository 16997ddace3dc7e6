"""`memledger up` (API keys required) on its embedded engines: another user of the machine gets
nothing without the passwords kept in the home. No NATS client without a user; each service's
NATS user only where its permissions allow; no PostgreSQL connection without the password; the
home and everything in it readable by its owner only; no password in the banner or the logs;
and every service, and the operator commands, still connect."""

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import psycopg
import pytest
from nats.aio.client import Client

from tests.e2e.conftest import Running, engine_processes, nats_passwords, started
from tests.support import eventually, eventually_sync

INTRUDER = "e2e-intruder"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with started(tmp_path_factory.mktemp("guarded") / "home", MEMLEDGER_AUTH="required"
                 ) as running:
        yield running


def _banner(running: Running) -> str:
    return "".join(running.output[:running.output.index(
        next(line for line in running.output if "Ctrl-C stops" in line)) + 1])


def _api_key(running: Running) -> str:
    key = re.search(r"API key\s+(\S+)", _banner(running))
    assert key, _banner(running)
    return key.group(1)


def _postgres_dsn(running: Running) -> str:
    """The banner's DSN without the masked password."""
    dsn = re.search(r"postgres\s+(postgresql://\S+)", _banner(running))
    assert dsn, _banner(running)
    return dsn.group(1).replace(":***@", "@")


def _nats_address(running: Running) -> str:
    return re.sub(r"://[^@]+@", "://", running.nats_url)


def _write(running: Running, content: str) -> int:
    headers = {"authorization": f"Bearer {_api_key(running)}"}
    httpx.post(f"{running.url}/v1/spaces", json={"space_id": "guarded"}, headers=headers,
               timeout=10)
    response = httpx.post(f"{running.url}/v1/spaces/guarded/memories", headers=headers,
                          json={"kind": "fact", "content": content}, timeout=10)
    assert response.status_code == 201, response.text
    return int(response.json()["position"])


def _cli(home: Path, *args: str) -> "subprocess.CompletedProcess[str]":
    env = {**os.environ, "MEMLEDGER_HOME": str(home), "MEMLEDGER_MODE": "embedded"}
    return subprocess.run([sys.executable, "-m", "memledger_cli", *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _caught_up(home: Path, written: int) -> dict[str, Any]:
    def check() -> dict[str, Any]:
        result = _cli(home, "status", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        status: dict[str, Any] = json.loads(result.stdout)
        assert status["committed_position"] >= written
        assert status["caught_up"], status
        assert {p["name"] for p in status["projections"]} == {"postgres", "vectors"}, status
        return status

    return eventually_sync(check, timeout=120, interval=1.0)


def test_every_service_and_operator_command_connects_as_its_own_user(guarded: Running
                                                                      ) -> None:
    _caught_up(guarded.home, _write(guarded, "The lighthouse keeper feeds two cats"))
    verified = _cli(guarded.home, "verify", "--json", "--skip-vectors")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    users = {}
    for proc in engine_processes(guarded.home):
        command = proc.cmdline()[-1]
        if command in ("relay", "projector", "enricher", "lifecycle"):
            users[command] = re.match(r"nats://(\w+):", proc.environ()["MEMLEDGER_NATS_URL"])
    assert {name: found and found.group(1) for name, found in users.items()} == {
        name: name for name in ("relay", "projector", "enricher", "lifecycle")}
    log = (guarded.home / "nats" / "nats-server.log").read_text()
    assert [line for line in log.splitlines()
            if "Violation" in line and INTRUDER not in line] == []


async def test_a_nats_client_without_a_user_can_neither_send_commands_nor_read_events(
        guarded: Running) -> None:
    for url in (_nats_address(guarded), _nats_address(guarded).replace("://", "://client:x@")):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(url, name=INTRUDER, allow_reconnect=False)


async def _as(running: Running, user: str, errors: list[Exception]) -> Client:
    async def keep(error: Exception) -> None:
        errors.append(error)

    password = nats_passwords(running.home)[user]
    url = _nats_address(running).replace("://", f"://{user}:{password}@")
    return await nats.connect(url, name=INTRUDER, error_cb=keep, allow_reconnect=False)


async def test_the_query_services_user_may_neither_publish_events_nor_send_other_commands(
        guarded: Running) -> None:
    errors: list[Exception] = []
    query = await _as(guarded, "query", errors)
    admin = await _as(guarded, "admin", [])
    try:
        before = (await admin.jetstream().stream_info("MEMLEDGER_EVENTS")).state.last_seq
        await query.publish("memledger.evt.default.guarded.memory.asserted", b"{}")
        await query.publish("memledger.in.default.assert_memory", b"{}")
        await query.subscribe("memledger.evt.>")
        await query.flush()

        async def refused() -> None:
            assert sorted(str(e) for e in errors) == [
                'nats: permissions violation for publish to '
                '"memledger.evt.default.guarded.memory.asserted"',
                'nats: permissions violation for publish to "memledger.in.default.assert_memory"',
                'nats: permissions violation for subscription to "memledger.evt.>"']

        await eventually(refused)
        after = (await admin.jetstream().stream_info("MEMLEDGER_EVENTS")).state.last_seq
        intake = await admin.jetstream().stream_info("MEMLEDGER_INTAKE")
    finally:
        await query.close()
        await admin.close()
    assert after == before
    assert intake.state.messages == 0


def test_postgres_refuses_a_connection_without_the_password(guarded: Running) -> None:
    dsn = _postgres_dsn(guarded)
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(dsn, connect_timeout=5).close()
    password = (guarded.home / "postgres" / "password").read_text().strip()
    with psycopg.connect(dsn.replace("postgres@", f"postgres:{password}@")) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_the_home_and_everything_in_it_is_readable_by_its_owner_only(guarded: Running) -> None:
    _caught_up(guarded.home, _write(guarded, "Private notes stay private"))
    # PostgreSQL runs as an account of its own when memledger runs as root: it may pass
    # (not list) the directories on the way to its data.
    passable = {guarded.home, guarded.home / "postgres"} if os.geteuid() == 0 else set()
    exposed = []
    for path in [guarded.home, *guarded.home.rglob("*")]:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue  # a running engine's temporary file, gone since the listing
        allowed = 0o001 if path in passable else 0
        if not stat.S_ISLNK(mode) and stat.S_IMODE(mode) & 0o077 & ~allowed:
            exposed.append(f"{oct(stat.S_IMODE(mode))} {path}")
    assert exposed == []
    assert any((guarded.home / "vectors").rglob("*")), "the vector index has files"


def test_no_password_shows_in_the_banner_or_the_logs(guarded: Running) -> None:
    _write(guarded, "Passwords are not for printing")
    passwords = [*nats_passwords(guarded.home).values(),
                 (guarded.home / "postgres" / "password").read_text().strip()]
    output = "".join(guarded.output)
    assert "postgresql://postgres:***@127.0.0.1:" in _banner(guarded)
    assert "nats://client:***@127.0.0.1:" in _banner(guarded)
    assert [p for p in passwords if p in output] == []
