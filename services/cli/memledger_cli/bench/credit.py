"""Scoring a search whose hits are not all turns (``bench retrieval --forming``): pure.

Each hit is credited with the turns and sessions it brings back (a ``Credit``):

- a message: its turn, and that turn's session;
- a derived fact or preference: the turns its ``sources`` name, and their sessions;
- a session summary (an ``episode`` tagged ``summary``): the turns its sentences were taken
  from (its ``sources``), and its own session.

The top k are the top k hits, whatever they are: a hit takes one place and credits, at that
place, everything it is credited with. So at turn level ``recall_all@k`` is 1 when every
evidence turn is credited within the first k hits, ``recall_any@k`` when one is, MRR is one
over the place of the first hit crediting an evidence turn, and nDCG's gain at a place is the
number of evidence turns first credited there (over the ideal of one evidence turn a place,
at most 1). Sessions are ranked in the order the hits first credit them. With one turn a hit
these are exactly ``recall``'s metrics, so the figures of a mixed search and of a
messages-only one compare directly.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memledger_cli.bench.recall import Scored, recall_all


@dataclass(frozen=True)
class Credit:
    turns: tuple[str, ...]
    sessions: tuple[str, ...]


NOTHING = Credit((), ())
"""What a hit the bench cannot map (no turn of the conversation) is credited with."""


def of_turn(turn: str, session_of: Mapping[str, str]) -> Credit:
    return Credit((turn,), _sessions((turn,), session_of))


def of_item(item: Mapping[str, Any], turn_of: Mapping[str, str], session_of: Mapping[str, str],
            session_named: Mapping[str, str]) -> Credit:
    """A derived item's credit: the turns of the messages its ``sources`` name, and their
    sessions; a summary also its own session (``session_named``: session by its id)."""
    turns = tuple(dict.fromkeys(turn_of[ref] for source in item.get("sources") or ()
                                if (ref := str(source.get("ref"))) in turn_of))
    own = session_named.get(str(item.get("session_id")))
    sessions = _sessions(turns, session_of)
    if own is not None and "summary" in (item.get("tags") or ()) and own not in sessions:
        sessions = (own, *sessions)
    return Credit(turns, sessions)


def _sessions(turns: Sequence[str], session_of: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(session_of[t] for t in turns if t in session_of))


def first_places(hits: Sequence[Credit], evidence: Sequence[str]) -> dict[str, int]:
    """Each evidence turn credited by a hit, with the place (from 1) of the first such hit."""
    wanted = set(evidence)
    found: dict[str, int] = {}
    for place, hit in enumerate(hits, 1):
        for turn in hit.turns:
            if turn in wanted:
                found.setdefault(turn, place)
    return found


def sessions_ranked(hits: Sequence[Credit]) -> list[str]:
    """Sessions in the order the hits first credit them."""
    return list(dict.fromkeys(s for hit in hits for s in hit.sessions))


def turn_metrics(hits: Sequence[Credit], evidence: Sequence[str]) -> dict[str, float]:
    wanted = set(evidence)
    places = first_places(hits, evidence)

    def all_at(k: int) -> float:
        return float(bool(wanted) and len(places) == len(wanted)
                     and max(places.values()) <= k)

    ideal = sum(1 / math.log2(rank + 1) for rank in range(1, min(len(wanted), 10) + 1))
    dcg = sum(1 / math.log2(place + 1) for place in places.values() if place <= 10)
    return {"recall_all_at_5": all_at(5), "recall_all_at_10": all_at(10),
            "recall_any_at_10": float(any(p <= 10 for p in places.values())),
            "mrr": 1 / min(places.values()) if places else 0.0,
            "ndcg_at_10": min(1.0, dcg / ideal) if ideal else 0.0}


def score(hits: Sequence[Credit], evidence: Sequence[str], session_of: Mapping[str, str],
          category: str) -> Scored:
    """Every turn metric, and ``session_recall_all_at_5``, of one question's hits."""
    values = turn_metrics(hits, evidence)
    values["session_recall_all_at_5"] = recall_all(
        sessions_ranked(hits), {session_of[e] for e in evidence if e in session_of}, 5)
    return Scored(category, values)
