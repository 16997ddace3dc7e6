"""The query's embedding waited for within a deadline, and search ranking by keywords alone
without it."""

from collections.abc import Sequence
from concurrent.futures import Future

import pytest

from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_query.core.degrade import BoundedEmbedding, ranking
from memledger_query.core.ranking import Recipe
from memledger_query.core.semantic import Layer, search
from tests.unit.test_semantic_search import BUILD, NOW, TEA, point, scope


def test_an_embedding_that_arrives_in_time_is_used_and_nothing_is_degraded() -> None:
    done: Future[Sequence[float] | None] = Future()
    done.set_result([1.0, 0.0])
    bounded = BoundedEmbedding(done, deadline=10.0, monotonic=lambda: 0.0)
    assert bounded() == [1.0, 0.0]
    assert bounded.degraded == []


def test_a_late_embedding_is_given_up_at_the_deadline_and_named() -> None:
    never: Future[Sequence[float] | None] = Future()
    bounded = BoundedEmbedding(never, deadline=5.0, monotonic=lambda: 5.0)  # already due
    assert bounded() is None
    assert (bounded.failure, bounded.degraded) == ("timeout", ["embedder"])


def test_a_failed_embedding_is_none_with_its_error_and_is_not_waited_for_twice() -> None:
    failed: Future[Sequence[float] | None] = Future()
    failed.set_exception(ConnectionError("model unreachable"))
    bounded = BoundedEmbedding(failed, deadline=1.0, monotonic=lambda: 0.0)
    assert bounded() is None
    assert bounded() is None
    assert bounded.failure == "ConnectionError: model unreachable"


def test_an_embedding_is_ready_once_done_failed_or_given_up_and_not_before() -> None:
    pending: Future[Sequence[float] | None] = Future()
    late = BoundedEmbedding(pending, deadline=5.0, monotonic=lambda: 5.0)
    assert not late.ready
    assert late() is None  # given up at its deadline: calling again waits no more
    assert late.ready
    arriving: Future[Sequence[float] | None] = Future()
    bounded = BoundedEmbedding(arriving, deadline=10.0, monotonic=lambda: 0.0)
    assert not bounded.ready
    arriving.set_exception(ConnectionError("model unreachable"))
    assert bounded.ready


def test_the_ranking_named_follows_the_weights_and_the_embedder() -> None:
    assert ranking(0.7, 0.3, []) == "hybrid"
    assert ranking(0.7, 0.3, ["embedder"]) == "keyword"
    assert ranking(0.0, 1.0, []) == "keyword"
    assert ranking(1.0, 0.0, []) == "dense"


def test_without_the_embedding_a_search_ranks_by_keywords_alone_above_the_threshold() -> None:
    index = InMemoryVectorIndex()
    index.upsert([point(1, TEA), point(2, BUILD)])
    [layer] = search(index, lambda: None, "green tea morning", [Layer("space", scope(), 5)],
                     Recipe(), threshold=0.25, now=NOW)
    [hit] = layer.hits
    assert hit.candidate.item_id == "item-1"
    assert hit.candidate.dense is None
    keyword = hit.candidate.keyword or 0.0
    # The keyword score alone (weight 1): at the hybrid weights (0.3) it would fall below 0.25.
    assert hit.relevance == pytest.approx(keyword / (keyword + Recipe().keyword_half))
