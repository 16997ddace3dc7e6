"""Retrieval metrics over ranked lists of turn ids: pure, for ``bench retrieval``.

A ranking is a list of ids, best first (no repeats); the evidence is the set of ids that
answer the question.

- ``recall_all(k)``: 1 if every evidence id is in the top k, else 0 (a multi-hop question
  counts only when all its turns are found);
- ``recall_any(k)``: 1 if any evidence id is in the top k;
- ``mrr``: 1 / the rank of the first evidence id (0 if none is in the ranking);
- ``ndcg(k)``: binary-gain DCG of the top k over the best possible DCG for the evidence;
- at session level, sessions are ranked by their best turn (the order in which they first
  appear in the turn ranking), and ``recall_all`` is taken over evidence sessions.

``rrf`` is reciprocal-rank fusion (Cormack et al.): an id's score is the sum over the rankings
it appears in of ``1 / (k + rank)``, rank counted from 1.
"""

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

RRF_K = 60


def recall_all(ranking: Sequence[str], evidence: Iterable[str], k: int) -> float:
    wanted = set(evidence)
    return float(bool(wanted) and wanted <= set(ranking[:k]))


def recall_any(ranking: Sequence[str], evidence: Iterable[str], k: int) -> float:
    return float(bool(set(evidence) & set(ranking[:k])))


def mrr(ranking: Sequence[str], evidence: Iterable[str]) -> float:
    wanted = set(evidence)
    return next((1 / rank for rank, id_ in enumerate(ranking, 1) if id_ in wanted), 0.0)


def ndcg(ranking: Sequence[str], evidence: Iterable[str], k: int) -> float:
    wanted = set(evidence)
    if not wanted:
        return 0.0
    dcg = sum(1 / math.log2(rank + 1) for rank, id_ in enumerate(ranking[:k], 1)
              if id_ in wanted)
    ideal = sum(1 / math.log2(rank + 1) for rank in range(1, min(len(wanted), k) + 1))
    return dcg / ideal


def sessions_ranked(ranking: Sequence[str], session_of: Mapping[str, str]) -> list[str]:
    """Sessions in the order of their best turn (ids without a session are skipped)."""
    seen: dict[str, None] = {}
    for id_ in ranking:
        session = session_of.get(id_)
        if session is not None:
            seen.setdefault(session, None)
    return list(seen)


def rrf(rankings: Iterable[Sequence[str]], k: int = RRF_K) -> list[str]:
    """The rankings fused by reciprocal rank, best first (ties: first seen first)."""
    scores: defaultdict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, id_ in enumerate(ranking, 1):
            scores[id_] += 1 / (k + rank)
    return sorted(scores, key=lambda id_: -scores[id_])


TURN_METRICS: dict[str, Callable[[Sequence[str], Iterable[str]], float]] = {
    "recall_all_at_5": lambda r, e: recall_all(r, e, 5),
    "recall_all_at_10": lambda r, e: recall_all(r, e, 10),
    "recall_any_at_10": lambda r, e: recall_any(r, e, 10),
    "mrr": mrr,
    "ndcg_at_10": lambda r, e: ndcg(r, e, 10),
}


@dataclass(frozen=True)
class Scored:
    """One question's metrics."""

    category: str
    values: dict[str, float]


def score(ranking: Sequence[str], evidence: Sequence[str], session_of: Mapping[str, str],
          category: str) -> Scored:
    """Every turn metric, and ``session_recall_all_at_5``, of one ranking."""
    values = {name: fn(ranking, evidence) for name, fn in TURN_METRICS.items()}
    sessions = sessions_ranked(ranking, session_of)
    values["session_recall_all_at_5"] = recall_all(
        sessions, {session_of[e] for e in evidence if e in session_of}, 5)
    return Scored(category, values)


def summary(scored: Sequence[Scored], prefix: str = "") -> dict[str, float]:
    """Means over every question (``<prefix>turn_<metric>``, ``<prefix>session_…``), and per
    category (``<prefix><category>_<metric>``), rounded to 4 places."""
    out = {_name(prefix, "", metric): value for metric, value in _means(scored).items()}
    for category in sorted({s.category for s in scored}):
        means = _means([s for s in scored if s.category == category])
        out.update({_name(prefix, f"{category}_", metric): v for metric, v in means.items()})
    return out


def _name(prefix: str, category: str, metric: str) -> str:
    level = "" if metric.startswith("session_") else "turn_"
    return f"{prefix}{category}{level}{metric}"


def _means(scored: Sequence[Scored]) -> dict[str, float]:
    if not scored:
        return {}
    return {metric: round(sum(s.values[metric] for s in scored) / len(scored), 4)
            for metric in scored[0].values}
