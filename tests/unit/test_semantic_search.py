"""Semantic search over the vector index port (the exact in-memory index, hand-made points):
tenants and spaces never leak, layers never repeat an item, the threshold and the subject
filter cut, near-duplicates collapse."""

from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import OPEN, IndexedPoint, Scope, Vector
from memledger_platform.vectorindex.sparse import encode_document, encode_query
from memledger_query.core.degrade import BoundedEmbedding
from memledger_query.core.ranking import MODES, Candidate, Recipe, Signals, rank
from memledger_query.core.semantic import Found, Layer, Refinements, search

NOW = 1.79e9
EMBEDDER = HashingEmbedder(dims=256)
RECIPE = Recipe()
THRESHOLD = MODES["execution"].threshold
QUERY = TEA = "Alice drinks green tea every morning"
HOME, LEMON = TEA + " at home", TEA + " with lemon"
"""Close to the query (cosine 0.87 with it, 0.75 with each other), far from duplicates."""
BUILD = "The build takes nine minutes"
"""Shares no word with the query."""


def point(n: int, content: str, *, tenant: str = "acme", space: str = "notes",
          item: str | None = None, embedded: bool = True, **payload: Any) -> IndexedPoint:
    """Point ``n`` (of item ``item``, else item-<n>): a current fact, valid since 2020."""
    base: dict[str, Any] = {"tenant": tenant, "space": space, "item_id": item or f"item-{n}",
                            "kind": "fact", "tags": [], "content": content, "session": None,
                            "agent": None, "importance": 0.5, "confidence": 1.0,
                            "content_at": NOW, "subject": None, "valid_from": 1.58e9,
                            "valid_to": OPEN, "sys_from": 1.0, "sys_to": OPEN}
    return IndexedPoint(f"00000000-0000-0000-0000-{n:012d}",
                        EMBEDDER.embed_query(content) if embedded else None,
                        {**base, **payload}, encode_document(content))


def index_of(*points: IndexedPoint) -> InMemoryVectorIndex:
    index = InMemoryVectorIndex()
    index.upsert(points)
    return index


def scope(tenant: str = "acme", **fields: Any) -> Scope:
    return Scope(tenant, valid_at=NOW, **fields)


def find(index: InMemoryVectorIndex, *layers: Layer, text: str = QUERY,
         threshold: float = THRESHOLD, dense: bool = True, subject: str | None = None
         ) -> list[Found]:
    vector = EMBEDDER.embed_query(text) if dense else None
    return search(index, vector, text, layers or (Layer("space", scope(), 5),), RECIPE,
                  threshold=threshold, now=NOW,
                  refine=Refinements(subject=subject))


def items(found: list[Found]) -> list[list[str]]:
    """Each layer's item ids, best first."""
    return [[r.candidate.item_id for r in layer.hits] for layer in found]


def test_the_matching_item_is_found_by_both_dense_and_keyword_search() -> None:
    [layer] = find(index_of(point(1, TEA), point(2, BUILD)))
    [hit] = layer.hits
    assert hit.candidate.item_id == "item-1"
    assert hit.candidate.dense is not None
    assert hit.candidate.keyword is not None
    assert hit.relevance >= THRESHOLD


@pytest.mark.parametrize("dense", [True, False], ids=["dense and keyword", "keyword only"])
def test_another_tenants_identical_item_is_never_returned(dense: bool) -> None:
    index = index_of(point(1, TEA, tenant="globex", item="shared"),
                     point(2, HOME, item="ours"))
    assert items(find(index, threshold=0.0, dense=dense)) == [["ours"]]
    assert items(find(index, Layer("space", scope("globex"), 5), threshold=0.0,
                      dense=dense)) == [["shared"]]


def test_a_search_in_some_spaces_finds_nothing_in_others() -> None:
    index = index_of(point(1, TEA, space="notes"), point(2, HOME, space="private"))
    assert items(find(index, Layer("space", scope(spaces=("notes",)), 5))) == [["item-1"]]
    assert items(find(index, Layer("space", scope(spaces=("private",)), 5))) == [["item-2"]]
    assert sorted(items(find(index, Layer("space", scope(), 5)))[0]) == ["item-1", "item-2"]


