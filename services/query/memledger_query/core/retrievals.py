"""The retrieval audit: an audited search or context call is pinned to its basis, answered,
then recorded as ``retrieval.performed`` (through ingest, by the ``Recorder``) before the answer
goes out; a recorded retrieval can be read back and replayed at its basis.

A call is audited when it asks (``audit: true``) or when the policy of a space it reads sets
``audit_retrievals``. Pinning makes the answer and its replay the same computation: the call
runs as of the basis' position and valid time (a current search would read whatever the index
holds when it runs, which a replay cannot know).
"""

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from memledger_platform.crypto import ERASED
from memledger_query.core.reader import Reader
from memledger_query.core.recorder import Recorder, RecordingFailed
from memledger_query.core.retrieval_views import audited_by_policy, search_gates
from memledger_query.entrypoints.api import RETRY_AFTER_SECONDS, Problem
from memledger_schemas.api.reads import Basis
from memledger_schemas.api.retrievals import Difference, RetrievalRecord, Shown
from memledger_schemas.api.semantic import (
    ContextAnswer,
    ContextRequest,
    SearchAnswer,
    SearchRequest,
    TimeTravel,
)
from memledger_schemas.commands import RecordRetrieval
from memledger_schemas.events import RetrievalBasis, Retrieved
from memledger_schemas.types import SpaceId

T = TypeVar("T", bound=TimeTravel)

_NOT_REPLAYED = {"query", "subject", "audit"}
"""Left out of the recorded parameters: the free text (recorded apart, sealed as personal
data) and the audit flag (a replay records nothing)."""


async def wanted(reader: Reader, tenant: str, asked: bool, spaces: Sequence[str]) -> bool:
    """Whether to audit a call that asked (or not) and reads ``spaces`` (none: all)."""
    return asked or await asyncio.to_thread(wanted_now, reader, tenant, asked, spaces)


def wanted_now(reader: Reader, tenant: str, asked: bool, spaces: Sequence[str]) -> bool:
    """``wanted``, from a worker thread."""
    return asked or reader.run(audited_by_policy, tenant, spaces)


def search_gates_now(reader: Reader, tenant: str, asked: bool, spaces: Sequence[str]
                     ) -> tuple[bool, bool]:
    """``wanted_now`` for a search, and whether the tenant has any feedback to rank by (one
    round trip: ``search_gates``)."""
    audited, signalled = reader.run(search_gates, tenant, spaces)
    return asked or audited, signalled


def pinned(body: T, at: Basis) -> T:
    """``body`` as of ``at``: the request that its answer and its replay both run."""
    return body.model_copy(update={"as_of_position": at.position, "valid_at": at.valid_at,
                                   "recorded_at": None, "min_position": None})


@dataclass(frozen=True)
class _Asked:
    """What an audited call asked: the recorded request."""

    operation: str
    query: str | None
    subject: str | None
    session_id: UUID | None
    """Its data subject's key seals the query (with those of the memories shown)."""
    spaces: Sequence[SpaceId]
    parameters: dict[str, Any]


async def record_search(recorder: Recorder, tenant: str, actor: str, body: SearchRequest,
                        granted: Sequence[str], answer: SearchAnswer, policy: str
                        ) -> SearchAnswer:
    """Record what ``answer`` showed; the answer with its ``retrieval_id`` (503 if it could
    not be recorded: an audited call is not answered unaudited)."""
    parameters = {**body.model_dump(mode="json", exclude=_NOT_REPLAYED), "granted": granted}
    shown = [Retrieved(ref=h.item_id, score=h.score, section=h.layer) for h in answer.results]
    asked = _Asked("search", body.query, body.subject, body.session_id, body.spaces,
                   parameters)
    command = _command(asked, answer.basis, shown, policy, actor)
    position = await _record(recorder, tenant, command)
    return answer.model_copy(update={"retrieval_id": str(command.retrieval_id),
                                     "retrieval_position": position})


