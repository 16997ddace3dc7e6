"""The compact lifecycle folds (items as columns, vectors and words spilled to disk) decide
exactly what the folds that held every item and vector in memory decided, on random logs; and
what they keep in memory per item stays small."""

import dataclasses
import random
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import numpy as np
import pytest

from memledger_lifecycle.fold import LifecycleFold
from memledger_lifecycle.forming_fold import FormingFold
from memledger_platform.events import Event
from tests.unit.lifecycle_oracle.fold import LifecycleFold as OracleFold
from tests.unit.lifecycle_oracle.forming_fold import FormingFold as OracleForming

T0 = datetime(2026, 11, 1, tzinfo=UTC)
WORDS = ("garden", "tomato", "invoice", "overdue", "sea", "build", "python", "tea", "basil")


class RandomLog:
    """A random but well-formed log: policies of every kind, items in a few scopes with
    vectors near a few centres (so duplicates and themes occur), and changes to them."""

    def __init__(self, seed: int, dims: int = 8) -> None:
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.centres = self.np.standard_normal((3, dims))
        self.events: list[tuple[Event, str | None]] = []
        self.items: list[tuple[str, str, str | None]] = []
        self.sessions = [str(UUID(int=900 + n)) for n in range(2)]

    def add(self, event_type: str, tenant: str = "acme", space: str = "main",
            session: str | None = None, subject: str | None = None, actor: str = "tester",
            **payload: Any) -> None:
        position = len(self.events) + 1
        at = T0 + timedelta(hours=position)
        self.events.append((Event(position, at, event_type, str(UUID(int=10_000 + position)),
                                  tenant, space, actor, session, None, None, None, payload),
                            subject))

    def policy(self, tenant: str, space: str, version: int) -> None:
        r = self.rng
        values: dict[str, Any] = {"retention_days": {"event": r.choice([1, 5, 40])},
                  "decay_half_life_days": {"observation": r.choice([0.5, 2.0, 10.0])},
                  "forget_below": r.choice([None, 0.2, 0.5]),
                  "max_items": r.choice([None, 3, 8]), "session_ttl_seconds": 7200,
                  "layer_retention_days": {"session": 2},
                  "consolidation": r.choice(["off", "suggest", "merge"]),
                  "merge_cosine": r.choice([0.8, 0.95]), "theme_cosine": r.choice(
                      [None, 0.6, 0.9]), "retroactive": r.random() < 0.3,
                  "legal_hold": r.random() < 0.1}
        self.add("space.policy_set", tenant, space, policy_version=version, **values)

    def vector(self) -> list[float]:
        centre = self.centres[self.rng.randrange(3)]
        return list(centre + self.rng.choice([0.05, 0.3, 1.0]) * self.np.standard_normal(
            len(centre)))

    def item(self) -> None:
        r = self.rng
        tenant, space = r.choice(["acme", "beta"]), r.choice(["main", "side"])
        session = r.choice([None, None, None, None, *self.sessions])
        subject = r.choice([None, "user:ada", "user:bo"])
        item_id = str(UUID(int=len(self.events) + 1))
        self.add("memory.asserted", tenant, space, session, subject, item_id=item_id,
                 kind=r.choice(["observation", "event", "fact"]),
                 content=" ".join(r.sample(WORDS, 3)), importance=round(r.random(), 3),
                 confidence=round(r.uniform(0.3, 1), 2), **(
                     {"layer": "ecosystem"} if r.random() < 0.1 else {}))
        self.items.append((tenant, space, item_id))

    def change(self) -> None:
        r = self.rng
        tenant, space, item_id = r.choice(self.items)
        kind = r.choice(["embedded"] * 8 + ["revised", "reaffirmed",
                         "retracted", "superseded", "promoted", "importance_learned",
                         "feedback", "retrieval", "archived", "merged"])
        at: dict[str, Any] = {"tenant": tenant, "space": space}
        match kind:
            case "embedded":
                self.add("memory.embedded", **at, item_id=item_id, item_version=r.choice(
                    [1, 1, 1, 2]), model="m", dims=8, vector=self.vector())
            case "revised":
                self.add("memory.revised", **at, item_id=item_id, content=r.choice(
                    [None, "python build tea"]), importance=r.choice([None, 0.9]),
                    confidence=r.choice([None, 0.4]))
            case "promoted":
                self.add("memory.promoted", **at, item_id=item_id, layer="project")
            case "importance_learned":
                self.add("memory.importance_learned", **at, actor="memledger:lifecycle",
                         item_id=item_id, importance=round(r.random(), 2), prior=0.5,
                         signals={}, reason="r")
            case "feedback":
                self.add("feedback.recorded", **at, feedback_id=str(UUID(int=r.randrange(
                    1 << 30))), item_id=item_id, signal=r.choice(["used", "unused", "rating"]),
                    rating=r.randint(1, 5))
            case "retrieval":
                shown = [{"ref": i, "score": 0.5, "section": "results"}
                         for _, _, i in r.sample(self.items, min(3, len(self.items)))]
                self.add("retrieval.performed", **at, retrieval_id=str(UUID(int=7)),
                         results=shown)
            case _:
                self.add(f"memory.{kind}", **at, item_id=item_id, reason="r",
                         superseded_by=item_id, policy_version=1, merged_item_ids=[])

    def generate(self, steps: int) -> "RandomLog":
        for n, session in enumerate(self.sessions):
            self.add("session.started", session_id=session)
            self.add("session.started", "beta", session_id=session)
            if n == 0:
                self.add("session.ended", session_id=session)
        for tenant in ("acme", "beta"):
            for space in ("main", "side"):
                self.policy(tenant, space, 1)
        for step in range(steps):
            roll = self.rng.random()
            if roll < 0.35 or not self.items:
                self.item()
            elif roll < 0.97:
                self.change()
            elif roll < 0.99:
                self.policy(self.rng.choice(["acme", "beta"]), "main", 2 + step)
            else:
                self.add("subject.erased", self.rng.choice(["acme", "beta"]),
                         subject_id=self.rng.choice(["user:ada", "user:bo"]), key_id="k")
        return self


