"""Ranking as data: the score formula factor by factor, a repeatable order, the collapse of
near-duplicates, and the modes' defaults."""

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger_query.core.ranking import (
    MODES,
    Candidate,
    Ranked,
    Recipe,
    Signals,
    VectorLookup,
    collapse,
    complete_dense,
    policy_version,
    rank,
    rescore,
    score,
    utility,
)

NOW = 1.79e9
DAY = 86_400.0
RECIPE = Recipe()


def candidate(item: str = "a", *, dense: float | None = None, keyword: float | None = None,
              **payload: Any) -> Candidate:
    """A fact stated just now, of middling importance and full confidence, unless told."""
    base = {"kind": "fact", "content_at": NOW, "importance": 0.5, "confidence": 1.0}
    return Candidate(item, {**base, **payload}, dense=dense, keyword=keyword)


# --- the formula ----------------------------------------------------------------------------

@pytest.mark.parametrize(("found", "relevance", "final"), [
    # relevance weighs dense 0.7 and keyword 0.3 (the thresholds' calibration); the order, and
    # so the score, weighs them 0.3 and 0.7 (as measured)
    (candidate(dense=0.8), 0.7 * 0.8, 0.3 * 0.8),
    (candidate(keyword=4.0), 0.3 * 0.5, 0.7 * 0.5),
    (candidate(keyword=12.0), 0.3 * 0.75, 0.7 * 0.75),
    (candidate(dense=0.5, keyword=4.0), 0.35 + 0.15, 0.15 + 0.35),
    (candidate(dense=-0.4, keyword=4.0), 0.15, 0.35),
    (candidate(), 0.0, 0.0),
    # one half-life old: decay 0.5, so recency 0.8 + 0.2 * 0.5
    (candidate(dense=1.0, content_at=NOW - 180 * DAY), 0.7, 0.3 * 0.9),
    # two half-lives: decay 0.25
    (candidate(dense=1.0, content_at=NOW - 360 * DAY), 0.7, 0.3 * 0.85),
    # an episode fades in 14 days, a kind the recipe does not name in 30 (the default)
    (candidate(dense=1.0, kind="episode", content_at=NOW - 14 * DAY), 0.7, 0.3 * 0.9),
    (candidate(dense=1.0, kind="gossip", content_at=NOW - 30 * DAY), 0.7, 0.3 * 0.9),
    # content from the future (clock skew) or of unknown age is new
    (candidate(dense=1.0, content_at=NOW + 10 * DAY), 0.7, 0.3),
    (candidate(dense=1.0, content_at=None), 0.7, 0.3),
    (candidate(dense=1.0, importance=1.0), 0.7, 0.3 * 1.1),
    (candidate(dense=1.0, importance=0.0), 0.7, 0.3 * 0.9),
    (candidate(dense=1.0, confidence=0.0), 0.7, 0.3 * 0.7),
    (candidate(dense=1.0, confidence=0.5), 0.7, 0.3 * 0.85),
    (candidate(dense=1.0, importance=1.0, confidence=0.5, content_at=NOW - 180 * DAY),
     0.7, 0.3 * 0.9 * 1.1 * 0.85),
], ids=["dense", "keyword at half", "keyword above half", "dense and keyword",
        "a negative cosine counts as none", "nothing", "one half-life", "two half-lives",
        "episode", "unnamed kind", "future", "undated", "important", "unimportant",
        "unsure", "half sure", "every factor"])
def test_the_score_is_the_fused_relevance_times_recency_importance_and_confidence(
        found: Candidate, relevance: float, final: float) -> None:
    ranked = score(found, RECIPE, NOW)
    assert ranked.relevance == pytest.approx(relevance)
    assert ranked.score == pytest.approx(final)
    assert ranked.explain["score"] == pytest.approx(final, abs=1e-6)


@pytest.mark.parametrize(("kind", "half_life"), [
    ("fact", 180.0), ("preference", 180.0), ("decision", 365.0), ("steering_rule", 730.0),
    ("observation", 30.0), ("episode", 14.0), ("message", 365.0), ("gossip", 30.0)])
