"""Time named in a search's words: resolved against the search's valid time into periods
(``when``), which lift the hits whose valid time meets them (``ranking``)."""

from datetime import UTC, datetime

import pytest

from memledger_query.core import when
from memledger_query.core.ranking import Candidate, Recipe, rank, score
from memledger_query.entrypoints.semantic_http import _recipe
from memledger_schemas.api.semantic import SearchRequest

AT = datetime(2023, 8, 20, 15, 30, tzinfo=UTC)  # a Sunday


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


def periods(query: str) -> list[tuple[str, datetime, datetime]]:
    return [(w.text, datetime.fromtimestamp(w.start, UTC), datetime.fromtimestamp(w.end, UTC))
            for w in when.resolve(query, AT)]


@pytest.mark.parametrize(("query", "expected"), [
    ("what did she say on 7 July, 2023?", [("on 7 July, 2023", day(2023, 7, 7), day(2023, 7, 8))]),
    ("which class did he start in December 2022?",
     [("in December 2022", day(2022, 12, 1), day(2023, 1, 1))]),
    ("what happened in May?", [("in May", day(2023, 5, 1), day(2023, 6, 1))]),
    ("what did we decide last week?", [("last week", day(2023, 8, 7), day(2023, 8, 14))]),
    ("where did they travel two years ago?",
     [("two years ago", day(2021, 1, 1), day(2022, 1, 1))]),
    ("what did I say yesterday?", [("yesterday", day(2023, 8, 19), day(2023, 8, 20))]),
    ("did it change before 2020?", [("2020", day(2020, 1, 1), day(2021, 1, 1))]),
], ids=["a day", "a month and year", "a month of this year", "last week", "years ago",
        "yesterday", "a year"])
def test_a_named_period_resolves_to_its_whole_day_week_month_or_year(
        query: str, expected: list[tuple[str, datetime, datetime]]) -> None:
    assert periods(query) == expected


@pytest.mark.parametrize("query", [
    "What may I do about it?", "Can you march with us?", "what is the plan now?",
    "what is 2 + 2", "How long ago was her 18th birthday?", "what did Ada research?",
    "what did we discuss?"])
def test_words_that_only_look_like_dates_name_no_period(query: str) -> None:
    assert periods(query) == []


def test_the_same_words_at_another_valid_time_name_another_period() -> None:
    later = when.resolve("what did we decide last week?", day(2024, 1, 10))
    assert [(w.start, w.end) for w in later] == [(day(2024, 1, 1).timestamp(),
                                                  day(2024, 1, 8).timestamp())]


MAY = when.Period("in May 2023", day(2023, 5, 1).timestamp(), day(2023, 6, 1).timestamp())


def test_nearness_is_one_inside_the_period_and_fades_outside() -> None:
    assert when.nearness((MAY,), "message", day(2023, 5, 9).timestamp()) == 1.0
    assert when.nearness((MAY,), "episode", day(2023, 5, 31).timestamp()) == 1.0
    soon = when.nearness((MAY,), "message", day(2023, 6, 4).timestamp())
    late = when.nearness((MAY,), "message", day(2023, 9, 1).timestamp())
    early = when.nearness((MAY,), "observation", day(2023, 4, 28).timestamp())
    assert 0.8 < soon < 1.0
    assert 0.8 < early < 1.0
    assert 0.0 < late < soon


def test_only_events_are_lifted_and_only_when_the_query_names_a_period() -> None:
    assert when.nearness((), "message", day(2023, 5, 9).timestamp()) == 0.0
    for state in ("fact", "preference", "decision"):
        assert when.nearness((MAY,), state, day(2023, 5, 9).timestamp()) == 0.0


def message(item: str, said: datetime, dense: float) -> Candidate:
    return Candidate(item, {"kind": "message", "content_at": None, "importance": 0.5,
                            "confidence": 1.0, "valid_from": said.timestamp()}, dense=dense)


def test_a_hit_said_in_the_named_period_moves_above_a_slightly_closer_one_said_elsewhere(
        ) -> None:
    said_in_may = message("may", day(2023, 5, 12), dense=0.60)
    said_in_march = message("march", day(2023, 3, 2), dense=0.65)
    now = AT.timestamp()
    assert [r.candidate.item_id for r in rank([said_in_may, said_in_march], Recipe(), now)] == [
        "march", "may"]
    lifted = rank([said_in_may, said_in_march], Recipe(), now, periods=(MAY,))
    assert [r.candidate.item_id for r in lifted] == ["may", "march"]
    assert lifted[0].explain["time_nearness"] == 1.0
    assert lifted[0].explain["time_factor"] == pytest.approx(1.6)
    assert lifted[0].relevance == score(said_in_may, Recipe(), now).relevance, (
        "time orders hits; it never lets one in")


def test_a_recipe_without_time_weight_ignores_the_named_period() -> None:
    found = score(message("m", day(2023, 5, 12), dense=0.6), Recipe(time_weight=0.0),
                  AT.timestamp(), periods=(MAY,))
    assert found.explain["time_factor"] == 1.0


def test_weights_a_request_names_both_cut_and_order_and_by_default_order_keeps_its_own(
        ) -> None:
    default = _recipe(Recipe(), SearchRequest(query="q"))
    assert (default.dense_weight, default.keyword_weight) == (0.7, 0.3)
    assert (default.order_dense_weight, default.order_keyword_weight) == (0.3, 0.7)
    named = _recipe(Recipe(), SearchRequest.model_validate(
        {"query": "q", "weights": {"dense": 1, "keyword": 0}}))
    assert (named.dense_weight, named.keyword_weight) == (1, 0)
    assert (named.order_dense_weight, named.order_keyword_weight) == (1, 0)
    recorded = SearchRequest(query="q").model_dump(mode="json")
    assert recorded["weights"] is None, "a replay of the recorded request ranks the same"
    assert _recipe(Recipe(), SearchRequest.model_validate(recorded)) == default
