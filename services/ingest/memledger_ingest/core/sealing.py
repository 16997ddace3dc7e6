"""Whose key seals an event's personal fields, and what an idempotency key is stored as.

- An event's data subject is its command's ``subject_id``, else its stream's (an item's
  revisions stay its subject's), else ``space:<space_id>``.
- An audited retrieval is sealed under every subject whose data it touched: the command's
  ``subject_id``, its session's subject, and the subject of each memory it showed (by a key
  derived from all of theirs, ``crypto.combined``), so erasing any one of them erases the
  query. One that touched no subject's data falls back to ``space:<space_id>``. A theme's
  label is sealed the same way, under the subjects of its members.
- With a keyring, an idempotency key is stored (in the envelope and the idempotency table)
  as the keyring's keyed digest: a client's key may name a person, and the log keeps it.
"""

from collections.abc import Mapping
from uuid import UUID

from memledger_ingest.domain.streams import StreamState
from memledger_ingest.domain.targets import retrieval_reads, theme_reads
from memledger_platform.crypto import Keyring
from memledger_schemas.commands import CommandBase, RecordRetrieval, RecordTheme

_SEALED_BY_READS = (RecordRetrieval, RecordTheme)
"""Commands sealed under the subjects of what they read, not their stream's."""


def subjects_of(cmd: CommandBase, stream: StreamState | None, space_id: str,
                states: Mapping[UUID, StreamState], tenant: str) -> list[str]:
    """The data subjects whose keys seal a personal event of ``cmd`` on a stream in state
    ``stream`` (``states``: those the command read); the first is the envelope's
    ``subject_id``. Never empty."""
    # By exact type, as commands are dispatched: an isinstance of a pydantic model goes
    # through its metaclass's check, a cost on every sealed event of a write.
    if type(cmd) in _SEALED_BY_READS:
        reads = (retrieval_reads(cmd) if isinstance(cmd, RecordRetrieval)
                 else theme_reads(cmd) if isinstance(cmd, RecordTheme) else ())
        found = [cmd.subject_id] + [s.subject for ref in reads
                                    if (s := states.get(ref.stream_id(tenant))) is not None]
        touched = list(dict.fromkeys(s for s in found if s is not None))
        return touched or [f"space:{space_id}"]
    subject = cmd.subject_id or (stream.subject if stream else None)
    return [subject or f"space:{space_id}"]


def stored_key(keyring: Keyring | None, tenant: str, key: str | None) -> str | None:
    """What ``key`` is stored as: its keyed digest with a keyring; as sent without one
    (nothing is sealed then either)."""
    if keyring is None or key is None:
        return key
    return keyring.digest(tenant, key)