def test_the_decay_is_one_half_after_the_half_life_of_the_kind(kind: str, half_life: float
                                                               ) -> None:
    explain = score(candidate(dense=1.0, kind=kind, content_at=NOW - half_life * DAY),
                    RECIPE, NOW).explain
    assert (explain["half_life_days"], explain["decay"]) == (half_life, 0.5)
    assert explain["age_days"] == half_life


def test_explain_names_every_factor_of_the_score_rounded() -> None:
    found = score(candidate(dense=0.8, keyword=4.0, importance=1.0, confidence=0.5,
                            content_at=NOW - 180 * DAY), RECIPE, NOW, Signals(used=1))
    assert found.explain == {
        "dense": 0.8, "keyword_bm25": 4.0, "keyword": 0.5, "relevance": 0.71, "fused": 0.59,
        "time_nearness": 0.0, "time_factor": 1.0, "anchor_nearness": 0.0, "anchor_factor": 1.0,
        "session_keyword": 0.0, "session_factor": 1.0,
        "asking": 0.0, "ask_factor": 1.0,
        "words_only": 0, "age_days": 180.0, "half_life_days": 180.0,
        "decay": 0.5, "recency_factor": 0.9,
        "importance_factor": 1.1, "confidence_factor": 0.85, "signals_used": 1,
        "signals_unused": 0, "signals_reaffirmed": 0, "signals_rated": 0, "rating_mean": 0,
        "utility": round(utility(Signals(used=1)), 6),
        "utility_factor": round(1 + RECIPE.utility_weight * (2 * utility(Signals(used=1)) - 1),
                                6),
        "score": round(found.score, 6)}
    assert Ranked(found.candidate, 0.5, 0.5).explain == {}  # made without its factors


def test_the_recipe_is_data_a_recipe_without_recency_ignores_age() -> None:
    timeless = Recipe(recency_weight=0.0)
    old = candidate(dense=1.0, content_at=NOW - 10_000 * DAY)
    assert score(old, timeless, NOW).score == pytest.approx(0.3)
    assert score(old, RECIPE, NOW).score < 0.3 * 0.81


# --- the session's words --------------------------------------------------------------------

def message(item: str, session: str, *, dense: float | None = None,
            keyword: float | None = None) -> Candidate:
    return candidate(item, dense=dense, keyword=keyword, kind="message", session=session)


def test_a_message_is_lifted_by_the_best_keyword_match_of_its_session() -> None:
    named = message("named", "s1", keyword=12.0)  # keyword relevance 0.75
    answer = message("answer", "s1", dense=0.8)
    found = {r.candidate.item_id: r for r in rank([named, answer], RECIPE, NOW)}
    assert found["answer"].explain["session_keyword"] == 0.75
    assert found["answer"].score == pytest.approx(0.3 * 0.8 * (1 + 0.5 * 0.75))
    assert found["named"].score == pytest.approx(0.7 * 0.75 * (1 + 0.5 * 0.75)), \
        "the best match of a session is one of its candidates: it counts for itself too"
    assert found["answer"].explain["session_factor"] == pytest.approx(1.375)
    assert found["answer"].relevance == pytest.approx(0.7 * 0.8), \
        "the session's words order hits; they never let one in"


def test_a_turn_of_the_session_that_names_the_topic_overtakes_an_equal_turn_elsewhere(
        ) -> None:
    found = [message("elsewhere", "s2", dense=0.8), message("here", "s1", dense=0.8),
             message("named", "s1", keyword=2.0)]
    order = [r.candidate.item_id for r in rank(found, RECIPE, NOW)]
    assert order.index("here") < order.index("elsewhere")
    alone = [r.candidate.item_id for r in rank(found, Recipe(session_weight=0.0), NOW)]
    assert alone.index("elsewhere") < alone.index("here"), "ties go by item id without it"


def test_only_messages_are_lifted_and_only_by_their_own_session() -> None:
    found = rank([message("named", "s1", keyword=12.0), message("other", "s2", dense=0.8),
                  candidate("fact", dense=0.8, session="s1"),
                  candidate("loose", dense=0.8, kind="message")], RECIPE, NOW)
    lifted = {r.candidate.item_id: r.explain["session_factor"] for r in found}
    assert lifted == {"named": 1.375, "other": 1.0, "fact": 1.0, "loose": 1.0}


# --- a turn that asks ----------------------------------------------------------------------

