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

    print(f"memledger: starting ({settings.mode} mode, data in "
          f"{settings.home.expanduser().resolve()}) ...", file=sys.stderr, flush=True)
    with engines(settings) as endpoints:
        def ready(url: str) -> None:
            _banner(settings, url, endpoints.postgres_dsn, endpoints.nats_url)

        async def services(stop: asyncio.Event) -> None:
            # The relay gets a process (and a core) of its own; it stops after ingest, so the
            # last commits are published before it goes.
            relay_stop = asyncio.Event()
            relay = asyncio.create_task(supervise("relay", _relay_argv(), _relay_env(endpoints),
                                                  relay_stop))
            try:
                await serve(settings, endpoints, stop, ready)
            finally:
                relay_stop.set()
                await relay

        run_service(run_until_signalled(services))
    print("memledger: stopped", file=sys.stderr, flush=True)


def _relay_argv() -> list[str]:
    return [sys.executable, "-m", "memledger_cli", "relay"]


def _relay_env(endpoints: Endpoints) -> dict[str, str]:
    return {**os.environ, "MEMLEDGER_MODE": "distributed",
            "MEMLEDGER_POSTGRES_DSN": endpoints.postgres_dsn,
            "MEMLEDGER_NATS_URL": endpoints.nats_url}


def _banner(settings: Settings, url: str, dsn: str, nats_url: str) -> None:
    body = '{"space_id": "demo"}'
    fact = '{"kind": "fact", "content": "The sky is blue"}'
    print(f"""
memledger is up ({settings.mode})
  HTTP API   {url}   (GET {url}/health, OpenAPI at {url}/openapi.json)
  postgres   {dsn}
  nats       {nats_url}
try:
  curl -s -X POST {url}/v1/spaces -H 'content-type: application/json' -d '{body}'
  curl -s -X POST {url}/v1/spaces/demo/memories -H 'content-type: application/json' -d '{fact}'
Ctrl-C stops memledger and its engines.
""", flush=True)