def test_hierarchical_layers_never_repeat_an_item_a_narrower_layer_found() -> None:
    index = index_of(point(1, TEA, session="s1"), point(2, HOME, session="s2"))
    found = find(index, Layer("session", scope(session="s1"), 5),
                 Layer("space", scope(), 5))
    assert [layer.layer for layer in found] == ["session", "space"]
    assert items(found) == [["item-1"], ["item-2"]]
    assert [r.candidate.layer for layer in found for r in layer.hits] == ["session", "space"]


def test_the_threshold_cuts_what_is_not_relevant_enough() -> None:
    index = index_of(point(1, TEA), point(2, BUILD))
    [layer] = find(index, threshold=0.0)
    assert len(layer.hits) == 2
    cut = max(r.relevance for r in layer.hits if r.candidate.item_id == "item-2")
    assert items(find(index, threshold=cut + 1e-9)) == [["item-1"]]
    assert items(find(index, threshold=1.01)) == [[]]


def test_each_layer_returns_at_most_its_limit_best_first() -> None:
    words = ("daily", "hot", "iced", "sweet", "bitter", "strong")
    index = index_of(*(point(n, f"{TEA} {word}") for n, word in enumerate(words, 1)))
    [layer] = find(index, Layer("space", scope(), 3), threshold=0.0)
    assert len(layer.hits) == 3
    scores = [r.score for r in layer.hits]
    assert scores == sorted(scores, reverse=True)


def test_the_subject_filter_keeps_only_items_about_that_subject_in_any_case() -> None:
    index = index_of(point(1, HOME, subject="Alice"), point(2, LEMON, subject="Bob"),
                     point(3, TEA))
    assert items(find(index, subject="alice")) == [["item-1"]]
    assert items(find(index, subject="Carol")) == [[]]


def test_a_near_duplicate_collapses_into_the_better_hit_and_is_reported() -> None:
    index = index_of(point(1, TEA, importance=1.0), point(2, TEA))
    [layer] = find(index)
    assert items([layer]) == [["item-1"]]
    assert layer.collapsed == {"item-2": "item-1"}


def test_an_item_not_yet_embedded_is_still_found_by_its_keywords() -> None:
    [layer] = find(index_of(point(1, TEA, embedded=False)), threshold=0.0)
    [hit] = layer.hits
    assert hit.candidate.dense is None
    assert hit.candidate.keyword is not None


def test_a_near_duplicate_found_by_its_keywords_alone_collapses_too() -> None:
    # the query's embedding is not asked for, yet the hits' own vectors are compared
    [layer] = find(index_of(point(1, TEA, importance=1.0), point(2, TEA)), dense=False,
                   threshold=0.0)
    assert items([layer]) == [["item-1"]]
    assert layer.collapsed == {"item-2": "item-1"}


def test_the_signals_of_every_layers_candidates_are_looked_up_once_and_reorder_hits() -> None:
    index = index_of(point(1, HOME, session="s1"), point(2, HOME + " today"),
                     point(3, LEMON))
    asked: list[set[str]] = []

    def signals(ids: Collection[str]) -> Mapping[str, Signals]:
        asked.append(set(ids))
        return {"item-2": Signals(rated=3, rating_sum=15)}

    layers = (Layer("session", scope(session="s1"), 5), Layer("space", scope(), 5))
    plain = search(index, EMBEDDER.embed_query(QUERY), QUERY, layers, RECIPE,
                   threshold=0.0, now=NOW)
    rated = search(index, EMBEDDER.embed_query(QUERY), QUERY, layers, RECIPE,
                   threshold=0.0, now=NOW,
                   refine=Refinements(signals=signals))
    assert asked == [{"item-1", "item-2", "item-3"}]
    assert items(plain)[1] == ["item-3", "item-2"]
    assert items(rated)[1] == ["item-2", "item-3"]
    best = rated[1].hits[0]
    assert best.explain["signals_rated"] == 3
    assert best.explain["utility_factor"] > 1


