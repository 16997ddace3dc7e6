"""``bench retrieval --forming``: does searching what memledger formed from a conversation
beside its messages find more?

The conversations are already loaded as messages, and the server's enricher forms memories
from them as it would for any user (its default extractor, ``rules``: facts and preferences
about the speaker, and extractive session summaries). Each session is then ended
(``end_session``, which writes its summary), and once the server has recorded, projected and
indexed all of it, every question is asked twice of the same server:

- ``forming_messages_only_*``: ``kinds: ["message"]``, the messages alone (the baseline);
- ``forming_mixed_*``: messages and derived memories together, in the server's order, each
  hit credited with the turns and sessions it brings back (``credit``).

Beside them, ways of using the same mixed hits (``VARIANTS``), and what the mixed top 10 held
(``forming_top10_derived_share``, ``forming_top10_summary_share``).
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from memledger_cli.bench import conversations, credit, recall
from memledger_cli.bench.conversations import Loaded
from memledger_cli.bench.load import load
from memledger_cli.bench.locomo import CATEGORIES
from memledger_cli.bench.settle import settled

SUMMARY = "summary"
DERIVED = "derived"
DEPTH = 40
"""Hits asked for in the mixed search: room for a variant to move derived hits down."""
SETTLE_ROUNDS = 20


@dataclass(frozen=True)
class Hit:
    credit: credit.Credit
    kind: str
    """"message", "summary" or "derived" (a fact or preference)."""
    score: float


@dataclass(frozen=True)
class Formed:
    loaded: Loaded
    items: dict[str, dict[str, Any]]
    """The derived items of its space, by id."""

    @property
    def session_of(self) -> dict[str, str]:
        return {t.dia_id: str(t.session) for t in self.loaded.conversation.turns}

    def hit(self, found: dict[str, Any]) -> Hit:
        """A search hit, credited with what it brings back."""
        ref = conversations.hit_id(found)
        if ref in self.loaded.turn_of:
            return Hit(credit.of_turn(self.loaded.turn_of[ref], self.session_of), "message",
                       float(found["score"]))
        item = self.items.get(ref)
        if item is None:
            return Hit(credit.NOTHING, str(found.get("kind")), float(found["score"]))
        named = {conversations.session_id_of(self.loaded.space, s.number): str(s.number)
                 for s in self.loaded.conversation.sessions}
        return Hit(credit.of_item(item, self.loaded.turn_of, self.session_of, named),
                   SUMMARY if SUMMARY in item.get("tags", ()) else DERIVED,
                   float(found["score"]))


Variant = Callable[[Sequence[Hit], Mapping[str, str]], list[credit.Credit]]
"""A way of using a question's mixed hits (given the session of each turn)."""


def as_ranked(hits: Sequence[Hit], session_of: Mapping[str, str] | None = None
              ) -> list[credit.Credit]:
    """The hits in the server's order."""
    return [h.credit for h in hits]


def derived_weighted(weight: float) -> Variant:
    """The hits reordered with a derived hit's score times ``weight`` (a message's as is):
    what is derived restates what was said, so it goes above a message only when it
    matches the query ``1 / weight`` times better."""
    def ranked(hits: Sequence[Hit], session_of: Mapping[str, str]) -> list[credit.Credit]:
        order = sorted(hits, key=lambda h: -h.score * (1.0 if h.kind == "message" else weight))
        return [h.credit for h in order]
    return ranked


def sources_in_place(hits: Sequence[Hit], session_of: Mapping[str, str]
                     ) -> list[credit.Credit]:
    """The turns the hits bring back, in order, each once: a derived hit is followed to its
    sources (a summary's all lie in its session), which take its place, one place a turn."""
    turns = dict.fromkeys(t for hit in hits for t in hit.credit.turns)
    return [credit.of_turn(t, session_of) for t in turns]


VARIANTS: dict[str, Variant] = {"mixed": as_ranked, "derived_half": derived_weighted(0.5),
                                "sources_in_place": sources_in_place}
"""Ways of using the mixed hits, each scored as ``forming_<name>_*``."""


