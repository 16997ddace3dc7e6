"""The VectorIndex contract (port.py's docstring) as one suite, run against every adapter: the
exact in-memory one, Qdrant Edge (in process) and the Qdrant server adapter on qdrant-client's
local mode (no network); tests/integration/test_qdrant_container.py runs it on a real Qdrant.
Then what only Qdrant Edge does (a shard on disk), and the keyword encoder."""

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
import qdrant_edge as qe
from qdrant_client import QdrantClient, models

from memledger_platform.vectorindex.factory import index_slug
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import (
    KEYWORD_FIELDS,
    OPEN,
    RANGE_FIELDS,
    IndexedPoint,
    Scope,
    SparseVector,
    VectorIndex,
    idf,
)
from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex
from memledger_platform.vectorindex.qdrant_server import QdrantServerVectorIndex
from memledger_platform.vectorindex.remote import ForwardedVectorIndex
from memledger_platform.vectorindex.sparse import (
    ENCODING,
    encode_document,
    encode_query,
    stem,
    term_index,
    tokens,
)
from memledger_query.core.ranking import Recipe
from memledger_query.core.semantic import RANK_FIELDS, Found, Layer
from memledger_query.core.semantic import search as semantic_search

T2020, T2022, T2024, NOW = 1.58e9, 1.64e9, 1.70e9, 1.79e9
X, Y, Z = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]
COMMON, RARE, OTHER = 11, 22, 33


def uuid_of(n: str) -> str:
    return f"00000000-0000-0000-0000-{int(n):012d}"


def point(n: str, vector: list[float] | None = X, sparse: dict[int, float] | None = None,
          item: str | None = None, **payload: Any) -> IndexedPoint:
    """Point ``n`` of item ``item`` (``n`` itself unless given), current and valid since 2020."""
    base = {"tenant": "acme", "space": "s", "kind": "fact", "tags": [], "item_id": item or n,
            "valid_from": T2020, "valid_to": OPEN, "sys_from": 1, "sys_to": OPEN}
    return IndexedPoint(uuid_of(n), vector, {**base, **payload},
                        terms(sparse) if sparse is not None else None)


def terms(weights: dict[int, float]) -> SparseVector:
    ordered = sorted(weights.items())
    return SparseVector(tuple(i for i, _ in ordered), tuple(w for _, w in ordered))


def now(**scope: Any) -> Scope:
    return Scope(tenant=scope.pop("tenant", "acme"), valid_at=scope.pop("valid_at", NOW),
                 **scope)


def ids(index: VectorIndex, scope: Scope, vector: list[float] = X) -> list[str]:
    return [h.payload["item_id"] for h in index.search(vector, scope, 10)]


def keyword_ids(index: VectorIndex, scope: Scope, *query: int) -> list[str]:
    found = index.search_sparse(terms(dict.fromkeys(query, 1.0)), scope, 10)
    return [h.payload["item_id"] for h in found]