def test_session_memory_is_searched_only_by_naming_its_session_and_messages_everywhere(
        ) -> None:
    from datetime import UTC, datetime
    from uuid import UUID

    from memledger_query.entrypoints.semantic_http import _layers
    from memledger_schemas.api.reads import Basis
    from memledger_schemas.api.semantic import SearchRequest

    at = Basis(position=5, recorded_at=None, valid_at=datetime(2026, 1, 1, tzinfo=UTC))
    flat = _layers("acme", SearchRequest(query="q", spaces=["main"]), at, 5, ())
    assert [layer.scope.layers for layer in flat] == [("project", "conversation", "ecosystem")]
    session = UUID(int=3)
    named = _layers("acme", SearchRequest(query="q", session_id=session), at, 5, ())
    assert [(layer.scope.session, layer.scope.layers) for layer in named] == [(str(session), ())]
    layered = _layers("acme", SearchRequest(query="q", session_id=session,
                                            scope="hierarchical"), at, 5, ("main",))
    assert [(layer.name, layer.scope.layers, layer.scope.spaces) for layer in layered] == [
        ("session", (), ()), ("project", ("project",), ()),
        ("conversation", ("conversation",), ()), ("ecosystem", ("ecosystem",), ("main",))]
    # earlier turns of other sessions only: the session's own come with its layer
    assert [layer.other_than_session for layer in layered] == [None, None, str(session), None]


def test_an_embedding_still_under_way_is_waited_for_only_after_the_keyword_searches() -> None:
    calls: list[str] = []

    class Watched(InMemoryVectorIndex):
        def search_sparse(self, *args: Any) -> Any:
            calls.append("keyword")
            return super().search_sparse(*args)

        def search(self, *args: Any) -> Any:
            calls.append("dense")
            return super().search(*args)

    index = Watched()
    index.upsert([point(1, TEA), point(2, BUILD)])

    def embedding() -> Any:
        calls.append("embedding awaited")
        return EMBEDDER.embed_query(QUERY)

    layers = (Layer("session", scope(), 5), Layer("space", scope(), 5))
    found = search(index, embedding, QUERY, layers, RECIPE, threshold=THRESHOLD, now=NOW)

    assert calls == ["keyword", "keyword", "embedding awaited", "dense", "dense"]
    assert items(found) == items(find(index_of(point(1, TEA), point(2, BUILD)), *layers))


class OneCallWatched(InMemoryVectorIndex):
    """The exact index, recording each layer's call for its candidates: which parts it asked."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def search_both(self, vector: Any, query: Any, scope: Scope, k: int,
                    fields: Any = None) -> Any:
        self.calls.append("+".join(name for name, asked in (("dense", vector is not None),
                                                             ("keyword", query is not None))
                                   if asked))
        return super().search_both(vector, query, scope, k, fields)


def embedded(done: bool) -> BoundedEmbedding:
    """The query's embedding as the server hands it over: done already, or still under way."""
    future: Future[Sequence[float] | None] = Future()
    if done:
        future.set_result(EMBEDDER.embed_query(QUERY))
    return BoundedEmbedding(future, deadline=float("inf"))


@pytest.mark.parametrize("vector", [EMBEDDER.embed_query(QUERY), embedded(done=True)],
                         ids=["a vector", "an embedding already done"])
def test_with_the_embedding_there_each_layer_asks_the_index_once_for_both_searches(
        vector: Any) -> None:
    index = OneCallWatched()
    index.upsert([point(1, TEA), point(2, BUILD), point(3, HOME)])
    layers = (Layer("session", scope(), 5), Layer("space", scope(), 5))
    found = search(index, vector, QUERY, layers, RECIPE, threshold=THRESHOLD, now=NOW)

    assert index.calls == ["dense+keyword", "dense+keyword"]
    assert items(found) == items(find(index_of(point(1, TEA), point(2, BUILD),
                                               point(3, HOME)), *layers))


def test_an_embedding_still_under_way_is_awaited_after_the_keyword_calls_then_dense_ones(
        ) -> None:
    index = OneCallWatched()
    index.upsert([point(1, TEA), point(2, BUILD)])
    pending = embedded(done=False)
    calls = index.calls

    class Arriving(BoundedEmbedding):
        def __call__(self) -> Sequence[float] | None:
            calls.append("embedding awaited")
            self.future.set_result(EMBEDDER.embed_query(QUERY))
            return super().__call__()

    vector = Arriving(pending.future, pending.deadline)
    layers = (Layer("session", scope(), 5), Layer("space", scope(), 5))
    found = search(index, vector, QUERY, layers, RECIPE, threshold=THRESHOLD, now=NOW)

    assert calls == ["keyword", "keyword", "embedding awaited", "dense", "dense"]
    assert items(found) == items(find(index_of(point(1, TEA), point(2, BUILD)), *layers))


