"""Themes and learned importance, as the lifecycle scheduler decides them from the log: pure
functions of the events."""

import itertools
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger_lifecycle.fold import LifecycleFold
from memledger_lifecycle.forming_fold import STEP, FormingFold, Signals
from memledger_lifecycle.themes import Member, group, label_of
from memledger_platform.events import Event
from memledger_schemas import commands as c

T0 = datetime(2026, 11, 1, tzinfo=UTC)
IDS = [str(UUID(int=n)) for n in range(1, 10)]


class Log:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self._positions = itertools.count(1)

    def add(self, event_type: str, actor: str = "tester", **payload: Any) -> "Log":
        position = next(self._positions)
        self.events.append(Event(position, T0, event_type, str(UUID(int=1000 + position)),
                                 "acme", "main", actor, None, None, None, None, payload))
        return self

    def item(self, item_id: str, content: str, vector: list[float] | None = None,
             importance: float = 0.5) -> "Log":
        self.add("memory.asserted", item_id=item_id, kind="fact", content=content,
                 importance=importance)
        if vector is not None:
            self.add("memory.embedded", item_id=item_id, item_version=1, model="m",
                     dims=len(vector), vector=vector)
        return self

    def folded(self) -> tuple[LifecycleFold, FormingFold]:
        lifecycle, forming = LifecycleFold(), FormingFold()
        for event in self.events:
            lifecycle.apply(event)
            forming.apply(event)
        return lifecycle, forming


def _unit(*values: float) -> list[float]:
    vector = np.array(values, dtype=np.float64)
    return list(vector / np.linalg.norm(vector))


def _talk() -> Log:
    return (Log().add("space.policy_set", policy_version=1, theme_cosine=0.8)
            .item(IDS[0], "Tomatoes need sun in the garden", _unit(1, 0.1, 0))
            .item(IDS[1], "Basil grows next to tomatoes in the garden", _unit(1, 0.2, 0))
            .item(IDS[2], "The invoice for March is overdue", _unit(0, 1, 0.1))
            .item(IDS[3], "Pay the overdue invoice before Friday", _unit(0.1, 1, 0))
            .item(IDS[4], "A lone thought about the sea", _unit(0, 0, 1)))


def test_memories_close_in_meaning_form_themes_labelled_by_their_telling_words() -> None:
    lifecycle, forming = _talk().folded()
    found = [command for _, command in forming.themes(lifecycle)]
    assert all(isinstance(t, c.RecordTheme) for t in found)
    assert [sorted(map(str, t.members)) for t in found] == [sorted(IDS[:2]), sorted(IDS[2:4])]
    assert "garden" in found[0].label
    assert "tomato" in found[0].label
    assert "invoice" in found[1].label
    assert "overdue" in found[1].label
    assert {(t.size, t.threshold, t.policy_version) for t in found} == {(2, 0.8, 1)}


def test_themes_are_the_same_whenever_decided_and_nothing_is_sent_again_once_recorded(
        ) -> None:
    log = _talk()
    lifecycle, forming = log.folded()
    first = [command for _, command in forming.themes(lifecycle)]
    assert first == [command for _, command in _talk().folded()[1].themes(_talk().folded()[0])]
    for theme in first:
        log.add("theme.formed", theme_id=str(theme.theme_id), label=theme.label,
                members=[str(m) for m in theme.members], size=theme.size,
                threshold=theme.threshold, policy_version=1)
    lifecycle, forming = log.folded()
    assert list(forming.themes(lifecycle)) == []


def test_a_theme_that_no_longer_holds_is_dissolved() -> None:
    log = _talk()
    lifecycle, forming = log.folded()
    [garden, _] = [command for _, command in forming.themes(lifecycle)]
    log.add("theme.formed", theme_id=str(garden.theme_id), label=garden.label,
            members=[str(m) for m in garden.members], size=2, threshold=0.8, policy_version=1)
    log.add("memory.retracted", item_id=IDS[1])
    lifecycle, forming = log.folded()
    dissolved = [t for _, t in forming.themes(lifecycle) if t.theme_id == garden.theme_id]
    assert [(t.members, t.size) for t in dissolved] == [((), 0)]


