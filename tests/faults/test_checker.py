"""The fault suite's checker sees every failure it is there to see: fed a doctored observation
(a write doubled in one place, lost in another, a refused write found, an erased subject's
plaintext left behind), it names each; fed a faithful one, nothing. No engines: the observation
is made by hand."""

from collections import Counter
from pathlib import Path

import pytest

from tests.faults import reliability
from tests.faults.backlog import Struck
from tests.faults.checker import Observed, judge
from tests.faults.mixed import Effect, Ledger, Refusal, Write

ITEM, MESSAGE = "item-1", "message-1"


def _ledger() -> Ledger:
    """An assertion and its revision, a message, feedback, a memory about a subject since
    erased (and the erasure), and a refused write."""
    return Ledger(acked=[
        Write("assert", "k1", 1.0, 1, (Effect("e1", 1, item_id=ITEM),)),
        Write("revise", "k2", 2.0, 2, (Effect("e2", 2, item_id=ITEM),)),
        Write("message", "k3", 3.0, 1, (Effect("e3", 3, message_id=MESSAGE),)),
        Write("feedback", "k4", 4.0, 1, (Effect("e4", 4, signal=True),)),
        Write("subject", "k5", 5.0, 1, (Effect("e5", 5, item_id="item-2"),), "s-1"),
        Write("erase", "s-1", 6.0, 1, (Effect("e6", 6),), "s-1")],
        refused=[Refusal("refuse-kind", "k7", "item-9", 422, 7.0)],
        erased={"s-1": "zqsecret"})


def _faithful() -> Observed:
    events = Counter({f"e{n}": 1 for n in range(1, 7)})
    rows: Counter[tuple[str, int]] = Counter({(ITEM, 1): 1, (ITEM, 2): 1})
    return Observed(
        events={"store": events.copy(), "stream": events.copy(),
                "changes": Counter({"e1": 1, "e2": 1, "e3": 1, "e4": 1, "e6": 1})},
        rows={"bitemporal": rows.copy(), "vectors": rows.copy()},
        twice={"bitemporal": set(), "vectors": set()}, items=Counter({ITEM: 1}),
        messages={"messages": Counter({MESSAGE: 1}), "message-vectors": Counter({MESSAGE: 1})},
        signals=Counter({4: 1}), stored_keys=Counter({"k1": 1, "k2": 1}),
        plaintext={"zqsecret": []})


def test_a_faithful_observation_passes_and_an_erased_subjects_writes_need_no_read_model() -> None:
    verdict = judge(_ledger(), _faithful())
    assert verdict.problems() == []


def test_an_event_published_twice_is_reported_doubled() -> None:
    observed = _faithful()
    observed.events["stream"]["e2"] = 2
    assert judge(_ledger(), observed).doubled == ["revise k2 @2: 2 in stream"]


def test_a_write_missing_from_one_read_model_is_reported_lost() -> None:
    observed = _faithful()
    del observed.rows["vectors"][(ITEM, 2)]
    del observed.messages["messages"][MESSAGE]
    assert judge(_ledger(), observed).lost == ["revise k2 @2: not in vectors",
                                               "message k3 @3: not in messages"]


@pytest.mark.parametrize("place", ["bitemporal", "vectors"])
def test_a_row_applied_twice_is_reported_doubled_by_its_twin_or_by_the_count(place: str) -> None:
    twin, extra = _faithful(), _faithful()
    twin.twice[place].add((ITEM, 1))
    extra.rows[place][(ITEM, 1)] = 2
    for observed in (twin, extra):
        assert judge(_ledger(), observed).doubled == [f"assert k1 @1: 2 in {place}"]


def test_a_refused_write_found_and_an_erased_plaintext_left_are_reported() -> None:
    observed = _faithful()
    observed.refused_items["item-9"] = 1
    observed.plaintext["zqsecret"] = ["memledger_rm_1.items"]
    verdict = judge(_ledger(), observed)
    assert verdict.refused_found == ["refused refuse-kind k7 found"]
    assert verdict.plaintext == ["erased zqsecret still in ['memledger_rm_1.items']"]


def test_the_table_counts_lost_and_doubled_writes_in_the_window_of_their_fault() -> None:
    observed = _faithful()
    observed.items[ITEM] = 0
    observed.signals[4] = 3
    struck = [Struck("projector", 2.5, "", 120, 4.2)]
    made = reliability.rows(_ledger(), observed, struck)
    assert [(r.acked, r.lost, r.doubled) for r in made] == [(2, 2, 0), (4, 0, 1)]
    assert "| kill -9 projector, backlog in flight | 4 | 0 | 1 | 120 | 4.2 |" in (
        reliability.markdown(made))


def test_a_run_rewrites_only_its_own_section_and_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n\n<!-- a:begin -->\nold a\n<!-- a:end -->\n\n"
                   "<!-- b:begin -->\nold b\n<!-- b:end -->\n")
    monkeypatch.delenv(reliability.DOC_ENV, raising=False)
    reliability.write_section("a", "new a")
    assert "old a" in doc.read_text()
    monkeypatch.setenv(reliability.DOC_ENV, str(doc))
    reliability.write_section("a", "new a")
    assert doc.read_text() == ("# Reliability\n\n<!-- a:begin -->\nnew a\n<!-- a:end -->\n\n"
                               "<!-- b:begin -->\nold b\n<!-- b:end -->\n")