def end_commands(loaded: Loaded) -> list[dict[str, Any]]:
    """The ``end_session`` of every session of ``loaded``'s conversation."""
    return [{"command": "end_session", "space_id": loaded.space,
             "session_id": conversations.session_id_of(loaded.space, s.number)}
            for s in loaded.conversation.sessions]


async def form(http: aiohttp.ClientSession, loaded: Sequence[Loaded]) -> list[Formed]:
    """Every session ended, and what was derived from the conversations once the server has
    recorded and indexed all of it (its position no longer moves between two quiet spells)."""
    await load(http, [c for each in loaded for c in end_commands(each)], clients=1)
    last = -1
    for _ in range(SETTLE_ROUNDS):
        await settled(http)
        async with http.get("/health") as health:
            position = int((await health.json())["position"])
        if position == last:
            break
        last = position
    return [Formed(each, await derived_items(http, each)) for each in loaded]


async def derived_items(http: aiohttp.ClientSession, loaded: Loaded
                        ) -> dict[str, dict[str, Any]]:
    """The derived items of ``loaded``'s space that hold when its questions are asked."""
    found: dict[str, dict[str, Any]] = {}
    after: str | None = None
    while True:
        params = {"tag": DERIVED, "limit": "1000",
                  "valid_at": loaded.conversation.asked_at.isoformat(),
                  **({"after": after} if after else {})}
        async with http.get(f"/v1/spaces/{loaded.space}/items", params=params) as response:
            if response.status != 200:
                raise RuntimeError(f"listing derived items -> {response.status}")
            items = (await response.json())["items"]
        found.update({str(i["item_id"]): i for i in items})
        if len(items) < 1000:
            return found
        after = str(items[-1]["item_id"])


async def ask_all(http: aiohttp.ClientSession, formed: Sequence[Formed],
                  extra: dict[str, Any]) -> list[list[Hit]]:
    """Every question's hits, credited, one question at a time."""
    asked = []
    for each in formed:
        for question in each.loaded.conversation.questions:
            hits, _ = await conversations.search(http, each.loaded, question, extra)
            asked.append([each.hit(h) for h in hits])
    return asked


async def measure(http: aiohttp.ClientSession, loaded: Sequence[Loaded]) -> dict[str, Any]:
    """The forming part's figures (see the module)."""
    formed = await form(http, loaded)
    messages = await ask_all(http, formed, {"kinds": ["message"]})
    mixed = await ask_all(http, formed, {"k": DEPTH})
    out: dict[str, Any] = {**_counts(formed, mixed), **_scored(
        formed, [as_ranked(h) for h in messages], "forming_messages_only_")}
    for name, variant in VARIANTS.items():
        sessions = [f.session_of for f in formed for _ in f.loaded.conversation.questions]
        out.update(_scored(formed, [variant(h, s) for h, s in zip(mixed, sessions, strict=True)],
                           f"forming_{name}_"))
    return out


def _scored(formed: Sequence[Formed], asked: Sequence[Sequence[credit.Credit]], prefix: str
            ) -> dict[str, float]:
    """The metrics of each question's top ``conversations.K`` credits (as the messages-only
    figures of ``retrieval`` are taken within the K hits asked for)."""
    questions = [(f, q) for f in formed for q in f.loaded.conversation.questions]
    scored = [credit.score(hits[:conversations.K], q.evidence, f.session_of,
                           CATEGORIES[q.category])
              for (f, q), hits in zip(questions, asked, strict=True)]
    return recall.summary(scored, prefix=prefix)


def _counts(formed: Sequence[Formed], mixed: Sequence[Sequence[Hit]]) -> dict[str, Any]:
    items = [i for f in formed for i in f.items.values()]
    summaries = sum(SUMMARY in i.get("tags", ()) for i in items)
    top = [h for hits in mixed for h in hits[:10]]
    return {"forming_derived_items": len(items), "forming_summaries": summaries,
            "forming_facts": len(items) - summaries,
            "forming_top10_derived_share": round(sum(h.kind != "message" for h in top)
                                                 / max(1, len(top)), 4),
            "forming_top10_summary_share": round(sum(h.kind == SUMMARY for h in top)
                                                 / max(1, len(top)), 4)}