def said(item: str, content: str, *, dense: float = 0.6, keyword: float = 4.0) -> Candidate:
    return candidate(item, dense=dense, keyword=keyword, kind="message", content=content)


def test_a_turn_that_asks_ranks_below_an_answering_turn_with_the_same_words() -> None:
    asks = said("a-asks", "Did you go hiking in the mountains?")
    answers = said("b-answers", "I went hiking in the mountains.")
    order = [r.candidate.item_id for r in rank([asks, answers], RECIPE, NOW)]
    assert order == ["b-answers", "a-asks"], "equal words and cosine: the answer first"
    found = {r.candidate.item_id: r for r in rank([asks, answers], RECIPE, NOW)}
    assert found["a-asks"].explain["asking"] == 1.0
    assert found["a-asks"].explain["ask_factor"] == pytest.approx(1 - RECIPE.ask_weight)
    assert found["a-asks"].score == pytest.approx(found["b-answers"].score
                                                  * (1 - RECIPE.ask_weight))
    assert found["a-asks"].relevance == found["b-answers"].relevance, \
        "asking orders hits; it never shuts one out"


@pytest.mark.parametrize(("content", "share"), [
    ("Nice! What did you paint?", 0.5),
    ("What did you paint? A lake? I love lakes.", 2 / 3),
    ("Really?! That's great.", 0.5),
    ('She asked "why not?" Then she left.', 0.5),
    ("What about it (the lake?)", 1.0),
    ("Is it done?\nYes, finished.", 0.5),
    ("I painted a lake.", 0.0),
    ("See https://example.org/?q=lake for it.", 0.0),
    ("", 0.0),
])
def test_asking_is_the_share_of_sentences_ending_in_a_question_mark(content: str,
                                                                     share: float) -> None:
    assert score(said("t", content), RECIPE, NOW).explain["asking"] == pytest.approx(
        share, abs=1e-6)


def test_a_turn_is_lowered_by_its_share_of_questions_a_memory_never() -> None:
    half = score(said("t", "Nice! What did you paint?"), RECIPE, NOW)
    assert half.explain["ask_factor"] == pytest.approx(1 - RECIPE.ask_weight / 2)
    fact = score(candidate("f", dense=0.6, content="What did you paint?"), RECIPE, NOW)
    assert (fact.explain["asking"], fact.explain["ask_factor"]) == (0.0, 1.0)


def test_ask_weight_zero_changes_nothing() -> None:
    found = [said("a", "Did you go hiking?", keyword=6.0), said("b", "I went hiking.", dense=0.7),
             said("c", "Hiking? Me too. Where?", dense=0.5, keyword=3.0),
             candidate("d", dense=0.65, content="Where to go hiking?")]
    off = Recipe(ask_weight=0.0)
    ranked = rank(found, off, NOW)
    asked = rank([replace(c, payload={**c.payload, "content": "x"}) for c in found], off, NOW)
    assert [(r.candidate.item_id, r.score) for r in ranked] == \
        [(r.candidate.item_id, r.score) for r in asked], "questions or not, the same scores"
    assert {r.explain["ask_factor"] for r in ranked} == {1.0}
    assert [r.candidate.item_id for r in rank(found, RECIPE, NOW)] != \
        [r.candidate.item_id for r in ranked], "and the default does move them"


@pytest.mark.parametrize("weight", [-0.1, 1.5, math.nan])
def test_an_ask_weight_outside_0_to_1_is_refused_naming_it(weight: float) -> None:
    with pytest.raises(ValueError, match="ask_weight"):
        Recipe(ask_weight=weight)


def test_the_ask_weight_is_part_of_the_policy_version() -> None:
    assert policy_version(RECIPE, "m") != policy_version(Recipe(ask_weight=0.0), "m")


# --- a candidate found by its words alone ----------------------------------------------------

def test_a_candidate_found_by_its_words_alone_is_given_its_cosine() -> None:
    found = complete_dense([candidate("words", keyword=4.0), candidate("both", dense=0.9,
                                                                          keyword=4.0)],
                           {"words": 0.8, "both": 0.1})
    assert [c.dense for c in found] == [0.8, 0.9], \
        "the one dense search scored keeps its score"
    assert [c.keyword for c in found] == [4.0, 4.0]