class VectorIndexContract:
    """Every test receives ``index``: an empty ``VectorIndex`` with 3 dimensions."""

    def test_a_sessions_messages_before_a_position_come_oldest_first(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", kind="message", session="s1", sys_from=7),
                      point("2", kind="message", session="s1", sys_from=3),
                      point("3", kind="message", session="s1", sys_from=9),
                      point("4", kind="message", session="s2", sys_from=4),
                      point("5", kind="fact", session="s1", sys_from=5),
                      point("6", kind="message", session="s1", sys_from=2, tenant="globex")])
        found = index.session_messages("acme", "s1", 9)
        assert [p.payload["item_id"] for p in found] == ["2", "1"]
        assert found[0].payload["sys_from"] == 3
        assert index.session_messages("acme", "s1", 3) == []
        assert index.session_messages("acme", "s9", 100) == []

    def test_deleting_a_subject_removes_all_its_points_in_that_tenant_only(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", subject_id="u7"), point("2", subject_id="u7"),
                      point("3", subject_id="u8"),
                      point("4", subject_id="u7", tenant="globex")])
        assert index.delete_subject("acme", "u7") == 2
        assert sorted(ids(index, now())) == ["3"]
        assert ids(index, now(tenant="globex")) == ["4"]
        assert index.delete_subject("acme", "u7") == 0
        index.upsert([point("5", subject_id="u7")])  # a new key's data, after the erasure
        assert sorted(ids(index, now())) == ["3", "5"]

    def test_layers_narrow_the_scope_so_session_memory_stays_in_its_session(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {RARE: 1.0}, layer="session", session="s1"),
                      point("2", X, {RARE: 1.0}, layer="project"),
                      point("3", X, {RARE: 1.0}, layer="ecosystem")])
        project = now(layers=("project",))
        assert ids(index, project) == keyword_ids(index, project, RARE) == ["2"]
        assert sorted(ids(index, now(layers=("project", "ecosystem")))) == ["2", "3"]
        assert ids(index, now(session="s1")) == ["1"]

    def test_hits_come_best_first_and_at_most_k(self, index: VectorIndex) -> None:
        index.upsert([point("1", X), point("2", [0.9, 0.1, 0]), point("3", Y)])
        hits = index.search(X, now(), 2)
        assert [h.payload["item_id"] for h in hits] == ["1", "2"]
        assert hits[0].score >= hits[1].score

    def test_both_searches_in_one_call_answer_as_each_search_does(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {RARE: 1.0}), point("2", [0.8, 0.6, 0], {COMMON: 1.0}),
                      point("3", Y, {RARE: 2.0}), point("4", None, {RARE: 1.0}),
                      point("5", X, {RARE: 1.0}, tenant="globex")])
        words = terms({RARE: 1.0})
        dense, keyword = index.search_both(X, words, now(), 2)
        assert dense == index.search(X, now(), 2)
        assert keyword == index.search_sparse(words, now(), 2)
        assert [h.payload["item_id"] for h in dense] == ["1", "2"]
        assert {h.payload["item_id"] for h in keyword} <= {"1", "3", "4"}
        assert len(keyword) == 2

    def test_a_search_for_some_payload_keys_finds_the_same_hits_carrying_only_those(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, embedded_from=4), point("2", [0.8, 0.6, 0]),
                      point("3", Y, embedded_from=9), point("4", X, tenant="globex")])
        whole = index.search(X, now(), 3)
        some = index.search(X, now(), 3, ("item_id", "embedded_from"))
        assert [(h.point_id, h.score) for h in some] == [(h.point_id, h.score) for h in whole]
        assert [h.payload for h in some] == [
            {"item_id": "1", "embedded_from": 4}, {"item_id": "2"},
            {"item_id": "3", "embedded_from": 9}]
        assert whole[0].payload["space"] == "s"  # without them: the whole payload

    def test_a_keyword_search_for_some_payload_keys_finds_the_same_hits_carrying_only_those(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {RARE: 1.0}, embedded_from=4), point("2", Y, {RARE: 2.0}),
                      point("3", None, {RARE: 1.0, COMMON: 1.0}), point("4", X, {COMMON: 1.0})])
        words = terms({RARE: 1.0})
        whole = index.search_sparse(words, now(), 3)
        some = index.search_sparse(words, now(), 3, ("item_id", "embedded_from"))
        assert [(h.point_id, h.score) for h in some] == [(h.point_id, h.score) for h in whole]
        assert sorted(h.payload["item_id"] for h in some) == ["1", "2", "3"]
        assert all(h.payload == {"item_id": h.payload["item_id"]} | (
            {"embedded_from": 4} if h.payload["item_id"] == "1" else {}) for h in some)
        dense, keyword = index.search_both(X, words, now(), 3, ("item_id",))
        assert [h.payload for h in dense] == [{"item_id": h.payload["item_id"]} for h in
                                              index.search(X, now(), 3)]
        assert [(h.point_id, h.payload) for h in keyword] == [
            (h.point_id, {"item_id": h.payload["item_id"]}) for h in whole]

    def test_the_payloads_of_points_asked_are_whole_as_stored_and_unknown_ids_left_out(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {RARE: 1.0}, embedded_from=4),
                      point("2", None, {RARE: 1.0}, sys_to=7), point("3", Y)])
        found = index.payloads([uuid_of("2"), uuid_of("1"), uuid_of("9")])
        assert found == {
            uuid_of("1"): {**point("1", embedded_from=4).payload, "archived_from": OPEN,
                           "sys_until": OPEN},
            uuid_of("2"): {**point("2", sys_to=7).payload, "archived_from": OPEN,
                           "sys_until": 7}}
        assert index.payloads([]) == {}

    def test_a_search_ranks_its_candidates_by_a_few_keys_and_reads_only_its_hits_whole(
            self, index: VectorIndex) -> None:
        index.upsert(RANKED)
        watched = Recording(index)
        found = _ranked_search(watched)
        fetched = [args[-1] for method, args in watched.calls if method == "search_both"]
        assert [sorted(f) for f in fetched] == [sorted(CANDIDATE_FIELDS)]
        shown = [r.candidate.point_id for layer in found for r in layer.hits]
        assert len(shown) == 2
        assert [args for method, args in watched.calls if method == "payloads"] == [(shown,)]
        stored = {p.point_id: {**p.payload, "archived_from": OPEN, "sys_until": OPEN}
                  for p in RANKED}
        assert [r.candidate.payload for layer in found for r in layer.hits] == [
            stored[str(point_id)] for point_id in shown]
        # the same hits, scores and order as with every candidate's whole payload
        wholly = _ranked_search(Recording(index, whole=True))
        assert [(r.candidate.point_id, r.score) for layer in found for r in layer.hits] == [
            (r.candidate.point_id, r.score) for layer in wholly for r in layer.hits]
        assert [r.candidate.payload for layer in found for r in layer.hits] == [
            r.candidate.payload for layer in wholly for r in layer.hits]

    def test_one_call_without_a_vector_or_without_terms_searches_only_the_other(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {RARE: 1.0}), point("2", Y, {COMMON: 1.0})])
        words = terms({RARE: 1.0})
        assert index.search_both(None, words, now(), 5) == (
            [], index.search_sparse(words, now(), 5))
        assert index.search_both(Y, None, now(), 5) == (index.search(Y, now(), 5), [])
        assert index.search_both(Y, SparseVector((), ()), now(), 5)[1] == []
        assert index.search_both(None, None, now(), 5) == ([], [])

    def test_vectors_are_the_stored_unit_vectors_of_the_points_asked_that_have_one(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", [3.0, 4.0, 0.0], {RARE: 1.0}), point("2", None, {RARE: 1.0}),
                      point("3", Y)])
        hits = index.search_sparse(terms({RARE: 1.0}), now(), 2)  # points 1 and 2, as found
        found = index.vectors([h.point_id for h in hits] + [uuid_of("4")])
        assert found.keys() == {uuid_of("1")}  # no dense vector, no such point: left out
        assert found[uuid_of("1")] == pytest.approx([0.6, 0.8, 0.0])
        assert found[uuid_of("1")].dtype == np.float32  # one buffer, not a list of floats
        assert index.vectors([]) == {}

    def test_another_tenant_never_sees_a_point_in_either_search(self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {RARE: 1.0}),
                      point("2", X, {RARE: 1.0}, tenant="globex")])
        assert ids(index, now()) == keyword_ids(index, now(), RARE) == ["1"]
        assert ids(index, now(tenant="globex")) == keyword_ids(index, now(tenant="globex"), RARE)
        assert keyword_ids(index, now(tenant="globex"), RARE) == ["2"]
        assert ids(index, now(tenant="nobody")) == keyword_ids(index, now(tenant="no"), RARE) == []

    def test_spaces_kinds_tags_session_and_agent_narrow_the_scope(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", space="a", kind="fact", tags=["x"], session="s1", agent="bot"),
                      point("2", space="b", kind="decision", tags=["y", "z"])])
        assert ids(index, now(spaces=("a",))) == ["1"]
        assert ids(index, now(kinds=("decision",))) == ["2"]
        assert ids(index, now(tags=("z", "q"))) == ["2"]
        assert ids(index, now(session="s1")) == ["1"]
        assert ids(index, now(agent="bot")) == ["1"]

    def test_roles_and_participant_narrow_the_scope_to_messages_that_have_them(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {RARE: 1.0}, kind="message", role="user", participant="Ann"),
                      point("2", X, {RARE: 1.0}, kind="message", role="tool"),
                      point("3", X, {RARE: 1.0})])  # an item: no role, no participant
        assert sorted(ids(index, now())) == ["1", "2", "3"]
        by_role = now(roles=("user", "assistant"))
        assert ids(index, by_role) == keyword_ids(index, by_role, RARE) == ["1"]
        assert sorted(ids(index, now(roles=("user", "tool")))) == ["1", "2"]
        assert ids(index, now(participant="Ann")) == ["1"]
        assert ids(index, now(participant="Bob")) == []
        assert sorted(ids(index, now(kinds=("message",)))) == ["1", "2"]

    def test_current_only_by_default_and_as_of_a_position_on_request(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", sys_from=1, sys_to=5),  # replaced at position 5
                      point("2", sys_from=5)])
        assert ids(index, now()) == ["2"]
        assert ids(index, now(position=3)) == ["1"]
        assert ids(index, now(position=5)) == ["2"]

    def test_valid_time_bounds_are_half_open(self, index: VectorIndex) -> None:
        index.upsert([point("1", valid_from=T2020, valid_to=T2022), point("2", valid_from=T2022)])
        assert ids(index, now(valid_at=T2020)) == ["1"]
        assert ids(index, now(valid_at=T2022)) == ["2"]
        assert ids(index, now(valid_at=T2020 - 1)) == []

    def test_an_upsert_of_the_same_id_replaces_the_whole_point_and_a_delete_removes_it(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {COMMON: 1.0}, tags=["old"])])
        index.upsert([point("1", Y, {RARE: 1.0}, kind="decision")])
        assert index.count() == 1
        assert ids(index, now(kinds=("decision",)), Y) == ["1"]
        assert ids(index, now(tags=("old",))) == []
        assert keyword_ids(index, now(), COMMON) == []
        assert keyword_ids(index, now(), RARE) == ["1"]
        index.delete([uuid_of("1"), uuid_of("999")])
        assert index.count() == 0

    def test_a_dense_search_never_finds_a_point_without_a_dense_vector(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", None, {RARE: 1.0}), point("2", X), point("3", None, None)])
        assert index.count() == 3
        assert ids(index, now()) == ["2"]

    def test_a_keyword_search_never_finds_a_point_without_a_sparse_vector_or_a_shared_term(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X), point("2", X, {RARE: 1.0}), point("3", X, {OTHER: 1.0}),
                      point("4", X, {})])
        assert keyword_ids(index, now(), RARE, COMMON) == ["2"]
        assert index.search_sparse(SparseVector((), ()), now(), 10) == []

    def test_a_rare_query_term_outranks_a_common_one(self, index: VectorIndex) -> None:
        index.upsert([point("1", sparse={COMMON: 1.0}), point("2", sparse={RARE: 1.0}),
                      *(point(str(n), sparse={COMMON: 1.0}) for n in range(3, 7))])
        found = index.search_sparse(terms({COMMON: 1.0, RARE: 1.0}), now(), 2)
        assert found[0].payload["item_id"] == "2"
        assert found[0].score > found[1].score > 0

    def test_a_keyword_score_is_query_weight_times_document_weight_times_idf(
            self, index: VectorIndex) -> None:
        # 4 points carry a sparse vector (the dense-only one is not in the IDF statistics):
        # COMMON is in 3 of them, RARE in 1; all four tenants' points count.
        index.upsert([point("1", sparse={COMMON: 0.5, RARE: 2.0}),
                      point("2", sparse={COMMON: 1.0}), point("3", sparse={COMMON: 1.0}),
                      point("4", sparse={OTHER: 1.0}, tenant="globex"), point("5", X)])
        found = index.search_sparse(terms({COMMON: 1.5, RARE: 0.25}), now(), 1)
        expected = 1.5 * 0.5 * idf(4, 3) + 0.25 * 2.0 * idf(4, 1)
        assert found[0].score == pytest.approx(expected, rel=1e-5)
        assert idf(4, 1) == pytest.approx(math.log(1 + 3.5 / 1.5))

    def test_a_point_written_again_closed_is_hidden_now_but_not_as_of_before(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {RARE: 1.0}, sys_from=1)])
        index.upsert([point("1", X, {RARE: 1.0}, sys_from=1, sys_to=5)])
        assert ids(index, now()) == keyword_ids(index, now(), RARE) == []
        assert ids(index, now(position=3)) == keyword_ids(index, now(position=3), RARE) == ["1"]
        assert ids(index, now(position=5)) == []
        [stored] = index.points("acme", "1")
        assert (stored.payload["sys_to"], stored.payload["sys_until"]) == (5, 5)

    def test_an_archived_point_is_hidden_from_its_archiving_on_but_not_before(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", X, {RARE: 1.0}, sys_from=1), point("2", X, sys_from=1)])
        index.upsert([point("1", X, {RARE: 1.0}, sys_from=1, archived_from=5)])
        for position in (None, 5, 7):
            assert ids(index, now(position=position)) == ["2"]
            assert keyword_ids(index, now(position=position), RARE) == []
        assert sorted(ids(index, now(position=4))) == ["1", "2"]
        assert keyword_ids(index, now(position=4), RARE) == ["1"]

    def test_an_archived_version_closed_later_stays_hidden_from_its_archiving_on(
            self, index: VectorIndex) -> None:
        # sys_until is the earlier of the two bounds, whichever is written first
        index.upsert([point("1", X, sys_from=1, sys_to=9, archived_from=5)])
        assert [ids(index, now(position=p)) for p in (4, 5, 8, 9)] == [["1"], [], [], []]

    def test_the_points_of_an_item_come_back_whole_and_only_from_its_tenant(
            self, index: VectorIndex) -> None:
        index.upsert([point("1", [0.0, 3.0, 4.0], {COMMON: 0.5}, item="7", sys_to=5),
                      point("2", None, {RARE: 1.5}, item="7", sys_from=5),
                      point("3", X, item="7", tenant="globex"), point("4", X, item="8")])
        found = index.points("acme", "7")
        assert [p.point_id for p in found] == [uuid_of("1"), uuid_of("2")]
        assert found[0].vector == pytest.approx([0.0, 0.6, 0.8])  # stored unit-length
        assert (found[0].sparse, found[1].vector, found[1].sparse) == (
            terms({COMMON: 0.5}), None, terms({RARE: 1.5}))
        assert found[1].payload == {**point("2", item="7", sys_from=5).payload,
                                    "archived_from": OPEN, "sys_until": OPEN}
        assert index.points("acme", "9") == []


class Recording(ForwardedVectorIndex):
    """``inner``, recording each call; ``whole``: every search reads whole payloads (what
    every search did before candidates were fetched with a few keys)."""

    def __init__(self, inner: VectorIndex, *, whole: bool = False) -> None:
        self.inner, self.whole = inner, whole
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def _call(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        if self.whole and method in ("search", "search_sparse", "search_both"):
            args = (*args[:-1], None)
        return getattr(self.inner, method)(*args)


def _ranked(n: str, vector: list[float] | None, text: str, **payload: Any) -> IndexedPoint:
    base = point(n, vector).payload | {"content": text, "importance": 0.5, "confidence": 1.0,
                                       "content_at": T2024, "session": None, "agent": "a1",
                                       "subject_id": None, "note": "not for ranking"}
    return IndexedPoint(uuid_of(n), vector, base | payload, encode_document(text))


RANKED = [_ranked("1", X, "Coffee with oat milk, every morning."),
          _ranked("2", [0.9, 0.1, 0.0], "Which coffee do you like?", kind="message",
                  session="s1", role="user"),
          _ranked("3", [0.8, 0.6, 0.0], "I drink my coffee black.", kind="message",
                  session="s1", role="user"),
          _ranked("4", Y, "The deploy is on Friday."),
          _ranked("5", None, "Tea, no coffee, after lunch.", importance=0.9)]
CANDIDATE_FIELDS = (*RANK_FIELDS, "content")


def _ranked_search(index: VectorIndex) -> list[Found]:
    return semantic_search(index, X, "coffee", [Layer("all", now(), 2)], Recipe(),
                           threshold=0.0, now=NOW)


@pytest.fixture(params=["memory", "qdrant-edge", "qdrant-client-local"])
def any_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    made: VectorIndex
    if request.param == "memory":
        made = InMemoryVectorIndex()
    elif request.param == "qdrant-edge":
        made = QdrantEdgeVectorIndex(tmp_path / "vectors", dims=3)
    else:  # the distributed-mode adapter, on qdrant-client's local mode
        made = QdrantServerVectorIndex(QdrantClient(location=":memory:"), "memories", dims=3)
    yield made
    made.close()


class TestEveryAdapter(VectorIndexContract):
    @pytest.fixture
    def index(self, any_index: VectorIndex) -> VectorIndex:
        return any_index


def test_an_edge_shard_reopened_from_disk_keeps_its_points(tmp_path: Path) -> None:
    first = QdrantEdgeVectorIndex(tmp_path / "vectors", dims=3)
    first.upsert([point("1", X, {RARE: 1.0}), point("2", None, {COMMON: 1.0})])
    first.optimize()
    first.close()
    again = QdrantEdgeVectorIndex(tmp_path / "vectors", dims=3)
    try:
        assert again.count() == 2
        assert ids(again, now()) == keyword_ids(again, now(), RARE) == ["1"]
    finally:
        again.close()


def test_an_edge_shard_from_before_sys_until_is_completed_when_opened(tmp_path: Path) -> None:
    old = [point("1", X, {RARE: 1.0}), point("2", Y, sys_to=5), point("3", None, {RARE: 1.0})]
    _write_without_sys_until(tmp_path / "vectors", old)
    index = QdrantEdgeVectorIndex(tmp_path / "vectors", dims=3)
    try:
        assert sorted(ids(index, now(), X)) == ["1"]
        assert ids(index, now(position=3), Y)[0] == "2"
        assert sorted(keyword_ids(index, now(), RARE)) == ["1", "3"]
        assert [p.payload["sys_until"] for p in index.points("acme", "2")] == [5]
    finally:
        index.close()


def test_a_qdrant_collection_from_before_sys_until_is_completed_when_opened() -> None:
    client = QdrantClient(location=":memory:")
    QdrantServerVectorIndex(client, "memories", dims=3)
    client.upsert("memories", points=[models.PointStruct(
        id=uuid_of("1"), vector={"dense": X}, payload=point("1").payload)])
    index = QdrantServerVectorIndex(client, "memories", dims=3)
    assert ids(index, now()) == ["1"]
    assert index.points("acme", "1")[0].payload["sys_until"] == OPEN


def _write_without_sys_until(path: Path, points: list[IndexedPoint]) -> None:
    """A shard as an index before sys_until wrote it (the payload with archived_from only)."""
    QdrantEdgeVectorIndex(path, dims=3).close()
    shard = qe.EdgeShard.load(str(path))
    try:
        shard.update(qe.UpdateOperation.upsert_points([qe.Point(
            id=p.point_id, vector=_named_vectors(p), payload={"archived_from": OPEN, **p.payload})
            for p in points]))
        shard.flush()
    finally:
        shard.close()


def _named_vectors(p: IndexedPoint) -> dict[str, Any]:
    named: dict[str, Any] = {} if p.vector is None else {"dense": list(p.vector)}
    if p.sparse is not None:
        named["keywords"] = qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))
    return named


