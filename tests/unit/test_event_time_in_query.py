"""Time relative to an event in a search's words ("before she moved"): recognised by grammar
(``anchors.find``), resolved through the anchor event's hit in the same scope
(``anchors.resolve``) into a window that lifts the event hits in it (``ranking``)."""

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from memledger_platform.settings import SettingsError, load_settings
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import OPEN, IndexedPoint, Scope
from memledger_platform.vectorindex.sparse import encode_document
from memledger_query.core import anchors, when
from memledger_query.core.ranking import Candidate, Recipe, policy_version, rank
from memledger_query.entrypoints.grpc_convert import message as as_grpc
from memledger_schemas.api.semantic import TimeWindow
from memledger_schemas.grpc.v1 import query_pb2 as pb


@pytest.mark.parametrize(("query", "relation", "anchor"), [
    ("What did Ana paint before she moved?", "before", "she moved"),
    ("What did they serve after the wedding?", "after", "the wedding"),
    ("What has changed since I started the new job?", "after", "I started the new job"),
    ("Which songs did he play while camping?", "around", "camping"),
    ("What did the kids make during the pottery workshop?", "around", "the pottery workshop"),
    ("What did Ana say when Ben lost his keys?", "around", "Ben lost his keys"),
    ("When she moved, what did she leave behind?", "around", "she moved"),
    ("Where did we live until the flood?", "before", "the flood"),
    ("What did she plan before her 18th birthday?", "before", "her 18th birthday"),
    ("What did we eat after visiting Rome?", "after", "visiting Rome"),
], ids=["before a clause", "after a noun phrase", "since a past clause", "while a gerund",
        "during a noun phrase", "when a named subject's clause", "a leading when-clause",
        "until a noun phrase", "a number inside a noun phrase", "after a gerund"])
def test_a_subordinator_before_a_clause_or_noun_phrase_is_an_event_relative_expression(
        query: str, relation: str, anchor: str) -> None:
    found = anchors.find(query)
    assert found is not None
    assert (found.relation, found.anchor) == (relation, anchor)
    assert query.find(found.text) >= 0, "the expression is quoted as written"


@pytest.mark.parametrize("query", [
    "Have we met before?", "It worked out after all.", "What did we do after that?",
    "What happened before then?", "Since you like hiking, which trail should I try?",
    "I have been here since it is quiet", "When did she move?",
    "When Sam has lost his job as a pilot?", "Since when do you work here?",
    "Who will look after the kids?", "She was named after her grandmother",
    "Can I rest for a while?", "What did she do before May 2023?",
    "What changed after last week?", "Who won before 2020?", "What is the plan?",
    "after", "What did we decide?"],
    ids=["before as an adverb", "after all", "after that", "before then", "since as because",
         "since with a present clause", "the question word", "a question without its verb",
         "since when", "look after", "named after", "a while", "a named month",
         "last week", "a year", "no subordinator", "the word alone", "no expression"])
def test_a_word_that_only_looks_like_a_subordinator_is_not_one(query: str) -> None:
    assert anchors.find(query) is None


def test_an_expression_the_date_parser_resolved_is_left_to_it() -> None:
    query = "What did she paint before the 7 July exhibition?"
    assert anchors.find(query) is not None
    assert anchors.find(query, named=["7 July"]) is None


def test_a_pronoun_subject_is_searched_with_the_names_of_the_question() -> None:
    found = anchors.find("What did Ana paint before she moved to Lisbon?")
    assert found is not None
    assert found.search == "Ana she moved to Lisbon"
    plain = anchors.find("What did Ana paint before the flood?")
    assert plain is not None
    assert plain.search == "the flood"


@pytest.mark.parametrize(("word", "start", "end"), [
    ("before", -math.inf, 0.0), ("until", -math.inf, 0.0), ("after", 0.0, math.inf),
    ("since", 0.0, math.inf), ("when", -when.DAY, when.DAY), ("during", -when.DAY, when.DAY)])
def test_the_window_lies_on_the_anchors_side(word: str, start: float, end: float) -> None:
    relative = anchors.find(f"what did she paint {word} the move")
    assert relative is not None
    at = day(2023, 6, 1)
    window = anchors.window(relative, at, "m", "t")
    assert (window.start - at, window.end - at) == (start, end)


def test_an_open_window_is_listed_without_its_open_side_and_with_its_anchor() -> None:
    relative = anchors.find("what did she paint before she moved")
    assert relative is not None
    listed = TimeWindow.of(anchors.window(relative, day(2023, 6, 1), "m-1", "I moved!"))
    assert listed.valid_from is None
    assert listed.valid_to == datetime(2023, 6, 1, tzinfo=UTC)
    assert (listed.relation, listed.anchor_id, listed.anchor_text) == (
        "before", "m-1", "I moved!")


def day(y: int, m: int, d: int) -> float:
    return datetime(y, m, d, tzinfo=UTC).timestamp()


def message(n: int, content: str, said: float, **payload: Any) -> IndexedPoint:
    base: dict[str, Any] = {
        "tenant": "acme", "space": "talk", "item_id": f"m-{n}", "kind": "message",
        "tags": [], "content": content, "session": "s", "agent": None, "importance": 0.5,
        "confidence": 1.0, "content_at": said, "subject": None, "valid_from": said,
        "valid_to": OPEN, "sys_from": float(n), "sys_to": OPEN}
    return IndexedPoint(f"00000000-0000-0000-0000-{n:012d}", None, {**base, **payload},
                        encode_document(content))