class CountingIndex(InMemoryVectorIndex):
    """The exact index, counting the vectors looked up by point id."""

    def __init__(self) -> None:
        super().__init__()
        self.looked_up: list[str] = []

    def vectors(self, point_ids: Sequence[str]) -> dict[str, Vector]:
        self.looked_up += point_ids
        return super().vectors(point_ids)


def test_an_item_beyond_dense_searchs_best_few_is_ranked_by_its_own_cosine() -> None:
    query = EMBEDDER.embed_query(QUERY)
    # 40 items closer in meaning fill dense search's candidates (max(5 * 4, 40)), so the
    # item that names the query's words is found by its words alone.
    closer = [IndexedPoint(f"00000000-0000-0000-0001-{n:012d}", list(query),
                           point(100 + n, BUILD).payload | {"item_id": f"close-{n}"},
                           encode_document(BUILD)) for n in range(40)]
    words = point(1, HOME)  # cosine 0.87 with the query: below every one of the 40
    index = CountingIndex()
    index.upsert([*closer, words])
    [layer] = search(index, query, QUERY, [Layer("space", scope(), 5)], RECIPE,
                     threshold=0.0, now=NOW)
    hit = next(r for r in layer.hits if r.candidate.item_id == "item-1")
    own = np.dot(EMBEDDER.embed_query(HOME), query) / np.linalg.norm(query) ** 2
    assert hit.candidate.dense == pytest.approx(own, abs=1e-5), \
        "its own cosine, not the 0 of a missing score"
    assert layer.hits[0].candidate.item_id == "item-1", "meaning and words: first"
    assert index.looked_up.count(words.point_id) == 1, "looked up by collapse alone"


class VectorsOnce(CountingIndex):
    """The exact index, also recording the dense searches confined to some items."""

    def __init__(self) -> None:
        super().__init__()
        self.among_items: list[tuple[str, ...]] = []

    def search(self, vector: Sequence[float], scope: Scope, k: int,
               fields: Sequence[str] | None = None) -> Any:
        if scope.items:
            self.among_items.append(scope.items)
        return super().search(vector, scope, k, fields)


def test_words_only_candidates_are_scored_from_vectors_read_once_with_collapses() -> None:
    query = np.asarray(EMBEDDER.embed_query(QUERY))
    rng = np.random.default_rng(5)
    closer = _near_the_query(query, rng)
    words = _naming_some_words(query, rng)
    index = VectorsOnce()
    index.upsert([*closer, *words])
    [found] = search(index, list(query), QUERY, [Layer("space", scope(), 5)], RECIPE,
                     threshold=0.0, now=NOW)
    assert index.among_items == [], "no dense search among the candidates"
    assert sorted(index.looked_up) == sorted(set(index.looked_up)), "each vector read once"
    shown = {r.candidate.item_id: r for r in found.hits}
    exact = {str(h.payload["item_id"]): h.score for h in index.search(
        list(query), scope(), 100)}
    looked = [r for r in shown.values() if r.candidate.keyword is not None
              and r.candidate.item_id.startswith("words")]
    assert looked, "a candidate found by its words alone is shown"
    for hit in looked:
        assert hit.candidate.dense == pytest.approx(exact[hit.candidate.item_id], abs=1e-6)


def _near_the_query(query: Any, rng: Any) -> list[IndexedPoint]:
    """40 items near the query's meaning, without its words."""
    return [IndexedPoint(f"00000000-0000-0000-0001-{n:012d}", list(query * 0.5 + rng.normal(
                             0, 0.3, query.size)),
                         point(100 + n, BUILD).payload | {"item_id": f"close-{n}"},
                         encode_document(BUILD)) for n in range(40)]