def test_an_edge_shard_indexes_every_field_a_scope_filters_on(tmp_path: Path) -> None:
    QdrantEdgeVectorIndex(tmp_path / "vectors", dims=3).close()
    shard = qe.EdgeShard.load(str(tmp_path / "vectors"))
    try:
        assert set(shard.info().payload_schema) == {*KEYWORD_FIELDS, *RANGE_FIELDS}
    finally:
        shard.close()


def test_an_edge_shard_vacuums_at_once_only_for_an_erasure(tmp_path: Path) -> None:
    def vacuum_threshold() -> float:
        config = orjson.loads((tmp_path / "vectors" / "edge_config.json").read_bytes())
        return float(config["optimizers"]["deleted_threshold"])

    index = QdrantEdgeVectorIndex(tmp_path / "vectors", dims=3)
    try:
        assert vacuum_threshold() == 0.2  # a few moved points do not rewrite a segment
        index.upsert([point("1", X, subject_id="u7"), point("2", Y, subject_id="u8")])
        assert index.delete_subject("acme", "u7") == 1
        assert vacuum_threshold() == 0.2  # reopened as usual once the erasure is vacuumed
        assert ids(index, now()) == ["2"]
    finally:
        index.close()


def test_an_edge_shard_walks_int8_vectors_and_answers_float32_cosines(tmp_path: Path) -> None:
    vectors = _unit_rows(QUANTIZED_POINTS, 384)
    index = QdrantEdgeVectorIndex(tmp_path / "vectors", dims=384)
    try:
        index.upsert([point(str(i + 1), vectors[i].tolist()) for i in range(len(vectors))])
        index.optimize()
        assert _quantized(tmp_path / "vectors")
        query = vectors[7] + 0.5 * vectors[8]
        hits = index.search(query.tolist(), now(), 10)
        cosines = vectors @ (query / np.linalg.norm(query))
        # random rows: past the two it was made of, every row is about as near as the next
        assert {h.point_id for h in hits[:2]} == {uuid_of("8"), uuid_of("9")}
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        for hit in hits:  # rescored: the float32 cosine, not the int8 estimate
            row = int(hit.point_id.rsplit("-", 1)[1]) - 1
            assert hit.score == pytest.approx(float(cosines[row]), abs=1e-5)
        assert _int8_scores(index, query) != [h.score for h in hits]
    finally:
        index.close()


