"""deploy/nats/accounts.conf on a real nats-server: each tenant reaches only its own subjects, and
every memledger service, run by its own composition root as its own NATS user, has the
permissions it needs (a write over intake goes all the way to both read models, and the server
logs no permission violation)."""

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import nats
import orjson
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import NoStreamResponseError

from memledger_cli.status import Status, collect
from memledger_enricher import bootstrap as enricher
from memledger_ingest import bootstrap as ingest
from memledger_lifecycle import bootstrap as lifecycle
from memledger_platform.auth import TENANT_HEADER
from memledger_platform.endpoints import Endpoints
from memledger_platform.engines.nats import _nats_binary
from memledger_platform.engines.process import free_port
from memledger_platform.settings import Settings
from memledger_projector import bootstrap as projector
from memledger_query import bootstrap as query
from memledger_relay import bootstrap as relay
from memledger_schemas.subjects import HDR_REPLY_TO, Subjects
from memledger_vectors import bootstrap as vectors
from tests.support import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
USERS = ("ingest", "relay", "projector", "vectors", "enricher", "lifecycle", "query", "operator",
         "acme", "globex", "sys")


@dataclass
class AccountsNats:
    port: int
    log: Path

    def url(self, user: str) -> str:
        return f"nats://{user}:pw-{user}@127.0.0.1:{self.port}"

    def violations(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if "Violation" in line]


