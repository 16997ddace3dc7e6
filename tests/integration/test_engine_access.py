"""The embedded engines take no client without credentials: PostgreSQL asks every connection for
the superuser's password (also a cluster made before passwords existed, from its next start on),
nats-server for a user and password, and each NATS user may publish and subscribe only where its
permissions allow. The passwords are kept in owner-only files."""

import stat
from pathlib import Path

import nats
import psycopg
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from memledger_platform.engines import (
    LOOPBACK,
    PG_SUPERUSER,
    EmbeddedNats,
    EmbeddedPostgres,
    NatsPermissions,
    PostgresEndpoint,
    free_port,
    postgres,
    stored_password,
    stored_passwords,
)
from tests.support import eventually


def _refused(dsn: str) -> str:
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(dsn, connect_timeout=5).close()
    return str(refused.value)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_postgres_refuses_a_connection_without_the_password_over_tcp_and_the_socket(
        tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path / "pg")
    try:
        endpoint = pg.start()
        assert "no password supplied" in _refused(endpoint.public_dsn)
        wrong = PostgresEndpoint(LOOPBACK, endpoint.port, PG_SUPERUSER, "memledger", "guess")
        assert "password authentication failed" in _refused(wrong.dsn)
        socket_dir = postgres._socket_dir_for((tmp_path / "pg").resolve())
        assert "no password supplied" in _refused(
            f"host={socket_dir} port={endpoint.port} user={PG_SUPERUSER} dbname=memledger")
        with psycopg.connect(endpoint.dsn) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (PG_SUPERUSER,)
    finally:
        pg.stop()
    assert stored_password(tmp_path / "pg") == endpoint.password
    assert _mode(tmp_path / "pg" / "password") == 0o600


def _start_as_before_passwords(pg: EmbeddedPostgres) -> PostgresEndpoint:
    """What ``start()`` did before passwords existed: initdb with trust, then the server."""
    install, run_as = postgres._pg_install_dir(), postgres._postgres_run_as()
    pg._prepare_files(install, run_as)
    pg._initdb_if_needed(install, run_as)
    port = free_port()
    pg._launch(install, port, run_as, None)
    return PostgresEndpoint(LOOPBACK, port, PG_SUPERUSER, "memledger")


def test_a_cluster_made_before_passwords_gets_one_on_its_next_start_and_keeps_its_data(
        tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path / "pg")
    try:
        before = _start_as_before_passwords(pg)
        with psycopg.connect(before.dsn, autocommit=True) as conn:  # no password: trust
            conn.execute("CREATE TABLE facts (body text)")
            conn.execute("INSERT INTO facts VALUES ('written before the upgrade')")
        pg.stop()
        assert stored_password(tmp_path / "pg") is None

        after = pg.start()
        assert "no password supplied" in _refused(after.public_dsn)
        with psycopg.connect(after.dsn) as conn:
            assert conn.execute("SELECT body FROM facts").fetchone() == (
                "written before the upgrade",)
        pg.stop()
        assert pg.start().password == after.password, "the password is made once"
    finally:
        pg.stop()


async def test_nats_refuses_a_client_without_a_user(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path)
    try:
        server.start()
        assert server.address is not None
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(server.address, allow_reconnect=False)
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(server.address.replace("://", "://admin:guess@"),
                               allow_reconnect=False)
    finally:
        server.stop()
    passwords = stored_passwords(tmp_path)
    assert set(passwords) == {"admin"}
    for name in ("passwords.json", "nats.conf", "nats-server.log"):
        assert _mode(tmp_path / "nats" / name) == 0o600, name


async def _connect(url: str, errors: list[Exception]) -> Client:
    async def keep(error: Exception) -> None:
        errors.append(error)

    return await nats.connect(url, error_cb=keep, allow_reconnect=False)


async def test_a_nats_user_publishes_and_subscribes_only_where_its_permissions_allow(
        tmp_path: Path) -> None:
    reader = NatsPermissions(publish=("notes.in.>",), subscribe=("_INBOX.>", "notes.out.>"))
    server = EmbeddedNats(tmp_path, users={"reader": reader})
    server.start()
    errors: list[Exception] = []
    received: list[str] = []

    async def keep(msg: Msg) -> None:
        received.append(msg.subject)

    admin, user = await _connect(server.url(), []), await _connect(server.url("reader"), errors)
    try:
        await admin.subscribe("notes.>", cb=keep)
        await admin.flush()
        await user.publish("notes.in.allowed", b"1")
        await user.publish("notes.out.denied", b"2")
        await user.subscribe("notes.in.>")
        await user.flush()

        async def refused() -> None:
            assert sorted(str(e) for e in errors) == [
                'nats: permissions violation for publish to "notes.out.denied"',
                'nats: permissions violation for subscription to "notes.in.>"']

        await eventually(refused)
        await admin.flush()
        assert received == ["notes.in.allowed"]
    finally:
        await user.close()
        await admin.close()
        server.stop()
