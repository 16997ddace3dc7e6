"""Where the engines are: PostgreSQL and NATS, given by settings (distributed) or started by
``memledger up`` (embedded)."""

from dataclasses import dataclass

from memledger_platform.settings import Settings


@dataclass(frozen=True)
class Endpoints:
    """Where the engines are: given by settings (distributed) or started by ``memledger up``."""

    postgres_dsn: str
    nats_url: str


def endpoints_from(settings: Settings) -> Endpoints:
    if not settings.postgres_dsn or not settings.nats_url:
        raise ValueError("set MEMLEDGER_POSTGRES_DSN and MEMLEDGER_NATS_URL, or use "
                         "`memledger up` to start embedded engines")
    return Endpoints(settings.postgres_dsn, settings.nats_url)