def test_a_space_without_a_theme_threshold_forms_no_themes() -> None:
    log = Log().item(IDS[0], "tea", _unit(1, 0)).item(IDS[1], "tea again", _unit(1, 0.01))
    lifecycle, forming = log.folded()
    assert list(forming.themes(lifecycle)) == []


def test_leader_clustering_joins_the_closest_centre_above_the_threshold() -> None:
    members = [Member(i, np.array(_unit(*v), dtype=np.float32)) for i, v in
               zip(IDS, [(1, 0), (0.9, 0.1), (0, 1), (0.05, 1), (0.7, 0.7)], strict=False)]
    assert [[m.item_id for m in cluster] for cluster in group(members, 0.9)] == [
        IDS[:2], IDS[2:4]]


def test_a_label_prefers_words_the_members_share_and_the_space_rarely_uses() -> None:
    from collections import Counter

    members = [Counter({"garden": 1, "note": 1}), Counter({"garden": 1, "note": 1,
                                                            "basil": 1})]
    space = Counter({"garden": 2, "note": 9, "basil": 1})
    assert label_of(members, space, 10).split(" · ")[0] == "garden"


def test_used_and_well_rated_memories_learn_importance_with_a_reason() -> None:
    log = (Log().item(IDS[0], "tea", importance=0.5)
           .add("feedback.recorded", feedback_id=IDS[5], item_id=IDS[0], signal="used")
           .add("feedback.recorded", feedback_id=IDS[6], item_id=IDS[0], signal="rating",
                rating=5)
           .add("retrieval.performed", retrieval_id=IDS[7],
                results=[{"ref": IDS[0], "score": 0.5, "section": "results"},
                         {"ref": IDS[8], "score": 0.4, "section": "conversations"}]))
    lifecycle, forming = log.folded()
    [(tenant, learned)] = list(forming.importance(lifecycle))
    assert tenant == "acme"
    assert learned.importance > learned.prior == 0.5
    assert (learned.signals.used, learned.signals.ratings, learned.signals.recalled) == (
        1, (5,), 1)
    assert "used 1" in learned.reason
    assert "recalled 1" in learned.reason


def test_unused_memories_lose_importance_and_a_learned_value_is_not_sent_again() -> None:
    log = (Log().item(IDS[0], "tea", importance=0.8)
           .add("feedback.recorded", feedback_id=IDS[5], item_id=IDS[0], signal="unused"))
    lifecycle, forming = log.folded()
    [(_, learned)] = list(forming.importance(lifecycle))
    assert learned.importance < 0.8
    log.add("memory.importance_learned", actor="memledger:lifecycle", item_id=IDS[0],
            importance=learned.importance, prior=0.8, signals={}, reason="r")
    lifecycle, forming = log.folded()
    assert list(forming.importance(lifecycle)) == []
    assert lifecycle.items[("acme", IDS[0])].importance == learned.importance


def test_an_item_without_signals_keeps_the_importance_it_was_written_with() -> None:
    lifecycle, forming = Log().item(IDS[0], "tea", importance=0.9).folded()
    assert list(forming.importance(lifecycle)) == []


@settings(max_examples=200)
@given(st.lists(st.tuples(
    st.one_of(st.integers(0, 2000).map(lambda n: n / 2000),
              st.floats(0, 1, allow_nan=False)),
    st.one_of(st.none(), st.integers(0, 100).map(lambda n: n / 100),
              st.floats(0, 1, allow_nan=False))), min_size=1, max_size=30))
def test_judging_as_arrays_which_items_could_move_never_misses_one(
        items: list[tuple[float, float | None]]) -> None:
    """Priors on and between the rounding's half steps, learned values on and off its grid:
    every item whose exact decision moves its importance is among those the arrays find."""
    forming = FormingFold()
    for n, (prior, learned) in enumerate(items):
        forming.table.add("acme", str(UUID(int=n + 1)), prior=prior, last=n + 1,
                          learned=np.nan if learned is None else learned, words_len=-1)
    rows = np.arange(len(items), dtype=np.intp)
    found = set(forming._movable(rows).tolist())
    for row, (prior, learned) in enumerate(items):
        moved = Signals(prior, learned).importance()
        if abs(moved - (prior if learned is None else learned)) >= STEP / 2:
            assert row in found, (prior, learned, moved)