def _naming_some_words(query: Any, rng: Any, unembedded_every: int = 0) -> list[IndexedPoint]:
    """20 items naming two to five of the query's words, their meanings from near to
    unrelated; every ``unembedded_every``-th one not yet embedded (0: none)."""
    return [IndexedPoint(f"00000000-0000-0000-0002-{n:012d}",
                         None if unembedded_every and n % unembedded_every == 0 else
                         list(query * rng.uniform(-0.2, 1) + rng.normal(0, 0.05, query.size)),
                         point(200 + n, text).payload | {"item_id": f"words-{n}"},
                         encode_document(text))
            for n, text in enumerate(" ".join(QUERY.split()[:2 + n % 4]) for n in range(20))]


def test_scoring_words_only_candidates_when_they_could_be_shown_ranks_as_scoring_all(
        ) -> None:
    query = np.asarray(EMBEDDER.embed_query(QUERY))
    rng = np.random.default_rng(7)
    closer = [IndexedPoint(f"00000000-0000-0000-0001-{n:012d}", list(query),
                           point(100 + n, BUILD).payload | {"item_id": f"close-{n}"},
                           encode_document(BUILD)) for n in range(40)]
    words = _naming_some_words(query, rng)
    index = CountingIndex()
    index.upsert([*closer, *words])
    layer = Layer("space", scope(), 5)
    [found] = search(index, list(query), QUERY, [layer], RECIPE, threshold=0.0, now=NOW)
    vectors = {p.payload["item_id"]: np.asarray(p.vector) for p in words}
    cosines = {item: float(v @ query / np.linalg.norm(v) / np.linalg.norm(query))
               for item, v in vectors.items()}
    everything = [Candidate(p.payload["item_id"], p.payload, dense=1.0) for p in closer] + [
        Candidate(p.payload["item_id"], p.payload, dense=cosines[p.payload["item_id"]],
                  keyword=h.score)
        for p in words for h in index.search_sparse(encode_query(QUERY), scope(), 100)
        if h.payload["item_id"] == p.payload["item_id"]]
    expected = [r.candidate.item_id for r in rank(everything, RECIPE, NOW)][:5]
    assert [r.candidate.item_id for r in found.hits] == expected
    assert any(r.candidate.item_id.startswith("words") for r in found.hits)


def test_an_item_not_yet_embedded_is_judged_by_its_words_alone_as_the_threshold_goes(
        ) -> None:
    # alone in its scope (dense search finds nothing there) and beside an embedded item; the
    # other space's items make the query's words rare in the index, as they are in use
    elsewhere = [point(10 + n, BUILD, space="other") for n in range(6)]
    for others in ((), (point(2, BUILD),)):
        [layer] = find(index_of(point(1, TEA, embedded=False), *others, *elsewhere),
                       Layer("space", scope(spaces=("notes",)), 5))
        [hit] = layer.hits
        assert hit.candidate.embedded is False
        assert hit.relevance == pytest.approx(hit.explain["keyword"], abs=1e-6)
        assert hit.relevance >= THRESHOLD
        assert hit.explain["words_only"] == 1


def test_scoring_unembedded_candidates_when_they_could_be_shown_ranks_as_scoring_all(
        ) -> None:
    # as above, a third of the items naming the query's words not yet embedded: judged by
    # their words alone, which may rank them above the bound the others are looked up by
    query = np.asarray(EMBEDDER.embed_query(QUERY))
    rng = np.random.default_rng(11)
    closer = _near_the_query(query, rng)
    words = _naming_some_words(query, rng, unembedded_every=3)
    index = CountingIndex()
    index.upsert([*closer, *words])
    layer = Layer("space", scope(), 5)
    [found] = search(index, list(query), QUERY, [layer], RECIPE, threshold=0.0, now=NOW)
    payloads = {str(p.payload["item_id"]): p.payload for p in [*closer, *words]}
    cosines = {str(h.payload["item_id"]): h.score
               for h in index.search(list(query), scope(), 100)}
    keywords = {str(h.payload["item_id"]): h.score
                for h in index.search_sparse(encode_query(QUERY), scope(), 100)}
    fetched = [str(h.payload["item_id"]) for h in index.search(list(query), scope(), 40)]
    everything = [Candidate(item, payloads[item], dense=cosines.get(item),
                            keyword=keywords.get(item), embedded=item in cosines)
                  for item in {*fetched, *keywords}]
    expected = [r.candidate.item_id for r in rank(everything, RECIPE, NOW)][:5]
    assert [r.candidate.item_id for r in found.hits] == expected
    assert any(r.candidate.embedded is False for r in found.hits)


