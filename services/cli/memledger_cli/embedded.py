"""The embedded stack: real PostgreSQL and nats-server from pip wheels under ``MEMLEDGER_HOME``,
owned by this process (stopped with it, and replaced if a killed run left them behind)."""

from collections.abc import Iterator
from contextlib import contextmanager

from memledger_ingest.bootstrap import Endpoints
from memledger_platform.engines import EmbeddedNats, EmbeddedPostgres
from memledger_platform.settings import Settings


@contextmanager
def engines(settings: Settings) -> Iterator[Endpoints]:
    """Start (or, in distributed mode, just name) the engines; stop what was started."""
    if settings.mode == "distributed":
        yield Endpoints(settings.postgres_dsn or "", settings.nats_url or "")
        return
    home = settings.home.expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    postgres = EmbeddedPostgres(home / "postgres", port=settings.postgres_port,
                                port_setting="MEMLEDGER_POSTGRES_PORT")
    nats = EmbeddedNats(home, port=settings.nats_port,
                        port_setting="MEMLEDGER_NATS_PORT")
    try:
        dsn = postgres.start().dsn
        url = nats.start()
        yield Endpoints(dsn, url)
    finally:
        nats.stop()
        postgres.stop()