def _decisions(lifecycle: Any, forming: Any, events: list[tuple[Event, str | None]]
               ) -> list[Any]:
    """What the folds decide as the events arrive: consolidations at every tenth event,
    then, at the end, the archives at a few moments, the themes and learned importance."""
    decided: list[Any] = []
    for n, (event, subject) in enumerate(events):
        lifecycle.apply(event, subject)
        forming.apply(event, subject)
        if n % 10 == 0:
            decided.append(_plain(lifecycle.take_consolidations()))
    decided.append(_plain(lifecycle.take_consolidations()))
    end = events[-1][0].recorded_at
    for later in (timedelta(0), timedelta(days=1), timedelta(days=30)):
        decided.append(_plain(lifecycle.archives(end + later)))
    decided.append(list(forming.themes(lifecycle)))
    decided.append(list(forming.importance(lifecycle)))
    return decided


def _plain(found: list[Any]) -> list[tuple[Any, ...]]:
    """Each decision's fields (the two folds' record classes differ, their fields not)."""
    return [dataclasses.astuple(d) for d in found]


@pytest.mark.parametrize("seed", range(12))
def test_the_compact_folds_decide_what_the_folds_holding_everything_decided(
        seed: int) -> None:
    events = RandomLog(seed).generate(400).events
    compact = _decisions(LifecycleFold(), FormingFold(), events)
    oracle = _decisions(OracleFold(), OracleForming(), events)

    assert compact == oracle
    assert all(compact[-5:]), "every kind of decision is made"
    assert any(compact[:-5]), "near-duplicates are found"


def test_every_item_reads_back_as_the_oracle_holds_it_vector_included() -> None:
    events = RandomLog(99).generate(300).events
    compact, oracle = LifecycleFold(), OracleFold()
    for event, subject in events:
        compact.apply(event, subject)
        oracle.apply(event, subject)

    assert set(compact.items) == set(oracle.items)
    for key, old in oracle.items.items():
        new = compact.items[key]
        assert (new.space, new.kind, new.layer, new.session, new.status, new.importance,
                new.confidence, new.reinforced_at, new.version, new.subject) == (
            old.space, old.kind, old.layer, old.session, old.status, old.importance,
            old.confidence, old.reinforced_at, old.version, old.subject)
        assert (new.vector is None) == (old.vector is None)
        if old.vector is not None and new.vector is not None:
            assert new.vector.tobytes() == old.vector.tobytes()


def _held_per_item(make: Any, count: int, dims: int = 384) -> float:
    rng = np.random.default_rng(1)
    lifecycle, forming = make()
    vectors = (rng.standard_normal(dims).tolist() for _ in range(count))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(count):
        item = str(UUID(int=(1 << 64) + n))
        for event in (Event(2 * n + 1, T0, "memory.asserted", item, "acme", "main", "t", None,
                            None, None, None, {"item_id": item, "kind": "fact", "importance":
                                               0.5, "content": f"tea garden note {n}"}),
                      Event(2 * n + 2, T0, "memory.embedded", item, "acme", "main", "t",
                            None, None, None, None, {"item_id": item, "item_version": 1,
                                                     "vector": next(vectors)})):
            lifecycle.apply(event)
            forming.apply(event)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held / count


def test_what_the_folds_hold_per_item_is_a_few_hundred_bytes_not_its_vector() -> None:
    compact = _held_per_item(lambda: (LifecycleFold(), FormingFold()), 4_000)
    oracle = _held_per_item(lambda: (OracleFold(), OracleForming()), 4_000)

    assert compact < 450  # a 384-dimension float32 vector alone is 1,536 bytes
    assert oracle > 1_536