def test_a_candidate_without_a_cosine_keeps_no_dense_score_and_is_marked_unembedded() -> None:
    words = candidate("words", keyword=4.0)
    assert complete_dense([words], {}) == [replace(words, embedded=False)], \
        "not embedded: nothing to compare"


# --- a candidate not yet embedded -------------------------------------------------------------

def test_a_candidate_not_yet_embedded_is_judged_and_ordered_by_its_words_alone() -> None:
    fresh = score(replace(candidate("fresh", keyword=12.0), embedded=False), RECIPE, NOW)
    assert fresh.relevance == pytest.approx(0.75), "keyword alone, as a search without the " \
        "query's embedding judges it, not 0.3 * keyword"
    assert fresh.relevance >= MODES["execution"].threshold
    assert fresh.explain["fused"] == fresh.explain["keyword"] == pytest.approx(0.75)
    assert fresh.score == pytest.approx(0.75)
    assert fresh.explain["words_only"] == 1


def test_an_embedded_candidate_without_a_cosine_still_counts_cosine_zero() -> None:
    # embedded but unrelated in meaning (its cosine not asked): words weigh as calibrated
    found = score(candidate("known", keyword=12.0), RECIPE, NOW)
    assert found.relevance == pytest.approx(0.3 * 0.75)
    assert found.explain["words_only"] == 0


def test_the_recipe_can_count_an_unembedded_candidate_as_cosine_zero() -> None:
    fresh = replace(candidate("fresh", keyword=12.0), embedded=False)
    found = score(fresh, replace(RECIPE, words_only=False), NOW)
    assert found.relevance == pytest.approx(0.3 * 0.75)
    assert found.explain["words_only"] == 0
    assert policy_version(replace(RECIPE, words_only=False), "m") != policy_version(RECIPE, "m")


def test_a_search_weighted_off_keywords_does_not_judge_an_unembedded_candidate_by_them(
        ) -> None:
    fresh = replace(candidate("fresh", keyword=12.0), embedded=False)
    dense_only = replace(RECIPE, keyword_weight=0.0, order_keyword_weight=0.0)
    assert score(fresh, dense_only, NOW).relevance == 0.0


@given(st.floats(0.0, 1.0), st.floats(0.0, 40.0), st.booleans())
def test_a_candidate_whose_embedding_is_unknown_ranks_no_lower_than_once_known(
        bound: float, keyword: float, embedded: bool) -> None:
    # dense bounds its cosine from above (the last dense hit): once known, embedded or not,
    # it can only move down, so a search looks up only those that could be shown
    unknown = score(replace(candidate("c", dense=bound, keyword=keyword), embedded=None),
                    RECIPE, NOW)
    known = score(replace(candidate("c", dense=bound * 0.9 if embedded else None,
                                    keyword=keyword), embedded=embedded), RECIPE, NOW)
    assert known.relevance <= unknown.relevance + 1e-12
    assert known.score <= unknown.score + 1e-12


def test_a_turn_found_by_its_words_outranks_a_weaker_one_dense_search_returned() -> None:
    # Without its cosine the turn that names the query's words ranks as if unrelated in
    # meaning (0.7 * keyword alone), below a turn dense search returned.
    named = message("named", "s1", keyword=4.0)
    returned = message("returned", "s2", dense=0.5, keyword=2.0)
    before = [r.candidate.item_id for r in rank([named, returned], RECIPE, NOW)]
    assert before == ["returned", "named"]
    after = rank(complete_dense([named, returned], {"named": 0.8}), RECIPE, NOW)
    assert [r.candidate.item_id for r in after] == ["named", "returned"]
    assert after[0].explain["dense"] == pytest.approx(0.8)
    assert after[0].relevance == pytest.approx(0.7 * 0.8 + 0.3 * 0.5)


def test_rescoring_what_changed_ranks_as_ranking_everything_again() -> None:
    found = [message("a", "s1", keyword=4.0), message("b", "s1", dense=0.6, keyword=1.0),
             message("c", "s2", dense=0.5), candidate("d", keyword=8.0)]
    ranked = rank(found, RECIPE, NOW)
    changed = {"a": replace(found[0], dense=0.9), "d": replace(found[3], dense=0.1)}
    again = rescore(ranked, changed, RECIPE, NOW)
    whole = rank([changed.get(c.item_id, c) for c in found], RECIPE, NOW)
    assert [(r.candidate.item_id, r.score) for r in again] == \
        [(r.candidate.item_id, r.score) for r in whole]
    assert [r.candidate.item_id for r in again] != [r.candidate.item_id for r in ranked]


