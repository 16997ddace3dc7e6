"""What ingest answers an erasure with (``POST /v1/subjects/{subject}/erase``)."""

from typing import Any

from pydantic import BaseModel


class ErasureReceipt(BaseModel):
    """What an erasure destroyed and recorded, and what each read model purged by then."""

    tenant: str
    subject_id: str
    keys_destroyed: list[str]
    spaces: list[str]
    position: int
    event_id: str
    purged: dict[str, Any] | None = None
    complete: bool | None = None
