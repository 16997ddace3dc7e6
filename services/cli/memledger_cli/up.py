"""``memledger up``: the embedded composition root, the one place that knows every service.

It starts the engines (embedded by default; named by the settings in distributed mode), runs
ingest and query in this process behind one port for users (HTTP and gRPC: ingest serves query's
APIs beside its own), and supervises the relay, the projector, the vectors service, the
enricher and the lifecycle scheduler as child processes of their own."""

import asyncio
import os
import sys
import time

from pydantic import SecretStr

from memledger_cli.embedded import Engines, child_argv, engines, supervise
from memledger_cli.status import redact
from memledger_platform import http_server, telemetry
from memledger_platform.auth_postgres import ensure_local_admin
from memledger_platform.endpoints import Endpoints
from memledger_platform.keyring_postgres import ensure_master_key
from memledger_platform.lifecycle import run_service, run_until_signalled
from memledger_platform.nats_permissions import CLIENT
from memledger_platform.settings import Settings
from memledger_platform.vectorindex.port import IndexUnavailable, VectorIndex

ADMIN_KEY_FILE = "admin.key"
CHILDREN = ("relay", "projector", "vectors", "enricher", "lifecycle")
INDEX_START_SECONDS = 180.0
"""How long ``up`` waits for the vectors service's index to answer before giving up."""
"""The services ``up`` runs as child processes (ingest and query run in its own)."""


def up(settings: Settings) -> None:
    """Start engines and services; block until Ctrl-C or SIGTERM; stop everything."""
    from memledger_ingest.bootstrap import serve
    from memledger_query.bootstrap import build as build_query

    print(f"memledger: starting ({settings.mode} mode, data in "
          f"{settings.home.expanduser().resolve()}) ...", file=sys.stderr, flush=True)
    _chosen_ports_free(settings)
    if settings.master_key is None:  # personal data is always sealed on the embedded engines
        settings = settings.model_copy(update={"master_key": SecretStr(
            ensure_master_key(settings.home.expanduser()))})
    # this process: ingest and query (the others are child processes, which configure their
    # own from the same settings)
    telemetry.configure(settings, "memledger")
    with engines(settings) as started:
        key = ensure_local_admin(settings, started.postgres_dsn,
                                 settings.home.expanduser() / ADMIN_KEY_FILE)

        grpc_address: list[str] = []  # set by serve before it calls ready

        def ready(url: str) -> None:
            _banner(settings, url, started, key, grpc_address[0])

        async def services(stop: asyncio.Event) -> None:
            # The other services get processes (and cores) of their own; they stop after
            # ingest, so the last commits are published and projected before they go. The
            # vectors service owns the vector index's process, which query reads over its
            # socket (ADR 0006). Each service connects to NATS as its own user.
            children_stop = asyncio.Event()
            children = [asyncio.create_task(supervise(
                label, child_argv(name), {**_child_env(started.endpoints(name), settings),
                                           **extra}, children_stop))
                for name in CHILDREN for label, extra in _instances(name, settings)]
            query = await asyncio.to_thread(build_query, settings, started.postgres_dsn)
            await _index_serving(query.index, stop)
            recording = asyncio.create_task(query.record_retrievals(
                settings, started.nats_url("query"), children_stop))
            following = asyncio.create_task(query.follow_projection(children_stop))
            try:
                await serve(settings, started.endpoints("ingest"), stop, ready, also=query.app,
                            also_grpc=query.grpc, on_grpc_ready=grpc_address.append)
            finally:
                children_stop.set()
                await asyncio.gather(*children, recording, following)
                await asyncio.to_thread(query.close)

        # Two stages, each within the grace period: its own services (ingest gives up on a
        # stuck commit), then its child processes. Past both it ends itself; its engines and
        # children then stop on their own (parent-death signals).
        run_service(run_until_signalled(services,
                                        grace_seconds=2 * settings.stop_grace_seconds))
    print("memledger: stopped", file=sys.stderr, flush=True)


def _chosen_ports_free(settings: Settings) -> None:
    """A port the user chose that is taken fails the start at once (``PortBusyError``, naming
    its setting), not once the engines and services have started: ingest binds it again then,
    and still names the setting if it was taken meanwhile."""
    for port, setting in ((settings.http_port, "MEMLEDGER_HTTP_PORT"),
                          (settings.grpc_port, "MEMLEDGER_GRPC_PORT")):
        if port is not None:
            http_server.bind(settings.http_host, port, fallback=port, setting=setting).close()


async def _index_serving(index: VectorIndex, stop: asyncio.Event,
                         seconds: float = INDEX_START_SECONDS) -> None:
    """Until the vectors service's index answers: ``up`` is ready (``/health``, the banner)
    only once a search can be."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        try:
            await asyncio.to_thread(index.count)
            return
        except IndexUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


PER_PARTITION = ("relay", "projector")
"""The children ``up`` runs once per partition of the events when they are partitioned (the
single-writer stages of ADR 0016); the others serve every partition in one process (the
vectors service owns the one index's process)."""


def _instances(name: str, settings: Settings) -> list[tuple[str, dict[str, str]]]:
    """Each process of the child ``name``: its label and its extra environment."""
    if settings.event_partitions == 1 or name not in PER_PARTITION:
        return [(name, {})]
    return [(f"{name} p{i}", {"MEMLEDGER_EVENT_PARTITION": str(i)})
            for i in range(settings.event_partitions)]


def _child_env(endpoints: Endpoints, settings: Settings) -> dict[str, str]:
    return {**os.environ, "MEMLEDGER_MODE": "distributed",
            "MEMLEDGER_EVENT_PARTITIONS": str(settings.event_partitions),
            "MEMLEDGER_POSTGRES_DSN": endpoints.postgres_dsn,
            "MEMLEDGER_NATS_URL": endpoints.nats_url,
            **({"MEMLEDGER_MASTER_KEY": settings.master_key.get_secret_value()}
               if settings.master_key else {})}


def _banner(settings: Settings, url: str, started: Engines, key: str | None,
            grpc_address: str) -> None:
    auth = (f"\n  API key    {key}   (admin of tenant {settings.tenant_fallback or 'default'}; "
            f"kept in {settings.home / ADMIN_KEY_FILE})" if key else
            "\n  API keys   off (embedded on loopback; MEMLEDGER_AUTH=required turns them on)")
    h = "-H 'content-type: application/json'" + (
        f" -H 'authorization: Bearer {key}'" if key else "")
    body = '{"space_id": "demo"}'
    fact = '{"kind": "fact", "content": "The sky is blue"}'
    search = '{"query": "what colour is the sky?", "explain": true}'
    postgres = redact(started.postgres_dsn) + _kept(settings, "password", "postgres/password")
    nats = redact(started.nats_url(CLIENT)) + _kept(settings, "passwords", "nats/passwords.json")
    print(f"""
memledger is up ({settings.mode})
  HTTP API   {url}   (GET {url}/health, OpenAPI at {url}/openapi.json)
  gRPC API   {grpc_address}   (memledger.v1.Ingest and .Query: schemas/proto/memledger/v1)
  postgres   {postgres}
  nats       {nats}{auth}
try:
  curl -s -X POST {url}/v1/spaces {h} -d '{body}'
  curl -s -X POST {url}/v1/spaces/demo/memories {h} -d '{fact}'
  curl -s -X POST {url}/v1/search {h} -d '{search}'
Ctrl-C stops memledger and its engines.
""", flush=True)


def _kept(settings: Settings, what: str, path: str) -> str:
    """Where an embedded engine's passwords are (the banner shows none)."""
    return f"   ({what} in {settings.home / path})" if settings.mode == "embedded" else ""