# --- learned utility ------------------------------------------------------------------------

@pytest.mark.parametrize(("signals", "expected"), [
    (Signals(), 0.5),
    (Signals(used=1), 2 / 3),
    (Signals(unused=1), 1 / 3),
    (Signals(reaffirmed=2), 3 / 4),
    (Signals(used=1, unused=1), 0.5),
    # a rating splits one vote: 5 is all positive, 1 all negative, 3 half and half
    (Signals(rated=1, rating_sum=5), 2 / 3),
    (Signals(rated=1, rating_sum=1), 1 / 3),
    (Signals(rated=1, rating_sum=3), 0.5),
    (Signals(rated=2, rating_sum=9), (1 + 1.75) / (2 + 2)),  # 5 and 4: 1.75 for, 0.25 against
], ids=["none", "used", "unused", "reaffirmed twice", "used and unused", "rated 5",
        "rated 1", "rated 3", "rated 5 and 4"])
def test_utility_is_a_beta_estimate_from_the_signals(signals: Signals, expected: float) -> None:
    assert utility(signals) == pytest.approx(expected)


def test_each_further_signal_of_a_kind_moves_utility_less_and_never_past_the_bounds() -> None:
    steps = [utility(Signals(used=n)) for n in range(6)]
    gains = [b - a for a, b in itertools.pairwise(steps)]
    assert gains == sorted(gains, reverse=True)
    assert all(0 < u < 1 for u in [*steps, utility(Signals(unused=100))])


def test_utility_scales_the_score_by_its_factor_and_explain_shows_the_counts() -> None:
    plain = score(candidate(dense=1.0), RECIPE, NOW)
    liked = score(candidate(dense=1.0), RECIPE, NOW, Signals(used=1, rated=1, rating_sum=5))
    assert plain.explain["utility_factor"] == 1.0
    assert liked.explain["utility"] == pytest.approx(3 / 4)
    assert liked.score == pytest.approx(0.3 * (1 + 0.3 * 0.5))
    assert liked.relevance == plain.relevance, "utility orders hits; it never lets one in"
    assert {k: liked.explain[k] for k in ("signals_used", "signals_unused",
                                          "signals_reaffirmed", "signals_rated",
                                          "rating_mean")} == {
        "signals_used": 1, "signals_unused": 0, "signals_reaffirmed": 0, "signals_rated": 1,
        "rating_mean": 5.0}


def test_feedback_reorders_two_equally_relevant_candidates() -> None:
    found = [candidate("a", dense=0.8), candidate("b", dense=0.8)]
    feedback = {"a": Signals(rated=2, rating_sum=2), "b": Signals(rated=2, rating_sum=10)}
    assert [r.candidate.item_id for r in rank(found, RECIPE, NOW)] == ["a", "b"]
    assert [r.candidate.item_id for r in rank(found, RECIPE, NOW, feedback)] == ["b", "a"]
    unweighted = rank(found, Recipe(utility_weight=0.0), NOW, feedback)
    assert [r.candidate.item_id for r in unweighted] == ["a", "b"]


def test_the_policy_version_changes_with_the_recipe_and_the_model_only() -> None:
    assert policy_version(Recipe(), "m") == policy_version(Recipe(), "m")
    assert policy_version(Recipe(utility_weight=0.2), "m") != policy_version(Recipe(), "m")
    assert policy_version(Recipe(), "other") != policy_version(Recipe(), "m")


# --- the order ------------------------------------------------------------------------------

def test_candidates_come_best_first() -> None:
    ranked = rank([candidate("weak", dense=0.3), candidate("strong", dense=0.9),
                   candidate("middle", dense=0.6)], RECIPE, NOW)
    assert [r.candidate.item_id for r in ranked] == ["strong", "middle", "weak"]


def test_equal_scores_are_ordered_by_item_id_whatever_order_they_came_in() -> None:
    ids = ["c", "a", "d", "b"]
    for order in (ids, ids[::-1]):
        ranked = rank([candidate(i, dense=0.5) for i in order], RECIPE, NOW)
        assert [r.candidate.item_id for r in ranked] == ["a", "b", "c", "d"]


