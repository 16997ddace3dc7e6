"""The rerank stage: the Cohere adapter against a local fake of Cohere's rerank API (the real
SDK over real HTTP, no network beyond the loopback), and how a reranker reorders a search's
best hits."""

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from memledger_platform.settings import Settings
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import OPEN, IndexedPoint, Scope
from memledger_platform.vectorindex.sparse import encode_document
from memledger_query.core import rerank
from memledger_query.core.ranking import Candidate, Recipe, rank
from memledger_query.core.rerank import CohereReranker, Reranker, RerankerUnavailable, reorder
from memledger_query.core.semantic import Layer, Refinements, Rerank, search
from tests.cohere_fake import FakeCohere, serving


class FakeCohereRerank(FakeCohere):
    """Answers POST /v2/rerank as Cohere does: results by index, best first, each with a
    relevance score (here: the share of the query's words the document holds)."""

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        words = set(body["query"].lower().split())
        scored = [{"index": i, "relevance_score": len(words & set(d.lower().split()))
                   / max(len(words), 1)} for i, d in enumerate(body["documents"])]
        scored.sort(key=lambda r: -float(r["relevance_score"]))
        return {"id": "x", "results": scored[:body.get("top_n")],
                "meta": {"api_version": {"version": "2"}}}


@pytest.fixture
def fake() -> Iterator[FakeCohere]:
    with serving(FakeCohereRerank()) as running:
        yield running


def test_cohere_scores_every_document_in_the_order_given(fake: FakeCohere) -> None:
    reranker = CohereReranker("good-key", base_url=fake.url, timeout_seconds=5)
    scores = reranker.scores("tea in the morning", ["coffee at night", "tea in the morning",
                                                    "tea at night"])
    assert scores == [0.0, 1.0, 0.25]
    assert fake.requests[0]["path"] == "/v2/rerank"
    assert fake.requests[0]["model"] == "rerank-v3.5"
    assert fake.requests[0]["top_n"] == 3
    assert reranker.model_id == "cohere/rerank-v3.5"
    assert reranker.scores("tea", []) == []
    assert len(fake.requests) == 1, "no documents: no call"


def test_a_refused_cohere_key_names_the_setting(fake: FakeCohere) -> None:
    reranker = CohereReranker("bad-key", base_url=fake.url, max_retries=0, timeout_seconds=5)
    with pytest.raises(RerankerUnavailable, match="MEMLEDGER_COHERE_API_KEY"):
        reranker.scores("tea", ["tea"])


def test_the_reranker_is_off_unless_configured_and_cohere_needs_a_key() -> None:
    assert rerank.from_settings(Settings()) is None
    on = rerank.from_settings(Settings(reranker="cohere", cohere_api_key="k",
                                       cohere_base_url="http://127.0.0.1:9"))
    assert isinstance(on, CohereReranker)
    with pytest.raises(ValueError, match="MEMLEDGER_RERANKER=cohere needs"):
        Settings(reranker="cohere")


class ByLength(Reranker):
    """Prefers shorter documents (a stand-in whose order differs from the fused one)."""

    model_id = "by-length"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        self.calls.append(list(documents))
        return [1 / len(d) for d in documents]


def candidate(item: str, content: str, dense: float) -> Candidate:
    return Candidate(item, {"kind": "fact", "content": content, "content_at": None,
                            "importance": 0.5, "confidence": 1.0}, dense=dense)


def test_reorder_rescores_the_first_hits_and_leaves_the_rest_in_order() -> None:
    ranked = rank([candidate("long", "a long answer", 0.9), candidate("short", "short", 0.8),
                   candidate("third", "third hit", 0.7)], Recipe(), 0.0)
    reranker = ByLength()
    found = reorder(ranked, "q", reranker, depth=2)
    assert [r.candidate.item_id for r in found] == ["short", "long", "third"]
    assert reranker.calls == [["a long answer", "short"]]
    assert found[0].explain["rerank"] == pytest.approx(0.2)
    assert found[0].score == pytest.approx(0.2)  # every other factor is 1 here
    assert found[2] is ranked[2]
    assert "rerank" not in ranked[0].explain


def test_a_reranked_message_keeps_the_lift_of_its_session() -> None:
    said = {"kind": "message", "session": "s1", "content_at": None, "importance": 0.5,
            "confidence": 1.0}
    ranked = rank([Candidate("named", {**said, "content": "the topic"}, keyword=12.0),
                   Candidate("answer", {**said, "content": "yes"}, dense=0.8)], Recipe(), 0.0)
    found = {r.candidate.item_id: r for r in reorder(ranked, "q", ByLength(), depth=2)}
    assert found["answer"].explain["session_factor"] == pytest.approx(1.375)
    assert found["answer"].score == pytest.approx(1 / 3 * 1.375)


def test_a_reranked_turn_that_asks_stays_lowered_by_its_asking() -> None:
    said = {"kind": "message", "session": "s1", "content_at": None, "importance": 0.5,
            "confidence": 1.0}
    ranked = rank([Candidate("asks", {**said, "content": "Is it?"}, dense=0.8),
                   Candidate("says", {**said, "content": "It is."}, dense=0.8)],
                  Recipe(session_weight=0.0), 0.0)
    found = {r.candidate.item_id: r for r in reorder(ranked, "q", ByLength(), depth=2)}
    assert found["asks"].explain["ask_factor"] == pytest.approx(0.7)
    assert found["asks"].score == pytest.approx(found["says"].score * 0.7), \
        "the reranker judges both texts alike by their length: the question still counts"


def test_a_search_with_a_reranker_shows_its_order_and_without_one_the_fused_order() -> None:
    index = InMemoryVectorIndex()
    for n, (content, vector) in enumerate([("a much longer answer about tea", [1.0, 0.0]),
                                           ("tea", [0.6, 0.8])]):
        index.upsert([IndexedPoint(f"00000000-0000-0000-0000-00000000000{n}", vector, {
            "tenant": "t", "item_id": f"i{n}", "space": "s", "kind": "fact",
            "content": content, "importance": 0.5, "confidence": 1.0, "content_at": None,
            "valid_from": 0.0, "valid_to": OPEN, "sys_from": 1.0, "sys_to": OPEN},
            encode_document(content))])
    layer = [Layer("filtered", Scope(tenant="t", valid_at=1.0), 10)]

    def order(reranked: Rerank | None) -> list[str]:
        found = search(index, [1.0, 0.0], "tea", layer, Recipe(), threshold=0, now=1.0,
                       refine=Refinements(rerank=reranked))
        return [r.candidate.item_id for r in found[0].hits]

    assert order(None) == ["i0", "i1"]
    assert order(Rerank(ByLength(), depth=5)) == ["i1", "i0"]