async def record_context(recorder: Recorder, tenant: str, actor: str, body: ContextRequest,
                         answer: ContextAnswer, policy: str) -> ContextAnswer:
    """Like ``record_search``, for a context bundle: every entry of every section, in order."""
    shown = [Retrieved(ref=e.ref, score=e.score, section=s.name)
             for s in answer.sections for e in s.entries]
    asked = _Asked("context", answer.query, None, body.session_id, [body.space_id],
                   body.model_dump(mode="json", exclude=_NOT_REPLAYED))
    command = _command(asked, answer.basis, shown, policy, actor)
    position = await _record(recorder, tenant, command)
    return answer.model_copy(update={"retrieval_id": str(command.retrieval_id),
                                     "retrieval_position": position})


def _command(asked: _Asked, at: Basis, shown: list[Retrieved], policy: str, actor: str
             ) -> RecordRetrieval:
    retrieval_id = uuid.uuid4()
    return RecordRetrieval.model_validate({
        "retrieval_id": retrieval_id, "operation": asked.operation, "query": asked.query,
        "subject": asked.subject, "session_id": asked.session_id,
        "spaces": tuple(asked.spaces), "parameters": asked.parameters,
        "basis": RetrievalBasis(position=at.position, recorded_at=at.recorded_at,
                                valid_at=at.valid_at),
        "results": tuple(shown), "policy_version": policy, "actor": actor,
        "idempotency_key": f"retrieval:{retrieval_id}"})


async def _record(recorder: Recorder, tenant: str, command: RecordRetrieval) -> int:
    try:
        return (await recorder.record(tenant, command)).position
    except RecordingFailed as failed:
        raise Problem(503, "audit_failed", f"the retrieval could not be recorded, so it is "
                      f"not answered: {failed}", retry_after_seconds=RETRY_AFTER_SECONDS) from None


# --- replay ---------------------------------------------------------------------------------

def search_request(record: RetrievalRecord) -> tuple[SearchRequest, list[str]]:
    """The recorded search request (pinned to its basis) and the spaces its key was granted."""
    parameters = dict(_replayable(record).parameters)
    granted = list(parameters.pop("granted", ()))
    return SearchRequest.model_validate({**parameters, "query": record.query,
                                         "subject": record.subject}), granted


def context_request(record: RetrievalRecord) -> ContextRequest:
    """The recorded context request, with the query it searched (the same as the session's
    last user message at the basis, when it named none)."""
    return ContextRequest.model_validate({**_replayable(record).parameters,
                                          "query": record.query})


def _replayable(record: RetrievalRecord) -> RetrievalRecord:
    if record.query == ERASED:  # its parameters went with it
        raise Problem(409, "not_replayable", "the query of this retrieval was erased with "
                      "its data subject")
    if not record.parameters:
        raise Problem(409, "not_replayable", "this retrieval was recorded without its "
                      "request (schema version 1), so it cannot be replayed")
    return record


def shown_by_search(answer: SearchAnswer) -> list[Shown]:
    return [Shown(ref=h.item_id, score=h.score, section=h.layer) for h in answer.results]


def shown_by_context(answer: ContextAnswer) -> list[Shown]:
    return [Shown(ref=e.ref, score=e.score, section=s.name)
            for s in answer.sections for e in s.entries]


def compare(recorded: Sequence[Shown], replayed: Sequence[Shown]
            ) -> tuple[bool, bool, list[Difference]]:
    """(same, same items in the same order, every place where the two lists differ)."""
    length = max(len(recorded), len(replayed))
    pairs = [(_at(recorded, n), _at(replayed, n)) for n in range(length)]
    differences = [Difference(rank=n, recorded=a, replayed=b)
                   for n, (a, b) in enumerate(pairs) if a != b]
    same_items = all(a is not None and b is not None and (a.ref, a.section) == (b.ref, b.section)
                     for a, b in pairs)
    return not differences, same_items, differences


def _at(entries: Sequence[Shown], n: int) -> Shown | None:
    return entries[n] if n < len(entries) else None