# --- collapse -------------------------------------------------------------------------------

def at_cosine(cosine: float) -> list[float]:
    """A unit vector at ``cosine`` to (1, 0, 0), in the x-y plane."""
    return [cosine, math.sqrt(1 - cosine**2), 0.0]


def ranked(*found: Candidate) -> list[Ranked]:
    return rank(list(found), RECIPE, NOW)


def lookup(vectors: Mapping[str, list[float] | None], asked: list[list[str]] | None = None
           ) -> VectorLookup:
    """An index's vector lookup over ``vectors`` (by item; ``None``: not embedded), noting in
    ``asked`` the items of each call."""
    def find(candidates: Sequence[Candidate]) -> dict[str, npt.NDArray[np.float32]]:
        if asked is not None:
            asked.append([c.item_id for c in candidates])
        return {c.item_id: np.asarray(v, np.float32) for c in candidates
                if (v := vectors.get(c.item_id)) is not None}
    return find


@pytest.mark.parametrize(("hits", "recipe", "kept", "into"), [
    pytest.param([(candidate("best", dense=0.9), [2.0, 0.0, 0.0]),
                  (candidate("copy", dense=0.8), at_cosine(0.99))],
                 RECIPE, ["best"], {"copy": "best"},
                 id="a near-duplicate of a better hit collapses into it"),
    pytest.param([(candidate("best", dense=0.9), [1.0, 0.0, 0.0]),
                  (candidate("close", dense=0.8), at_cosine(0.94)),
                  (candidate("other", dense=0.7), [0.0, 0.0, 1.0]),
                  (candidate("words", keyword=1.0), None)],
                 RECIPE, ["best", "close", "other", "words"], {},
                 id="distinct hits and hits without vectors are kept"),
    pytest.param([(candidate("best", dense=0.9), [1.0, 0.0, 0.0]),
                  (candidate("close", dense=0.8), at_cosine(0.94))],
                 Recipe(duplicate_cosine=0.9), ["best"], {"close": "best"},
                 id="the duplicate threshold is part of the recipe"),
    pytest.param([(candidate("x", dense=0.9), [1.0, 0.0, 0.0]),
                  (candidate("y", dense=0.8), [0.0, 1.0, 0.0]),
                  (candidate("near y", dense=0.7), [0.01, 1.0, 0.0])],
                 RECIPE, ["x", "y"], {"near y": "y"},
                 id="a duplicate collapses into the hit it is closest to"),
    pytest.param([(candidate("zero", dense=0.9), [0.0, 0.0, 0.0]),
                  (candidate("x", dense=0.8), [1.0, 0.0, 0.0]),
                  (candidate("near x", dense=0.7), [1.0, 0.01, 0.0])],
                 RECIPE, ["zero", "x"], {"near x": "x"},
                 id="a zero vector is kept and collapses nothing"),
    pytest.param([(candidate("best", dense=0.9), [1.0, 0.0, 0.0]),
                  (candidate("words", keyword=1.0), at_cosine(0.99))],
                 RECIPE, ["best"], {"words": "best"},
                 id="a hit found by its words alone collapses like any other"),
])
def test_collapse(hits: list[tuple[Candidate, list[float] | None]], recipe: Recipe,
                  kept: list[str], into: dict[str, str]) -> None:
    found, collapsed = collapse(ranked(*(c for c, _ in hits)), recipe,
                                vectors=lookup({c.item_id: v for c, v in hits}))
    assert [r.candidate.item_id for r in found] == kept
    assert collapsed == into


_VECTORS = st.one_of(
    st.none(), st.just([0.0, 0.0, 0.0]),
    st.lists(st.integers(-3, 3).map(float), min_size=3, max_size=3))


@settings(max_examples=200, deadline=None)
@given(st.lists(_VECTORS, max_size=12), st.sampled_from([0.5521, 0.9137, 0.9713]),
       st.none() | st.integers(0, 12))