@pytest.fixture
def accounts_nats(tmp_path: Path) -> Iterator[AccountsNats]:
    """A nats-server with JetStream and deploy/nats/accounts.conf (included as shipped)."""
    shutil.copy(DEPLOY / "nats" / "accounts.conf", tmp_path / "accounts.conf")
    port, log = free_port(), tmp_path / "nats.log"
    (tmp_path / "nats.conf").write_text(
        f'listen: "127.0.0.1:{port}"\nmax_payload: 8MB\nlog_file: "{log}"\n'
        f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\ninclude ./accounts.conf\n')
    env = {**os.environ, **{f"NATS_{u.upper()}_PASSWORD": f"pw-{u}" for u in USERS}}
    proc = subprocess.Popen([str(_nats_binary()), "-c", str(tmp_path / "nats.conf")], env=env)
    try:
        yield AccountsNats(port, log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _connect(server: AccountsNats, user: str) -> Client:
    async def connected() -> Client:
        try:
            return await nats.connect(server.url(user), allow_reconnect=False)
        except (OSError, nats.errors.NoServersError) as error:
            raise AssertionError(f"nats-server not up yet: {error}") from None

    return await eventually(connected, timeout=15, interval=0.1)


@contextlib.asynccontextmanager
async def _as(server: AccountsNats, user: str) -> AsyncIterator[Client]:
    nc = await _connect(server, user)
    try:
        yield nc
    finally:
        await nc.close()


async def _collect(box: list[Msg], nc: Client, subject: str) -> None:
    async def keep(msg: Msg) -> None:
        box.append(msg)

    await nc.subscribe(subject, cb=keep)
    await nc.flush()  # the server has the subscription before anyone publishes


async def test_a_tenant_reaches_only_its_own_subjects(accounts_nats: AccountsNats) -> None:
    from memledger_platform import bus

    async with _as(accounts_nats, "relay") as memledger, _as(accounts_nats, "acme") as acme, \
            _as(accounts_nats, "globex") as globex:
        await bus.ensure_streams(memledger.jetstream(), Subjects())
        seen: dict[str, list[Msg]] = {"acme": [], "globex": []}
        await _collect(seen["acme"], acme, "memledger.evt.>")
        await _collect(seen["globex"], globex, "memledger.evt.>")
        for tenant in ("acme", "globex"):
            await memledger.jetstream().publish(f"memledger.evt.{tenant}.s.space.created", b"{}")
        await memledger.flush()

        ack = await acme.jetstream().publish("memledger.in.acme.create_space", b"{}")
        assert ack.stream == "MEMLEDGER_INTAKE"
        with pytest.raises((NoStreamResponseError, NoRespondersError, NatsTimeout)):
            await acme.jetstream().publish("memledger.in.globex.create_space", b"{}", timeout=1)

        async def delivered() -> None:
            assert [m.subject for m in seen["acme"]] == ["memledger.evt.acme.s.space.created"]
            assert [m.subject for m in seen["globex"]] == [
                "memledger.evt.globex.s.space.created"]

        await eventually(delivered, timeout=5)


async def test_intake_replies_reach_only_the_tenant_that_asked(
        accounts_nats: AccountsNats) -> None:
    from memledger_platform import bus

    async with _as(accounts_nats, "ingest") as memledger, _as(accounts_nats, "acme") as acme, \
            _as(accounts_nats, "globex") as globex:
        await bus.ensure_streams(memledger.jetstream(), Subjects())
        replies: dict[str, list[Msg]] = {"acme": [], "globex": []}
        await _collect(replies["acme"], acme, "memledger.reply.>")
        await _collect(replies["globex"], globex, "memledger.reply.>")
        await memledger.publish("memledger.reply.acme.1", b"acme's result")
        await memledger.flush()
        await eventually(lambda: _one(replies["acme"]), timeout=5)
        assert replies["globex"] == []


async def _one(box: list[Msg]) -> None:
    assert len(box) == 1


# --- every service as its own user ------------------------------------------------------------

def _settings(server: AccountsNats, user: str, dsn: str, schema: str, home: Path) -> Settings:
    return Settings(mode="distributed", postgres_dsn=dsn, nats_url=server.url(user),
                    postgres_schema=schema, embedder="hashing", home=home,
                    http_port=free_port(), grpc_port=free_port(), auth="off")


@contextlib.asynccontextmanager
async def _services(server: AccountsNats, dsn: str, schema: str, home: Path,
                    query_settings: Settings | None = None
                    ) -> AsyncIterator[list["asyncio.Task[None]"]]:
    """The seven services, each through its composition root as its own NATS user. Started in
    stages, as compose orders them: each creates its tables with CREATE ... IF NOT EXISTS, which
    PostgreSQL does not serialise (two at once can fail on a duplicate key)."""
    def s(user: str) -> Settings:
        if user == "query" and query_settings is not None:
            return query_settings
        return _settings(server, user, dsn, schema, home)

    stop = asyncio.Event()
    stages: list[list[tuple[str, Any]]] = [
        [("ingest-intake", ingest.serve(s("ingest"), Endpoints(dsn, server.url("ingest")),
                                        stop))],
        [("projector-postgres", projector.serve(s("projector"), dsn, server.url("projector"),
                                                stop)),
         ("", relay.serve(s("relay"), Endpoints(dsn, server.url("relay")), stop))],
        [("projector-vectors-hashing-v1-snowball-en",
          vectors.serve(s("vectors"), dsn, server.url("vectors"), stop)),
         ("", query.serve(s("query"), dsn, server.url("query"), stop)),
         ("enricher-hashing-v1", enricher.serve(s("enricher"), server.url("enricher"), stop)),
         ("lifecycle", lifecycle.serve(s("lifecycle"), server.url("lifecycle"), stop))]]
    tasks: list[asyncio.Task[None]] = []
    try:
        for stage in stages:
            tasks += [asyncio.create_task(service) for _, service in stage]
            durables = {durable for durable, _ in stage if durable}
            await eventually(functools.partial(_consuming, server, tasks, durables),
                             timeout=60, interval=0.2)
        yield tasks
    finally:
        stop.set()
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    assert not failed, failed


async def _send(nc: Client, command: str, body: dict[str, Any], reply: str) -> None:
    await nc.jetstream().publish(f"memledger.in.acme.{command}", orjson.dumps(body),
                                 headers={HDR_REPLY_TO: reply})


async def test_every_service_runs_with_only_its_own_permissions(
        accounts_nats: AccountsNats, engines: Endpoints, pg_schema: str, tmp_path: Path) -> None:
    queries = _settings(accounts_nats, "query", engines.postgres_dsn, pg_schema, tmp_path)
    async with _services(accounts_nats, engines.postgres_dsn, pg_schema, tmp_path, queries), \
            _as(accounts_nats, "acme") as acme:
        replies: list[Msg] = []
        events: list[Msg] = []
        await _collect(replies, acme, "memledger.reply.acme.>")
        await _collect(events, acme, "memledger.evt.acme.>")
        await _send(acme, "create_space", {"space_id": "ops"}, "memledger.reply.acme.1")
        await _send(acme, "assert_memory", {"space_id": "ops", "kind": "fact",
                                            "content": "The sky is blue"},
                    "memledger.reply.acme.2")

        async def answered() -> None:
            assert sorted(m.subject for m in replies) == ["memledger.reply.acme.1",
                                                          "memledger.reply.acme.2"]
            assert all("position" in orjson.loads(m.data) for m in replies), replies

        await eventually(answered, timeout=30, interval=0.2)
        status = await eventually(lambda: _caught_up(accounts_nats, engines, pg_schema),
                                  timeout=60, interval=0.5)
        audited = await _audited_search(queries)
    types = {m.subject.rsplit(".", 2)[-2] + "." + m.subject.rsplit(".", 1)[-1] for m in events}
    assert {"space.created", "memory.asserted", "memory.embedded"} <= types, types
    assert audited["results"], audited
    assert {p.name for p in status.projections} == {"postgres", "vectors"}
    assert accounts_nats.violations() == []


async def _audited_search(settings: Settings) -> dict[str, Any]:
    """An audited search on the query service: it records the retrieval over NATS intake as
    its own user, and reads it back."""
    base = f"http://{settings.http_host}:{settings.http_port}"
    async with httpx.AsyncClient(base_url=base, headers={TENANT_HEADER: "acme"},
                                 timeout=30) as client:
        response = await client.post("/v1/search", json={
            "query": "sky", "audit": True, "threshold": 0.0,
            "weights": {"dense": 0.0, "keyword": 1.0}})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        record = await client.get(f"/v1/retrievals/{answer['retrieval_id']}",
                                  params={"min_position": answer["retrieval_position"]})
    assert record.status_code == 200, record.text
    return answer


async def _consuming(server: AccountsNats, services: list["asyncio.Task[None]"],
                     durables: set[str]) -> None:
    """The services run, and these durable consumers exist (read as the operator user)."""
    for task in services:
        if task.done():
            raise RuntimeError(f"a service stopped: {task.exception()!r}")
    async with _as(server, "operator") as nc:
        js = nc.jetstream()
        try:
            names = {c.name for stream in ("MEMLEDGER_EVENTS", "MEMLEDGER_INTAKE")
                     for c in await js.consumers_info(stream)}
        except nats.js.errors.NotFoundError:
            raise AssertionError("no streams yet") from None
    assert durables <= names, names


async def _caught_up(server: AccountsNats, engines: Endpoints, schema: str) -> Status:
    settings = Settings(mode="distributed", postgres_dsn=engines.postgres_dsn,
                        nats_url=server.url("operator"), postgres_schema=schema)
    status = await asyncio.to_thread(collect, settings, Endpoints(
        engines.postgres_dsn, server.url("operator")))
    assert not status.errors, status.errors
    assert (status.committed_position or 0) >= 3, status
    assert status.caught_up, status
    return status
