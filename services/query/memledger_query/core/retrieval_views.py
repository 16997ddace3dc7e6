"""Plain reads for the retrieval audit: a recorded retrieval (from the change log, which keeps
every event's payload, personal fields scrubbed on erasure), and whether a space's policy asks
for its retrievals to be audited."""

from collections.abc import Sequence
from typing import Any

from psycopg import Connection, sql

from memledger_schemas.api.reads import Basis
from memledger_schemas.api.retrievals import RetrievalRecord, Shown
from memledger_schemas.event_types import EventType
from memledger_schemas.upcasting import upcast

EVENT_TYPE = EventType.RETRIEVAL_PERFORMED


def retrieval(conn: Connection[Any], s: str, tenant: str, retrieval_id: str
              ) -> RetrievalRecord | None:
    """The retrieval recorded as ``retrieval_id`` in ``tenant``, if any."""
    row = conn.execute(sql.SQL(
        "SELECT position, recorded_at, actor, payload FROM {}.changes WHERE tenant_id = %s "
        "AND subject = %s AND event_type = %s ORDER BY position LIMIT 1").format(
        sql.Identifier(s)), (tenant, retrieval_id, EVENT_TYPE)).fetchone()
    if row is None:
        return None
    position, recorded_at, actor, payload = row
    _, p = upcast(EVENT_TYPE, 2 if "results" in payload else 1, payload)
    return RetrievalRecord(
        retrieval_id=retrieval_id, position=position, recorded_at=recorded_at, actor=actor,
        operation=p["operation"], query=p.get("query"), subject=p.get("subject"),
        spaces=list(p.get("spaces") or ()), parameters=p.get("parameters") or {},
        basis=Basis.model_validate(p["basis"]),
        results=[Shown.model_validate(r) for r in p["results"]],
        policy_version=p["policy_version"])


_AUDITED = sql.SQL(
    "EXISTS (SELECT 1 FROM {s}.spaces WHERE tenant_id = %(tenant)s AND "
    "(cardinality(%(spaces)s::text[]) = 0 OR space_id = ANY(%(spaces)s::text[])) AND "
    "policy->>'audit_retrievals' = 'true')")


def audited_by_policy(conn: Connection[Any], s: str, tenant: str, spaces: Sequence[str]
                      ) -> bool:
    """Whether the policy of any of ``spaces`` (none: any space of the tenant) sets
    ``audit_retrievals`` (read defensively: a policy without the field does not audit)."""
    row = conn.execute(sql.SQL("SELECT {}").format(_AUDITED.format(s=sql.Identifier(s))),
                       {"tenant": tenant, "spaces": list(spaces)}).fetchone()
    return bool(row and row[0])


def search_gates(conn: Connection[Any], s: str, tenant: str, spaces: Sequence[str]
                 ) -> tuple[bool, bool]:
    """``audited_by_policy``, and whether ``tenant`` has any feedback (signals) at all: what
    a search must know before it runs, in one round trip. A tenant without feedback has
    nothing to look up for its candidates, which saves a search its second round trip."""
    row = conn.execute(sql.SQL(
        "SELECT {audited}, EXISTS (SELECT 1 FROM {s}.signals WHERE tenant_id = %(tenant)s)"
    ).format(audited=_AUDITED.format(s=sql.Identifier(s)), s=sql.Identifier(s)),
        {"tenant": tenant, "spaces": list(spaces)}).fetchone()
    return (bool(row[0]), bool(row[1])) if row else (False, False)
