"""SQL statements composed once per process, not at every batch: under single writes a
batch holds one event, and composing its statements again (quoting every identifier) was
about a tenth of the projector's CPU."""

from collections.abc import Callable
from functools import lru_cache, wraps
from typing import Any

from psycopg import sql


def rendered(build: Callable[..., sql.Composable]) -> Callable[..., bytes]:
    """``build`` whose statement is rendered to bytes once for each set of arguments (all
    hashable: the schema, table and column names, and types it depends on). Bounded, since
    every rebuild names a new schema."""

    @lru_cache(maxsize=1024)
    @wraps(build)
    def statement(*args: Any) -> bytes:
        return build(*args).as_bytes(None)

    return statement
