"""Which partition of the events a read is about (docs/adr/0016-capacity-model.md).

With the events partitioned by tenant, each partition's read models have a checkpoint of their
own: a read for tenant T names T's partition's checkpoint as its basis and waits on it alone
for ``min_position``. The query service learns the tenant when it authenticates a request, long
before the read functions run, so it is carried in the request's context (each request runs in
a task of its own; a worker thread gets a copy) rather than through every read's parameters.
Without a tenant (or with one partition) a read takes the lowest checkpoint of all, which is
never ahead of any partition's.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from memledger_schemas.subjects import partition_of

_tenant: ContextVar[str | None] = ContextVar("memledger_read_tenant", default=None)
_partition: ContextVar[int | None] = ContextVar("memledger_read_partition", default=None)


def reading_for(tenant: str) -> None:
    """The current request reads ``tenant``'s data (set once it is authenticated)."""
    _tenant.set(tenant)


def read_partition(partitions: int) -> int | None:
    """The partition the current request reads: its tenant's, if partitioned and known."""
    tenant = _tenant.get()
    return partition_of(tenant, partitions) if partitions > 1 and tenant else None


@contextmanager
def checkpoint_of(partition: int | None) -> Iterator[None]:
    """Within the block, ``checkpoint_partition`` is ``partition``."""
    token = _partition.set(partition)
    try:
        yield
    finally:
        _partition.reset(token)


def checkpoint_partition() -> int | None:
    """Whose checkpoint a read function takes as its basis (``None``: the lowest)."""
    return _partition.get()
