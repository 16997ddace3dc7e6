"""Ranking as data: the score formula factor by factor, a repeatable order, the collapse of
near-duplicates, and the modes' defaults."""

import math
from typing import Any

import pytest

from memledger_query.ranking import MODES, Candidate, Ranked, Recipe, collapse, rank, score

NOW = 1.79e9
DAY = 86_400.0
RECIPE = Recipe()


def candidate(item: str = "a", *, dense: float | None = None, keyword: float | None = None,
              vector: list[float] | None = None, **payload: Any) -> Candidate:
    """A fact stated just now, of middling importance and full confidence, unless told."""
    base = {"kind": "fact", "content_at": NOW, "importance": 0.5, "confidence": 1.0}
    return Candidate(item, {**base, **payload}, dense=dense, keyword=keyword, vector=vector)


# --- the formula ----------------------------------------------------------------------------

@pytest.mark.parametrize(("found", "relevance", "final"), [
    (candidate(dense=0.8), 0.7 * 0.8, 0.7 * 0.8),
    (candidate(keyword=4.0), 0.3 * 0.5, 0.3 * 0.5),
    (candidate(keyword=12.0), 0.3 * 0.75, 0.3 * 0.75),
    (candidate(dense=0.5, keyword=4.0), 0.35 + 0.15, 0.5),
    (candidate(dense=-0.4, keyword=4.0), 0.15, 0.15),
    (candidate(), 0.0, 0.0),
    # one half-life old: decay 0.5, so recency 0.8 + 0.2 * 0.5
    (candidate(dense=1.0, content_at=NOW - 180 * DAY), 0.7, 0.7 * 0.9),
    # two half-lives: decay 0.25
    (candidate(dense=1.0, content_at=NOW - 360 * DAY), 0.7, 0.7 * 0.85),
    # an episode fades in 14 days, a kind the recipe does not name in 30 (the default)
    (candidate(dense=1.0, kind="episode", content_at=NOW - 14 * DAY), 0.7, 0.7 * 0.9),
    (candidate(dense=1.0, kind="gossip", content_at=NOW - 30 * DAY), 0.7, 0.7 * 0.9),
    # content from the future (clock skew) or of unknown age is new
    (candidate(dense=1.0, content_at=NOW + 10 * DAY), 0.7, 0.7),
    (candidate(dense=1.0, content_at=None), 0.7, 0.7),
    (candidate(dense=1.0, importance=1.0), 0.7, 0.7 * 1.1),
    (candidate(dense=1.0, importance=0.0), 0.7, 0.7 * 0.9),
    (candidate(dense=1.0, confidence=0.0), 0.7, 0.7 * 0.7),
    (candidate(dense=1.0, confidence=0.5), 0.7, 0.7 * 0.85),
    (candidate(dense=1.0, importance=1.0, confidence=0.5, content_at=NOW - 180 * DAY),
     0.7, 0.7 * 0.9 * 1.1 * 0.85),
], ids=["dense", "keyword at half", "keyword above half", "dense and keyword",
        "a negative cosine counts as none", "nothing", "one half-life", "two half-lives",
        "episode", "unnamed kind", "future", "undated", "important", "unimportant",
        "unsure", "half sure", "every factor"])
def test_the_score_is_relevance_times_recency_importance_and_confidence(
        found: Candidate, relevance: float, final: float) -> None:
    ranked = score(found, RECIPE, NOW)
    assert ranked.relevance == pytest.approx(relevance)
    assert ranked.score == pytest.approx(final)
    assert ranked.explain["score"] == pytest.approx(final, abs=1e-6)


@pytest.mark.parametrize(("kind", "half_life"), [
    ("fact", 180.0), ("preference", 180.0), ("decision", 365.0), ("steering_rule", 730.0),
    ("observation", 30.0), ("episode", 14.0), ("gossip", 30.0)])
def test_the_decay_is_one_half_after_the_half_life_of_the_kind(kind: str, half_life: float
                                                               ) -> None:
    explain = score(candidate(dense=1.0, kind=kind, content_at=NOW - half_life * DAY),
                    RECIPE, NOW).explain
    assert (explain["half_life_days"], explain["decay"]) == (half_life, 0.5)
    assert explain["age_days"] == half_life


def test_the_recipe_is_data_a_recipe_without_recency_ignores_age() -> None:
    timeless = Recipe(recency_weight=0.0)
    old = candidate(dense=1.0, content_at=NOW - 10_000 * DAY)
    assert score(old, timeless, NOW).score == pytest.approx(0.7)
    assert score(old, RECIPE, NOW).score < 0.7 * 0.81


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


def test_a_near_duplicate_of_a_better_hit_collapses_into_it() -> None:
    kept, into = collapse(ranked(
        candidate("best", dense=0.9, vector=[2.0, 0.0, 0.0]),
        candidate("copy", dense=0.8, vector=at_cosine(0.99))), RECIPE)
    assert [r.candidate.item_id for r in kept] == ["best"]
    assert into == {"copy": "best"}


def test_distinct_hits_and_hits_without_vectors_are_kept() -> None:
    kept, into = collapse(ranked(
        candidate("best", dense=0.9, vector=[1.0, 0.0, 0.0]),
        candidate("close", dense=0.8, vector=at_cosine(0.94)),
        candidate("other", dense=0.7, vector=[0.0, 0.0, 1.0]),
        candidate("words", keyword=30.0)), RECIPE)
    assert [r.candidate.item_id for r in kept] == ["best", "close", "other", "words"]
    assert into == {}


def test_the_duplicate_threshold_is_part_of_the_recipe() -> None:
    hits = ranked(candidate("best", dense=0.9, vector=[1.0, 0.0, 0.0]),
                  candidate("close", dense=0.8, vector=at_cosine(0.94)))
    kept, into = collapse(hits, Recipe(duplicate_cosine=0.9))
    assert [r.candidate.item_id for r in kept] == ["best"]
    assert into == {"close": "best"}


def test_a_duplicate_collapses_into_the_hit_it_is_closest_to() -> None:
    kept, into = collapse(ranked(
        candidate("x", dense=0.9, vector=[1.0, 0.0, 0.0]),
        candidate("y", dense=0.8, vector=[0.0, 1.0, 0.0]),
        candidate("near y", dense=0.7, vector=[0.01, 1.0, 0.0])), RECIPE)
    assert [r.candidate.item_id for r in kept] == ["x", "y"]
    assert into == {"near y": "y"}


# --- modes ----------------------------------------------------------------------------------

def test_the_modes_fetch_more_and_cut_lower_the_wider_they_look() -> None:
    assert {name: mode.k for name, mode in MODES.items()} == {
        "execution": 5, "planning": 20, "brainstorming": 30}
    thresholds = [MODES[m].threshold for m in ("execution", "planning", "brainstorming")]
    assert thresholds == sorted(thresholds, reverse=True)
    assert all(0 < t < 1 for t in thresholds)