def test_collapse_is_greedy_in_rank_order(vectors: list[list[float] | None],
                                          threshold: float, limit: int | None) -> None:
    """Each hit, best first, is kept unless its vector is within ``threshold`` of a hit kept
    before it, and then it collapses into the closest of those; hits without a (non-zero)
    vector are always kept. Once ``limit`` hits are kept, the rest are neither kept nor
    collapsed. (No cosine of these vectors comes within 1e-3 of a threshold, and equally
    close owners are told apart by 1e-5 at most, so rounding cannot decide.)"""
    hits = [Ranked(candidate(f"h{i}", dense=0.5), 0.5, 0.5) for i in range(len(vectors))]
    kept, into = collapse(hits, Recipe(duplicate_cosine=threshold), limit,
                          vectors=lookup({f"h{i}": v for i, v in enumerate(vectors)}))
    units: dict[str, np.ndarray] = {}  # the kept hits that have a direction
    expected_kept: list[str] = []
    closest: dict[str, dict[str, float]] = {}
    for hit, vector in zip(hits, vectors, strict=True):
        if len(expected_kept) == limit:
            break
        norm = float(np.linalg.norm(vector)) if vector is not None else 0.0
        unit = np.asarray(vector) / norm if norm else None
        cosines = {item: float(u @ unit) for item, u in units.items()} if unit is not None else {}
        if cosines and max(cosines.values()) > threshold:
            closest[hit.candidate.item_id] = cosines
            continue
        expected_kept.append(hit.candidate.item_id)
        if unit is not None:
            units[hit.candidate.item_id] = unit
    assert [r.candidate.item_id for r in kept] == expected_kept
    assert into.keys() == closest.keys()
    for item, owner in into.items():
        assert closest[item][owner] > max(closest[item].values()) - 1e-5


def test_collapse_stops_at_the_limit_and_lists_only_what_it_dropped_before() -> None:
    vectors = {"a": [1.0, 0.0, 0.0], "copy of a": at_cosine(0.99), "b": [0.0, 1.0, 0.0],
               "copy of b": [0.0, 1.0, 0.01]}
    hits = ranked(*(candidate(item, dense=d) for item, d in zip(vectors, (0.9, 0.8, 0.7, 0.6),
                                                                  strict=True)))
    found = [collapse(hits, RECIPE, limit, vectors=lookup(vectors)) for limit in (1, 2, None)]
    assert [[r.candidate.item_id for r in kept] for kept, _ in found] == [
        ["a"], ["a", "b"], ["a", "b"]]
    assert [into for _, into in found] == [
        {}, {"copy of a": "a"}, {"copy of a": "a", "copy of b": "b"}]


def test_collapse_looks_up_the_vectors_of_a_few_more_hits_than_it_still_wants() -> None:
    """Each hit's vector is asked for once, in rank order, in as few lookups as the
    duplicates allow: the hits still wanted plus two (``SPARE_VECTORS``)."""
    vectors: dict[str, list[float] | None] = {
        "a": [1.0, 0.0, 0.0], "a2": [1.0, 0.01, 0.0], "a3": [1.0, 0.0, 0.01],
        "b": [0.0, 1.0, 0.0], "b2": [0.01, 1.0, 0.0], "c": [0.0, 0.0, 1.0], "d": None}
    hits = [Ranked(candidate(item, dense=0.5), 0.5, 0.5) for item in vectors]
    asked: list[list[str]] = []
    kept, _ = collapse(hits, RECIPE, 2, vectors=lookup(vectors, asked))
    assert [r.candidate.item_id for r in kept] == ["a", "b"]
    assert asked == [["a", "a2", "a3", "b"]]
    asked.clear()
    kept, _ = collapse(hits, RECIPE, 3, vectors=lookup(vectors, asked))
    assert [r.candidate.item_id for r in kept] == ["a", "b", "c"]
    assert asked == [["a", "a2", "a3", "b", "b2"], ["c", "d"]]


# --- modes ----------------------------------------------------------------------------------

def test_the_modes_fetch_more_and_cut_lower_the_wider_they_look() -> None:
    assert {name: mode.k for name, mode in MODES.items()} == {
        "execution": 5, "planning": 20, "brainstorming": 30}
    thresholds = [MODES[m].threshold for m in ("execution", "planning", "brainstorming")]
    assert thresholds == sorted(thresholds, reverse=True)
    assert all(0 < t < 1 for t in thresholds)