def test_an_edge_shard_made_before_int8_vectors_gains_them_at_its_next_build(
        tmp_path: Path) -> None:
    path = tmp_path / "vectors"
    plain = qe.EdgeShard.create(str(path), qe.EdgeConfig(
        vectors={"dense": qe.EdgeVectorParams(size=384, distance=qe.Distance.Cosine)},
        sparse_vectors={"keywords": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        wal_enabled=False))
    plain.close()
    vectors = _unit_rows(QUANTIZED_POINTS, 384)
    index = QdrantEdgeVectorIndex(path, dims=384)
    try:
        index.upsert([point(str(i + 1), vectors[i].tolist()) for i in range(len(vectors))])
        index.optimize()
        assert _quantized(path)
        hits = index.search(vectors[3].tolist(), now(), 5)
        assert hits[0].point_id == uuid_of("4")
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert _int8_scores(index, vectors[3]) != [h.score for h in hits]
    finally:
        index.close()


QUANTIZED_POINTS = 8_000
"""Enough float32 vectors of 384 dimensions (12 MB) for Edge to index their segment, graph and
int8 copy (below its indexing threshold, 10 MB, a segment is searched plainly)."""


def _unit_rows(count: int, dims: int) -> npt.NDArray[np.float32]:
    rows = np.random.default_rng(5).normal(size=(count, dims)).astype(np.float32)
    unit: npt.NDArray[np.float32] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def _quantized(path: Path) -> bool:
    config = orjson.loads((path / "edge_config.json").read_bytes())
    return bool(config["vectors"]["dense"]["quantization_config"]["scalar"]["type"] == "int8")


def _int8_scores(index: QdrantEdgeVectorIndex, query: npt.NDArray[np.float32]) -> list[float]:
    """The top hits' scores as the int8 vectors alone estimate them (no rescoring)."""
    request = qe.QueryRequest(limit=10, query=qe.Query.Nearest(query.tolist(), using="dense"),
                              with_payload=False, with_vector=False, params=qe.SearchParams(
                                  quantization=qe.QuantizationSearchParams(rescore=False)))
    return [p.score for p in index._shard.query(request)]


def test_tokens_are_lowercase_words_without_stopwords_or_single_characters() -> None:
    assert tokens("The Cat, a dog & I: 42 x-rays! Zürich") == ["cat", "dog", "42", "ray",
                                                            "zürich"]
    assert tokens("") == tokens("the of and") == []


def test_tokens_are_english_snowball_stems_so_the_forms_of_a_word_meet() -> None:
    assert tokens("Alice's queries") == tokens("alice query") == ["alic", "queri"]
    assert {stem(w) for w in ("painted", "painting", "paints", "paint")} == {"paint"}
    assert [stem(w) for w in ("items", "classes", "class", "status", "yes")] == [
        "item", "class", "class", "status", "yes"]


def test_a_thread_that_never_stemmed_before_stems_like_the_others() -> None:
    words = ["painting", "queries", "camped", "running"]
    here = [stem(w) for w in words]
    with ThreadPoolExecutor(2) as pool:  # threads of their own, each with its own stemmer
        found = list(pool.map(lambda _: [stem(w) for w in words], range(4)))
    assert found == [here] * 4 == [["paint", "queri", "camp", "run"]] * 4


def test_a_term_index_is_the_first_four_bytes_of_blake2b_in_31_bits() -> None:
    assert term_index("cat") == 0x06B059C0  # pinned: every process and release must agree
    assert all(0 <= term_index(w) < 2**31 for w in ("a", "zürich", "x" * 500))


def test_a_document_weighs_its_terms_by_saturated_length_normalised_frequency() -> None:
    found = encode_document("cat cat dog", avg_len=3.0)
    weights = dict(zip(found.indices, found.values, strict=True))
    assert list(found.indices) == sorted(found.indices)
    assert weights[term_index("cat")] == pytest.approx(2 * 2.2 / (2 + 1.2))
    assert weights[term_index("dog")] == pytest.approx(1 * 2.2 / (1 + 1.2))
    assert encode_document("cat cat dog", avg_len=3.0) == found  # deterministic


def test_a_longer_document_weighs_the_same_term_less() -> None:
    short, long = encode_document("cat"), encode_document("cat " + "dog " * 60)
    assert short.values[short.indices.index(term_index("cat"))] > long.values[
        long.indices.index(term_index("cat"))]


def test_a_query_weighs_each_distinct_term_once() -> None:
    found = encode_query("Cats and cats and dogs")
    assert found == SparseVector(tuple(sorted([term_index("cat"), term_index("dog")])),
                                 (1.0, 1.0))
    assert encode_query("the") == encode_document("") == SparseVector((), ())


def test_a_sparse_vector_refuses_unsorted_duplicate_or_out_of_range_indices() -> None:
    for indices in ((2, 1), (1, 1), (-1,), (2**31,)):
        with pytest.raises(ValueError, match="sparse"):
            SparseVector(indices, (1.0,) * len(indices))


def test_the_index_is_named_by_its_model_and_its_keyword_encoding() -> None:
    # terms of another encoding would not meet a query's: another encoding, another index
    assert index_slug("all-MiniLM-L6-v2/int8") == f"all-minilm-l6-v2-int8-{ENCODING}"
    assert ENCODING == "snowball-en"
