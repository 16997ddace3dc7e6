"""More of the API as data (as ``calls``): the lifecycle reads (supersession chains, merge
suggestions), the items naming an entity, the retrieval audit, the vector digest, erasure and
the query service's health."""

from typing import Any

from memledger_client.calls import AsOf, Call, Consistency, _get, _seg, health
from memledger_client.results import (
    ChainAnswer,
    ItemList,
    MergeSuggestions,
    ReplayAnswer,
    RetrievalRecord,
    SubjectErasure,
    VectorSummary,
)
from memledger_schemas.api.vectors import SUMMARY_PATH


def chain(space_id: str, item_id: str, as_of_position: int | None,
          consistency: Consistency) -> Call[ChainAnswer]:
    """The items ``item_id`` superseded and was superseded by, and the links between them."""
    return _get(f"/v1/spaces/{_seg(space_id)}/items/{_seg(item_id)}/chain",
                ChainAnswer.model_validate, {**consistency, "as_of_position": as_of_position})


def merge_suggestions(space_id: str, as_of_position: int | None, limit: int,
                      consistency: Consistency) -> Call[MergeSuggestions]:
    return _get(f"/v1/spaces/{_seg(space_id)}/merge-suggestions",
                MergeSuggestions.model_validate,
                {**consistency, "as_of_position": as_of_position, "limit": limit})


def items_mentioning(space_id: str, entity_id: str, limit: int, at: AsOf) -> Call[ItemList]:
    """The items that mention ``entity_id`` (an id may hold "/": it is sent escaped)."""
    return _get(f"/v1/spaces/{_seg(space_id)}/entities/{_seg(entity_id)}/items",
                ItemList.model_validate, {**at, "limit": limit})


def retrieval(retrieval_id: str, consistency: Consistency) -> Call[RetrievalRecord]:
    """What an audited search or context call showed, at which basis and policy."""
    return _get(f"/v1/retrievals/{_seg(retrieval_id)}", RetrievalRecord.model_validate,
                dict(consistency))


def replay_retrieval(retrieval_id: str, consistency: Consistency) -> Call[ReplayAnswer]:
    """The audited call run again at its recorded basis, compared entry by entry."""
    found = _get(f"/v1/retrievals/{_seg(retrieval_id)}/replay", ReplayAnswer.model_validate,
                 dict(consistency))
    return Call("POST", found.path, found.parse, params=found.params, ryw=found.ryw)


def vectors_summary(as_of_position: int | None, wait_ms: int | None
                    ) -> Call[VectorSummary]:
    """The vector read model's digest per space (an admin key)."""
    params = {k: v for k, v in (("as_of_position", as_of_position), ("wait_ms", wait_ms))
              if v is not None}
    return Call("GET", SUMMARY_PATH, VectorSummary.model_validate, params=params)


def erase_subject(subject_id: str, reason: str | None) -> Call[SubjectErasure]:
    """Erase a data subject: its keys destroyed, ``subject.erased`` recorded (an admin key)."""
    body: dict[str, Any] = {} if reason is None else {"reason": reason}
    return Call("POST", f"/v1/subjects/{_seg(subject_id)}/erase",
                SubjectErasure.model_validate, body=body)


def query_health() -> Call[dict[str, Any]]:
    """The query service's health: its read models' position and lag."""
    return health("/v1/query/health")
