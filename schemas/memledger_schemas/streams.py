"""How a stream of the log is named: its id is derived from its tenant, its kind and its key
(an item id, a space name), so two tenants that use the same item id or space name never share
(or even see) a stream. The write side names the streams it appends to this way; a reader that
looks one up in the event store (the enricher, an item's enrichment) names it alike."""

from uuid import UUID, uuid5

_NAMESPACE = UUID("6f1c1f1e-6a0b-4c43-9d55-1f9f5e3c2a10")


def stream_id(tenant: str, kind: str, key: str) -> UUID:
    """The id of ``tenant``'s stream of ``kind`` named ``key`` (e.g. "enrichment", an item id)."""
    return uuid5(_NAMESPACE, f"{tenant}/{kind}/{key}")