def test_a_search_as_of_before_an_items_embedding_judges_it_as_it_was_then() -> None:
    # The index keeps the current vector with the position it came at (6): pinned before it,
    # as an audited search and its replay are, the item is judged by its words alone and
    # collapses nothing; pinned after it, or now, by meaning too.
    elsewhere = [point(10 + n, BUILD, space="other") for n in range(6)]
    late = point(1, TEA, embedded_from=6.0, sys_from=2.0)
    twin = point(2, TEA, sys_from=1.0, importance=0.4)
    index = index_of(late, twin, *elsewhere)

    def at(position: int | None) -> Found:
        [layer] = find(index, Layer("space", scope(spaces=("notes",), position=position), 5),
                       threshold=0.0)
        return layer
    then = at(5)
    assert items([then]) == [["item-2", "item-1"]], "no vector to collapse it by"
    assert [r.explain["words_only"] for r in then.hits] == [0, 1]
    assert then.hits[1].relevance == pytest.approx(then.hits[1].explain["keyword"], abs=1e-6)
    for later in (6, None):
        assert items([at(later)]) == [["item-1"]], "collapsed into each other once embedded"
        assert at(later).collapsed == {"item-2": "item-1"}


def test_an_embedded_item_is_given_its_cosine_when_the_subject_filter_left_no_dense_hit(
        ) -> None:
    # dense search's best few are all about someone else: the one about Alice, found by its
    # words, is embedded and judged by meaning too, not by its words alone
    query = EMBEDDER.embed_query(QUERY)
    others = [IndexedPoint(f"00000000-0000-0000-0001-{n:012d}", list(query),
                           point(100 + n, BUILD, subject="bob").payload,
                           encode_document(BUILD)) for n in range(40)]
    index = index_of(*others, point(1, HOME, subject="alice"))
    [layer] = find(index, threshold=0.0, subject="alice")
    [hit] = layer.hits
    assert hit.candidate.embedded is True
    assert hit.explain["words_only"] == 0
    assert hit.explain["dense"] > 0.5


def test_a_hit_whose_point_was_erased_before_it_was_read_whole_is_left_out() -> None:
    class ErasedMeanwhile(InMemoryVectorIndex):
        def payloads(self, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
            self.delete([point(1, TEA).point_id])  # between the candidates and the hits
            return super().payloads(point_ids)

    index = ErasedMeanwhile()
    index.upsert([point(1, TEA), point(2, HOME), point(3, LEMON)])
    assert items(find(index)) == [["item-2", "item-3"]]
    assert items(find(index)) == [["item-2", "item-3"]]  # and as the index is now


def test_a_search_with_a_head_answers_as_one_as_of_it_while_the_index_moves_on() -> None:
    # The basis was fixed at position 5; the index then went on before the search ran: a new
    # item (7), a later version of the home item (6, closing its first at 6), and the lemon
    # item's vector (8). Searching with that head answers as a search as of 5 does.
    home = point(1, HOME, item="home", sys_to=6.0, sys_until=6.0)
    home_later = point(2, HOME + " now", item="home", sys_from=6.0)
    lemon = point(3, LEMON, sys_from=2.0, embedded_from=8.0)
    new = point(4, TEA, sys_from=7.0)
    build = point(5, BUILD, sys_from=3.0)
    index = index_of(home, home_later, lemon, new, build)

    def at(**when: Any) -> list[tuple[str, float]]:
        [layer] = find(index, Layer("space", scope(**when), 5), threshold=0.0)
        return [(r.candidate.item_id, r.score) for r in layer.hits]

    assert at(head=5) == at(position=5)
    assert [item for item, _ in at(head=5)] == ["home", "item-3", "item-5"]
    assert {item for item, _ in at()} >= {"home", "item-4"}, "now: the new item is found"