INDEX = InMemoryVectorIndex()
INDEX.upsert([
    message(1, "Ana: I painted a lake at the old flat", day(2023, 3, 1)),
    message(2, "Ana: Big news, I moved to Lisbon last week!", day(2023, 6, 1)),
    message(3, "Ana: I painted the river from my new balcony", day(2023, 8, 1)),
    message(4, "Ana: moved to Lisbon is a fact I keep", day(2023, 1, 1), kind="fact",
            item_id="f-4")])
NOW = day(2023, 9, 1)


def resolved(query: str, *, position: int | None = None, bar: float = 0.3
             ) -> anchors.Resolved:
    relative = anchors.find(query)
    assert relative is not None
    return anchors.resolve(INDEX, [Scope("acme", valid_at=NOW, position=position)], relative,
                           Recipe(anchor_bar=bar))


def test_the_anchor_is_the_best_event_hit_and_its_time_the_windows_edge() -> None:
    found = resolved("What did Ana paint before she moved to Lisbon?")
    assert found.period is not None
    assert found.period.anchor_id == "m-2", "the fact that shares the words is no event"
    assert found.period.end == day(2023, 6, 1)
    assert found.best >= 0.3


def test_an_anchor_below_the_bar_resolves_nothing() -> None:
    found = resolved("What did Ana paint before she moved to Lisbon?", bar=0.99)
    assert found.period is None
    assert 0 < found.best < 0.99
    assert resolved("What did Ana paint before the earthquake?").period is None


def test_the_anchor_is_found_as_of_the_searchs_position() -> None:
    assert resolved("What did Ana paint before she moved to Lisbon?", position=1).period \
        is None, "as of position 1 the move was not yet told"


def candidate(item: str, said: float, dense: float) -> Candidate:
    return Candidate(item, {"kind": "message", "content_at": None, "importance": 0.5,
                            "confidence": 1.0, "valid_from": said}, dense=dense)


def test_an_event_in_the_window_moves_above_a_slightly_closer_one_outside() -> None:
    window = anchors.window(anchors.Relative("before she moved", "before", "she moved", ""),
                            day(2023, 6, 1), "m-2", "moved")
    earlier, later = candidate("lake", day(2023, 3, 1), 0.60), candidate(
        "river", day(2023, 8, 1), 0.65)
    assert [r.candidate.item_id for r in rank([earlier, later], Recipe(), NOW)] == [
        "river", "lake"]
    lifted = rank([earlier, later], Recipe(), NOW, periods=(window,))
    assert [r.candidate.item_id for r in lifted] == ["lake", "river"]
    assert lifted[0].explain["anchor_nearness"] == 1.0
    assert lifted[0].explain["anchor_factor"] == pytest.approx(1.6)
    assert lifted[0].explain["time_nearness"] == 0.0, "a named period's lift is apart"
    off = rank([earlier, later], Recipe(anchor_weight=0), NOW, periods=(window,))
    assert [r.candidate.item_id for r in off] == ["river", "lake"]


def test_an_expression_of_the_same_time_lifts_only_with_a_weight_of_its_own() -> None:
    window = anchors.window(anchors.Relative("while camping", "around", "camping", ""),
                            day(2023, 3, 1), "m-1", "camping")
    earlier, later = candidate("lake", day(2023, 3, 1), 0.60), candidate(
        "river", day(2023, 8, 1), 0.65)
    default = rank([earlier, later], Recipe(), NOW, periods=(window,))
    assert [r.candidate.item_id for r in default] == ["river", "lake"]
    assert default[1].explain["anchor_nearness"] == 1.0
    assert default[1].explain["anchor_factor"] == 1.0
    lifted = rank([earlier, later], Recipe(anchor_around_weight=0.6), NOW, periods=(window,))
    assert [r.candidate.item_id for r in lifted] == ["lake", "river"]


def test_only_the_relations_asked_for_are_recognised() -> None:
    query = "What did she sing while camping before the storm?"
    first = anchors.find(query)
    assert first is not None
    assert first.relation == "around"
    ordering = anchors.find(query, relations=("before", "after"))
    assert ordering is not None
    assert (ordering.relation, ordering.anchor) == ("before", "the storm")


def test_the_anchor_weight_is_part_of_the_ranking_policy() -> None:
    assert policy_version(Recipe(), "m") != policy_version(Recipe(anchor_weight=0), "m")


@pytest.mark.parametrize("value", ["-0.1", "2.5", "a lot"])
@pytest.mark.parametrize("variable", ["MEMLEDGER_RANKING_ANCHOR_WEIGHT",
                                      "MEMLEDGER_RANKING_ANCHOR_AROUND_WEIGHT"])
def test_a_bad_anchor_weight_is_refused_naming_its_variable(
        monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=variable):
        load_settings()


def test_an_open_window_and_its_anchor_cross_grpc_field_for_field() -> None:
    relative = anchors.find("what did she paint after she moved")
    assert relative is not None
    listed = TimeWindow.of(anchors.window(relative, day(2023, 6, 1), "m-1", "I moved!"))
    sent = as_grpc(listed, pb.TimeWindow())
    assert not sent.HasField("valid_to"), "open towards the future"
    assert sent.valid_from.ToDatetime(UTC) == datetime(2023, 6, 1, tzinfo=UTC)
    assert (sent.relation, sent.anchor_id, sent.anchor_text) == ("after", "m-1", "I moved!")
