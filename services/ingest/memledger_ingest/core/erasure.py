"""Erasing a data subject: check legal holds, destroy the subject's keys (and vacuum what the
key table kept of them), record ``subject.erased``. The read models then scrub or delete what
they hold of the subject when they apply that event, and vacuum it out of their files; the
receipt gathers what each purged (``memledger erase`` and the query service's erasure
receipt)."""

import asyncio
from dataclasses import dataclass
from typing import Any

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.domain.streams import StreamRef
from memledger_platform import receipts
from memledger_platform.crypto import Keyring
from memledger_platform.events import decode
from memledger_platform.eventstore import EventStore
from memledger_schemas.commands import EraseSubject
from memledger_schemas.event_types import EventType


class LegalHold(Exception):
    """The subject has data in a space under legal hold: nothing was destroyed."""

    def __init__(self, subject: str, holds: list[tuple[str, int]]) -> None:
        named = ", ".join(f"{space!r} (policy version {version})" for space, version in holds)
        super().__init__(f"subject {subject!r} has data in space(s) under legal hold: {named}; "
                         "lift the hold (set_space_policy with legal_hold false) to erase")
        self.holds = holds


@dataclass(frozen=True)
class Erasure:
    store: EventStore
    keyring: Keyring
    writer: GroupCommitWriter
    receipts_at: tuple[str, str] | None = None
    """(DSN, schema) of the receipts table: ``erase`` then waits for the read models' reports."""

    async def erase(self, tenant: str, subject: str, reason: str | None = None,
                    actor: str = "erasure", wait_seconds: float = 0.0) -> dict[str, Any]:
        """Erase ``subject`` in ``tenant``; the receipt: the write side, and (waiting up to
        ``wait_seconds``) what each read model purged."""
        spaces = await asyncio.to_thread(self.keyring.spaces_of, tenant, subject)
        holds = await asyncio.to_thread(legal_holds, self.store, tenant, spaces)
        if holds:
            raise LegalHold(subject, holds)
        destroyed = await asyncio.to_thread(self.keyring.destroy, tenant, subject)
        vacuumed = await asyncio.to_thread(self.keyring.compact)
        [result] = await self.writer.submit(tenant, [EraseSubject(
            subject_id=subject, key_ids=tuple(destroyed), reason=reason)], actor=actor)
        receipt: dict[str, Any] = {
            "tenant": tenant, "subject_id": subject, "keys_destroyed": destroyed,
            "spaces": spaces, "vacuumed": vacuumed, "position": result.position,
            "event_id": str(result.event_ids[0])}
        if self.receipts_at is not None and wait_seconds > 0:
            receipt["purged"], receipt["complete"] = await asyncio.to_thread(
                receipts.wait_for, *self.receipts_at, tenant, subject, result.position,
                wait_seconds)
        return receipt


def legal_holds(store: EventStore, tenant: str, spaces: list[str]) -> list[tuple[str, int]]:
    """The spaces among ``spaces`` whose latest policy sets a legal hold, with its version."""
    ids = {StreamRef("space", s).stream_id(tenant): s for s in spaces}
    held = []
    for stream_id, events in store.read_streams(list(ids)).items():
        policies = [decode(e.data, position=e.position, recorded_at=e.recorded_at).payload
                    for e in events if e.event_type == EventType.SPACE_POLICY_SET]
        if policies and policies[-1].get("legal_hold"):
            held.append((ids[stream_id], int(policies[-1].get("policy_version", len(policies)))))
    return sorted(held)
