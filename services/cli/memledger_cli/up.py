"""``memledger up``: the whole service in one process on the embedded engines (the default),
or on external ones in distributed mode."""

import asyncio
import os
import sys

from memledger_cli.embedded import engines, supervise
from memledger_ingest.bootstrap import Endpoints
from memledger_platform.lifecycle import run_service, run_until_signalled
from memledger_platform.settings import Settings


def up(settings: Settings) -> None:
    """Start engines and services; block until Ctrl-C or SIGTERM; stop everything."""
    from memledger_ingest.bootstrap import serve
    from memledger_query.bootstrap import build as build_query

    print(f"memledger: starting ({settings.mode} mode, data in "
          f"{settings.home.expanduser().resolve()}) ...", file=sys.stderr, flush=True)
    with engines(settings) as endpoints:
        def ready(url: str) -> None:
            _banner(settings, url, endpoints.postgres_dsn, endpoints.nats_url)

        async def services(stop: asyncio.Event) -> None:
            # The relay, the projector and the enricher get processes (and cores) of their
            # own; they stop after ingest, so the last commits are published and projected
            # before they go. The vector index is fed inside this process (ADR 0006).
            children_stop = asyncio.Event()
            children = [asyncio.create_task(supervise(
                name, _child_argv(name), _child_env(endpoints), children_stop))
                for name in ("relay", "projector", "enricher")]
            query = await asyncio.to_thread(build_query, settings, endpoints.postgres_dsn)
            vectors = asyncio.create_task(query.project_vectors(
                settings, endpoints.nats_url, children_stop))
            try:
                await serve(settings, endpoints, stop, ready, also=query.app)
            finally:
                children_stop.set()
                await asyncio.gather(*children, vectors)
                await asyncio.to_thread(query.close)

        run_service(run_until_signalled(services))
    print("memledger: stopped", file=sys.stderr, flush=True)


def _child_argv(command: str) -> list[str]:
    return [sys.executable, "-m", "memledger_cli", command]


def _child_env(endpoints: Endpoints) -> dict[str, str]:
    return {**os.environ, "MEMLEDGER_MODE": "distributed",
            "MEMLEDGER_POSTGRES_DSN": endpoints.postgres_dsn,
            "MEMLEDGER_NATS_URL": endpoints.nats_url}


def _banner(settings: Settings, url: str, dsn: str, nats_url: str) -> None:
    body = '{"space_id": "demo"}'
    fact = '{"kind": "fact", "content": "The sky is blue"}'
    search = '{"query": "what colour is the sky?", "explain": true}'
    print(f"""
memledger is up ({settings.mode})
  HTTP API   {url}   (GET {url}/health, OpenAPI at {url}/openapi.json)
  postgres   {dsn}
  nats       {nats_url}
try:
  curl -s -X POST {url}/v1/spaces -H 'content-type: application/json' -d '{body}'
  curl -s -X POST {url}/v1/spaces/demo/memories -H 'content-type: application/json' -d '{fact}'
  curl -s -X POST {url}/v1/search -H 'content-type: application/json' -d '{search}'
Ctrl-C stops memledger and its engines.
""", flush=True)
