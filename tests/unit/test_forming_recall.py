"""How ``bench retrieval --forming`` scores a search whose hits are not all turns: a derived
memory or a summary is credited with what it brings back, and takes one place in the top k."""

from datetime import UTC, datetime

from memledger_cli.bench import credit, formed, recall
from memledger_cli.bench.conversations import Loaded, session_id_of
from memledger_cli.bench.locomo import Conversation, Question, Session, Turn

SESSION_OF = {"D1:1": "1", "D1:2": "1", "D2:1": "2", "D2:2": "2", "D3:1": "3"}
TURN_OF = {"m11": "D1:1", "m12": "D1:2", "m21": "D2:1", "m22": "D2:2", "m31": "D3:1"}


def _turn(dia_id: str) -> credit.Credit:
    return credit.of_turn(dia_id, SESSION_OF)


def _item(sources: list[str], session: str, tags: list[str]) -> dict[str, object]:
    return {"sources": [{"type": "message", "ref": r} for r in sources], "session_id": session,
            "tags": tags}


def test_a_derived_fact_is_credited_with_the_turns_its_sources_name_and_their_sessions() -> None:
    fact = credit.of_item(_item(["m21", "unknown"], "s2", ["derived"]), TURN_OF, SESSION_OF, {})
    assert fact == credit.Credit(("D2:1",), ("2",))
    hits = [_turn("D1:1"), fact]
    scored = credit.score(hits, ["D2:1"], SESSION_OF, "single_hop").values
    assert scored["recall_all_at_10"] == 1.0
    assert scored["mrr"] == 0.5
    assert credit.score(hits[:1], ["D2:1"], SESSION_OF, "x").values["recall_all_at_10"] == 0.0


def test_a_summary_counts_for_its_session_even_when_its_sources_are_elsewhere() -> None:
    summary = credit.of_item(_item(["m22"], "s3", ["derived", "summary"]), TURN_OF, SESSION_OF,
                             {"s3": "3"})
    assert summary.sessions == ("3", "2")
    assert credit.sessions_ranked([_turn("D1:1"), summary]) == ["1", "3", "2"]
    fact = credit.of_item(_item(["m22"], "s3", ["derived"]), TURN_OF, SESSION_OF, {"s3": "3"})
    assert fact.sessions == ("2",)  # only a summary stands for its session


def test_one_hit_takes_one_place_and_credits_all_its_turns_there() -> None:
    summary = credit.Credit(("D1:1", "D2:2"), ("1", "2"))
    hits = [_turn("D3:1")] * 4 + [summary] + [_turn("D1:2")]
    scored = credit.score(hits, ["D1:1", "D2:2"], SESSION_OF, "multi_hop").values
    assert scored["recall_all_at_5"] == 1.0
    assert scored["mrr"] == 0.2
    assert credit.score(hits[:4], ["D1:1"], SESSION_OF, "x").values["recall_any_at_10"] == 0.0


def test_with_one_turn_a_hit_the_scores_are_those_of_a_plain_ranking() -> None:
    session_of = {f"t{n}": f"S{n % 3}" for n in range(12)}
    ranking = [f"t{n}" for n in (5, 1, 7, 0, 9, 3, 11, 2, 8, 4, 6, 10)]
    for evidence in (["t0"], ["t7", "t4"], ["t6", "t10", "t1"], ["zz"]):
        hits = [credit.of_turn(t, session_of) for t in ranking]
        assert credit.score(hits, evidence, session_of, "x") == recall.score(
            ranking, evidence, session_of, "x")


def test_a_search_hit_is_credited_as_a_message_a_summary_a_fact_or_nothing() -> None:
    turns = (Turn("D1:1", "Ann", "hello there", 1), Turn("D1:2", "Bo", "hi", 1))
    talk = Conversation("c", (Session(1, datetime(2023, 5, 8, tzinfo=UTC), turns),),
                        (Question("q", ("D1:2",), 4),))
    loaded = Loaded(talk, "locomo-c", {"m1": "D1:1", "m2": "D1:2"})
    session = session_id_of("locomo-c", 1)
    items = {"i1": {**_item(["m2"], session, ["derived", "summary"])},
             "i2": {**_item(["m1"], session, ["derived"])}}
    each = formed.Formed(loaded, items)
    kinds = [each.hit({"item_id": ref, "score": 0.5, "kind": "x", **extra})
             for ref, extra in (("m2", {"message_id": "m2"}), ("i1", {}), ("i2", {}),
                                ("other", {}))]
    assert [h.kind for h in kinds] == ["message", "summary", "derived", "x"]
    assert [h.credit.turns for h in kinds] == [("D1:2",), ("D1:2",), ("D1:1",), ()]
    assert kinds[1].credit.sessions == ("1",)
    assert formed.end_commands(loaded) == [{"command": "end_session", "space_id": "locomo-c",
                                            "session_id": session}]


def _hit(turns: tuple[str, ...], kind: str, score: float) -> formed.Hit:
    return formed.Hit(credit.Credit(turns, tuple(dict.fromkeys(SESSION_OF[t] for t in turns))),
                      kind, score)


def test_derived_hits_at_half_weight_go_above_a_message_only_when_twice_as_good() -> None:
    hits = [_hit(("D1:1", "D1:2"), "summary", 0.9), _hit(("D2:1",), "message", 0.5),
            _hit(("D3:1",), "derived", 0.6), _hit(("D2:2",), "message", 0.2)]
    ranked = formed.derived_weighted(0.5)(hits, SESSION_OF)
    assert [c.turns for c in ranked] == [("D2:1",), ("D1:1", "D1:2"), ("D3:1",), ("D2:2",)]


def test_a_derived_hit_followed_to_its_sources_gives_each_turn_a_place_once() -> None:
    hits = [_hit(("D2:1",), "message", 0.9), _hit(("D1:1", "D2:1"), "summary", 0.8),
            _hit(("D1:1",), "message", 0.7), _hit(("D3:1",), "message", 0.6)]
    turns = formed.sources_in_place(hits, SESSION_OF)
    assert turns == [credit.of_turn(t, SESSION_OF) for t in ("D2:1", "D1:1", "D3:1")]
