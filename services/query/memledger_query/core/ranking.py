"""Ranking search candidates: pure, so a ranking can be explained and repeated.

The recipe is data (``Recipe``): how dense and keyword relevance are fused, how fast each kind
of memory fades, how much importance, confidence, learned utility and time named in the query
count, and when two hits are the same memory. Relevance is what a mode's threshold cuts on
(its weights calibrated the thresholds); the fused score, weighted as measured on the
retrieval benchmark, orders the results:

    dense     = max(cosine, 0);  keyword = bm25 / (bm25 + keyword_half)
    relevance = dense_weight * dense + keyword_weight * keyword
    fused     = order_dense_weight * dense + order_keyword_weight * keyword
    decay     = 0.5 ** (age_days / half_life_days[kind])       (computed now, never stored)
    final     = fused * (1 - recency_weight + recency_weight * decay)
                      * (1 + importance_weight * (importance - 0.5))
                      * (1 - confidence_weight * (1 - confidence))
                      * (1 + utility_weight * (2 * utility - 1))
                      * (1 + time_weight * nearness)
                      * (1 + anchor_weight * anchor_nearness)
                      * (1 + session_weight * session_keyword)
                      * (1 - ask_weight * asking)

``cosine`` is the candidate's own: one found by its words alone is given its cosine with the
query (``complete_dense``), not 0, when the query was embedded. One that has no embedding yet
(the enricher has not reached it) is judged and ordered by its words alone, as a search
without the query's embedding judges every candidate (``words_only``):

    relevance = fused = keyword
``nearness`` (``when``) is how near an event hit (a message, an episode, an observation) was
said or happened to the periods the query names ("in May 2023", "last week"), 0 when it names
none. ``anchor_nearness`` is the same for the window an event-relative expression resolved
to ("before she moved": up to the anchor event's time, ``anchors``), 0 without one.
``session_keyword`` is, for a message, the best ``keyword`` among the candidates of the
same search from its session (its own included), 0 for anything else: a conversation that
talks about the query's words lifts every turn of it that the search found, so a turn that
answers by meaning alone ("Adoption agencies.") rises with the session that names the topic.
``asking`` is, for a message, the share of its sentences that are questions (``asking``), 0
for anything else: a turn that only asks shares the question's words and form, but the
evidence is the turn that answers it.

Learned utility is a Beta(1, 1) estimate of "this item helps" from the item's signals as of the
search's basis (``feedback.recorded`` and ``memory.reaffirmed`` at or before its position):

    positive  = used + reaffirmed + sum((rating - 1) / 4)     (a rating 1-5 splits one vote:
    negative  = unused + sum((5 - rating) / 4)                 5 is all positive, 1 all negative)
    utility   = (1 + positive) / (2 + positive + negative)     (no signals: 0.5, factor 1)

so the utility factor lies in (1 - utility_weight, 1 + utility_weight) and moves less with
each further signal of the same kind.
"""

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from memledger_query.core import when

Mode = Literal["execution", "planning", "brainstorming"]

_DAY = 86_400.0
MESSAGE = "message"
"""The kind of a conversation message's hit (the only hits a session lifts)."""


@dataclass(frozen=True)
class ModeDefaults:
    k: int
    threshold: float


MODES: dict[str, ModeDefaults] = {
    # Thresholds on relevance, calibrated for all-MiniLM-L6-v2 (whose cosine for a good
    # paraphrase sits around 0.6-0.8, not the 0.9 a larger model gives): see docs/search.md.
    "execution": ModeDefaults(k=5, threshold=0.45),
    "planning": ModeDefaults(k=20, threshold=0.25),
    "brainstorming": ModeDefaults(k=30, threshold=0.12),
}


@dataclass(frozen=True)
class Recipe:
    dense_weight: float = 0.7
    keyword_weight: float = 0.3
    """Relevance's weights: what the modes' thresholds were calibrated with."""
    order_dense_weight: float = 0.3
    order_keyword_weight: float = 0.7
    """The fused score's weights, which order hits: measured on the retrieval benchmark
    (docs/search.md), where they rank better than either signal alone and than 0.7 / 0.3."""
    keyword_half: float = 4.0
    """The BM25 score that counts as half relevant (BM25 is unbounded; this maps it to 0..1)."""
    time_weight: float = 0.6
    """How far a hit whose valid time meets a period named in the query moves up."""
    anchor_weight: float = 0.6
    """How far an event hit in the window of an event-relative expression that orders
    ("before she moved", "after the wedding", "since", "until") moves up; 0: those are not
    resolved (no anchor search)."""
    anchor_around_weight: float = 0.0
    """The same for one of simultaneity ("when she moved", "while camping", "during the
    workshop"): 0 by default, since on the retrieval benchmark these name a span (a habit, a
    journey) more often than the day of one event, and lifting that day lost (docs/search.md)."""
    anchor_bar: float = 0.3
    """The keyword relevance (BM25 mapped to 0..1 by ``keyword_half``) the anchor event's
    best hit must reach for the expression to resolve."""
    recency_weight: float = 0.2
    importance_weight: float = 0.2
    confidence_weight: float = 0.3
    utility_weight: float = 0.3
    """How far learned utility moves a score (0: feedback does not count)."""
    session_weight: float = 0.5
    """How far a message moves up with the best keyword match of its session among the
    candidates (``session_keyword``); 0: a message ranks on its own words alone."""
    ask_weight: float = 0.3
    """How far a message moves down with the share of its sentences that are questions
    (``asking``), 0..1: measured on the retrieval benchmark, where 0.2-0.5 rank the evidence
    turns higher alike (docs/search.md); 0: a question ranks as its words do."""
    words_only: bool = True
    """Whether a candidate not yet embedded is judged and ordered by its words alone
    (relevance = fused = keyword); False: it counts cosine 0, under the threshold unless its
    words alone clear it by 0.3 of their weight, so a fresh write was not found by the words
    it names until the enricher embedded it."""
    duplicate_cosine: float = 0.95
    half_life_days: dict[str, float] = field(default_factory=lambda: {
        "decision": 365.0, "correction": 365.0, "steering_rule": 730.0, "procedure": 365.0,
        "preference": 180.0, "fact": 180.0, "observation": 30.0, "episode": 14.0,
        # What was said stays worth finding: a conversation's early sessions are asked about
        # as much as its last.
        "message": 365.0})
    default_half_life_days: float = 30.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.ask_weight <= 1.0:  # above 1 a question's score turns negative
            raise ValueError(f"ask_weight must be between 0 and 1, got {self.ask_weight}")
        if min(self.anchor_weight, self.anchor_around_weight) < 0:
            raise ValueError("anchor weights must be at least 0, got "
                             f"{self.anchor_weight} and {self.anchor_around_weight}")

    def anchor_weight_of(self, relation: str | None) -> float:
        """The weight of an event-relative window of ``relation`` (before, after, around)."""
        return self.anchor_around_weight if relation == "around" else self.anchor_weight


@dataclass(frozen=True)
class Signals:
    """An item's feedback as of a basis: how many of each signal, and its ratings' sum."""

    used: int = 0
    unused: int = 0
    reaffirmed: int = 0
    rated: int = 0
    rating_sum: int = 0

    @property
    def positive(self) -> float:
        return self.used + self.reaffirmed + (self.rating_sum - self.rated) / 4

    @property
    def negative(self) -> float:
        return self.unused + (5 * self.rated - self.rating_sum) / 4


NO_SIGNALS = Signals()


def utility(signals: Signals) -> float:
    """The learned utility in (0, 1): 0.5 without signals (see the module docstring)."""
    return (1 + signals.positive) / (2 + signals.positive + signals.negative)


def policy_version(recipe: Recipe, model: str) -> str:
    """A short digest of everything that decides a ranking besides the data: the recipe, the
    modes' defaults and the embedding model. Equal versions rank the same data the same."""
    policy = {"recipe": asdict(recipe), "modes": {m: asdict(d) for m, d in MODES.items()},
              "model": model}
    digest = hashlib.sha256(json.dumps(policy, sort_keys=True).encode()).hexdigest()
    return f"rank-{digest[:12]}"


@dataclass(frozen=True)
class Candidate:
    """One item version found by dense search, keyword search or both."""

    item_id: str
    payload: dict[str, Any]
    dense: float | None = None
    keyword: float | None = None
    layer: str = "space"
    point_id: str | None = None
    """The index point found (the item's version at the search's (valid, system) point)."""
    embedded: bool | None = True
    """Whether the candidate has a dense vector: False once a lookup found none (not yet
    embedded), None while unknown (``dense`` then bounds its cosine from above, and it ranks
    as the better of both cases, so knowing can only move it down)."""


class Factors(NamedTuple):
    """What a score is made of (``Ranked.explain`` shows them)."""

    dense: float
    raw_keyword: float
    keyword: float
    age_days: float
    half_life_days: float
    decay: float
    recency: float
    importance: float
    confidence: float
    signals: Signals
    utility: float
    useful: float
    fused: float = 0.0
    nearness: float = 0.0
    timely: float = 1.0
    rerank: float | None = None
    """The reranker's score, which took the fused score's place (``rerank``); None: not
    reranked."""
    session_keyword: float = 0.0
    session: float = 1.0
    """The factor ``session_keyword`` makes."""
    words_only: bool = True
    """Judged and ordered by its words alone: not yet embedded (``Recipe.words_only``)."""
    asking: float = 0.0
    """The share of a message's sentences that are questions (``asking``)."""
    asks: float = 1.0
    """The factor ``asking`` makes."""
    anchor_nearness: float = 0.0
    """How near the window an event-relative expression resolved to (``anchors``)."""
    anchored: float = 1.0
    """The factor ``anchor_nearness`` makes."""


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    relevance: float
    score: float
    factors: Factors | None = None

    @property
    def explain(self) -> dict[str, float]:
        """Each component of the score, rounded. Built when asked, not with the score: a
        search ranks 40-80 candidates and explains at most the few it shows, and building
        the dictionary costs more than the score."""
        f = self.factors
        if f is None:
            return {}
        return {
            "dense": round(f.dense, 6), "keyword_bm25": round(f.raw_keyword, 6),
            "keyword": round(f.keyword, 6), "relevance": round(self.relevance, 6),
            "fused": round(f.fused, 6), "time_nearness": round(f.nearness, 6),
            "time_factor": round(f.timely, 6),
            "anchor_nearness": round(f.anchor_nearness, 6),
            "anchor_factor": round(f.anchored, 6),
            "session_keyword": round(f.session_keyword, 6), "session_factor": round(f.session, 6),
            "asking": round(f.asking, 6), "ask_factor": round(f.asks, 6),
            "words_only": int(f.words_only),
            "age_days": round(f.age_days, 3), "half_life_days": f.half_life_days,
            "decay": round(f.decay, 6), "recency_factor": round(f.recency, 6),
            "importance_factor": round(f.importance, 6),
            "confidence_factor": round(f.confidence, 6), **_explain_signals(f.signals),
            "utility": round(f.utility, 6), "utility_factor": round(f.useful, 6),
            **({} if f.rerank is None else {"rerank": round(f.rerank, 6)}),
            "score": round(self.score, 6)}


def rank(candidates: Sequence[Candidate], recipe: Recipe, now: float,
         signals: Mapping[str, Signals] | None = None,
         periods: tuple[when.Period, ...] = ()) -> list[Ranked]:
    """Every candidate scored, best first (ties broken by item id, so a ranking repeats);
    ``signals``: the feedback of candidates by item id (none: no feedback); ``periods``: the
    periods the query names (``when.resolve``). A message's score counts the best keyword
    match of its session among ``candidates`` (``session_keywords``)."""
    known = signals or {}
    sessions = session_keywords(candidates, recipe)
    return sorted((score(c, recipe, now, known.get(c.item_id, NO_SIGNALS), periods,
                         _in(sessions, c)) for c in candidates),
                  key=lambda r: (-r.score, r.candidate.item_id))


def rescore(ranked: Sequence[Ranked], changed: Mapping[str, Candidate], recipe: Recipe,
            now: float, signals: Mapping[str, Signals] | None = None,
            periods: tuple[when.Period, ...] = ()) -> list[Ranked]:
    """``ranked`` (``rank``'s answer) with the candidates ``changed`` (by item id) scored
    again, best first, each with its session's keyword match as before (it depends on the
    candidates' keywords alone): only what changed is scored again."""
    known = signals or {}
    again = [r if r.candidate.item_id not in changed else score(
                 changed[r.candidate.item_id], recipe, now,
                 known.get(r.candidate.item_id, NO_SIGNALS), periods,
                 r.factors.session_keyword if r.factors is not None else 0.0)
             for r in ranked]
    return sorted(again, key=lambda r: (-r.score, r.candidate.item_id))


def score(c: Candidate, recipe: Recipe, now: float, signals: Signals = NO_SIGNALS,
          periods: tuple[when.Period, ...] = (), session_keyword: float = 0.0) -> Ranked:
    """``c`` scored; ``session_keyword``: the best keyword match of its session, if a
    message (``session_keywords``)."""
    dense = max(c.dense or 0.0, 0.0)
    raw_keyword = c.keyword or 0.0
    keyword = _keyword(raw_keyword, recipe)
    relevance = recipe.dense_weight * dense + recipe.keyword_weight * keyword
    fused = recipe.order_dense_weight * dense + recipe.order_keyword_weight * keyword
    words_only = recipe.words_only and c.embedded is False and recipe.keyword_weight > 0
    if words_only:
        relevance = fused = keyword
    elif recipe.words_only and c.embedded is None and recipe.keyword_weight > 0:
        # unknown: the better of both cases, so it bounds what it will be once known
        relevance, fused = max(relevance, keyword), max(fused, keyword)
    p = c.payload
    half_life = recipe.half_life_days.get(str(p.get("kind")), recipe.default_half_life_days)
    age_days = max(0.0, now - float(p.get("content_at") or now)) / _DAY
    decay = math.pow(0.5, age_days / half_life)
    recency = 1 - recipe.recency_weight + recipe.recency_weight * decay
    importance = 1 + recipe.importance_weight * (float(p.get("importance", 0.5)) - 0.5)
    confidence = 1 - recipe.confidence_weight * (1 - float(p.get("confidence", 1.0)))
    learned = utility(signals)
    useful = 1 + recipe.utility_weight * (2 * learned - 1)
    kind, valid_from = str(p.get("kind")), float(p.get("valid_from") or 0.0)
    near = when.nearness(periods, kind, valid_from)
    timely = 1 + recipe.time_weight * near
    anchor_near = when.nearness(periods, kind, valid_from, anchored=True)
    anchored = 1 + recipe.anchor_weight_of(_relation(periods)) * anchor_near if anchor_near \
        else 1.0
    session = 1 + recipe.session_weight * session_keyword
    share = asking(str(p.get("content") or "")) \
        if recipe.ask_weight > 0 and p.get("kind") == MESSAGE else 0.0
    asks = 1 - recipe.ask_weight * share
    final = (fused * recency * importance * confidence * useful * timely * anchored * session
             * asks)
    return Ranked(c, relevance, final, Factors(
        dense, raw_keyword, keyword, age_days, half_life, decay, recency, importance,
        confidence, signals, learned, useful, fused, near, timely,
        session_keyword=session_keyword, session=session, words_only=words_only,
        asking=share, asks=asks, anchor_nearness=anchor_near, anchored=anchored))


_CLOSING = "\"')]}\u201d\u2019\u00bb"
_SENTENCE_END = re.compile(rf"[.!?\u2026]+[{re.escape(_CLOSING)}]*(?=\s|$)")
"""A sentence's end: end punctuation, perhaps closing a quote or bracket, then space or the
end of the text."""


def asking(text: str) -> float:
    """The share of ``text``'s sentences that are questions (0..1): a sentence ends at end
    punctuation followed by white space, and asks when that punctuation (closing quotes and
    brackets aside) holds a question mark; text after the last end is a sentence that does not
    ask. By punctuation alone, so in any language that marks a question with "?"; 0 at once
    for text without one (most turns)."""
    if "?" not in text:
        return 0.0
    body = text.rstrip()
    ends = _SENTENCE_END.findall(body)
    unended = not ends or not body.endswith(ends[-1])
    return sum("?" in end for end in ends) / (len(ends) + unended)


def session_keywords(candidates: Sequence[Candidate], recipe: Recipe) -> dict[str, float]:
    """The best ``keyword`` of each session among the messages of ``candidates`` (none when
    ``session_weight`` is 0)."""
    best: dict[str, float] = {}
    if recipe.session_weight <= 0:
        return best
    for c in candidates:
        session = _session_of(c)
        if session is not None and c.keyword:
            best[session] = max(best.get(session, 0.0), _keyword(c.keyword, recipe))
    return best


def complete_dense(candidates: Sequence[Candidate], cosines: Mapping[str, float]
                   ) -> list[Candidate]:
    """``candidates`` with the cosine to the query (``cosines``, by item id) of those found by
    their words alone (``dense`` None); one without a cosine is marked not yet embedded
    (``embedded`` False). Dense search returns only its best few, so a candidate that names
    the query's words but was not among them would otherwise rank as if unrelated in meaning
    (cosine 0), below every hit dense search did return."""
    return [c if c.dense is not None else
            replace(c, dense=cosines[c.item_id], embedded=True) if c.item_id in cosines else
            replace(c, embedded=False) for c in candidates]


def _relation(periods: tuple[when.Period, ...]) -> str | None:
    """The relation of the event-relative window among ``periods`` (a query has one)."""
    return next((p.relation for p in periods if p.anchor_id is not None), None)


def _keyword(raw: float, recipe: Recipe) -> float:
    """BM25 mapped to 0..1: ``keyword_half`` counts as half relevant."""
    return raw / (raw + recipe.keyword_half) if raw > 0 else 0.0


def _in(sessions: Mapping[str, float], c: Candidate) -> float:
    session = _session_of(c)
    return 0.0 if session is None else sessions.get(session, 0.0)


def _session_of(c: Candidate) -> str | None:
    session = c.payload.get("session")
    return str(session) if c.payload.get("kind") == MESSAGE and session is not None else None


def _explain_signals(signals: Signals) -> dict[str, float]:
    return {"signals_used": signals.used, "signals_unused": signals.unused,
            "signals_reaffirmed": signals.reaffirmed, "signals_rated": signals.rated,
            "rating_mean": round(signals.rating_sum / signals.rated, 6) if signals.rated else 0}


VectorLookup = Callable[[Sequence[Candidate]], Mapping[str, "npt.NDArray[np.float32]"]]
"""The dense vectors of those of the candidates that have one, by item id (from the index)."""

SPARE_VECTORS = 2
"""Vectors looked up beyond the hits still wanted: one lookup then also covers a hit or two
that turn out to be near-duplicates."""


def collapse(ranked: Sequence[Ranked], recipe: Recipe, limit: int | None = None, *,
             vectors: VectorLookup) -> tuple[list[Ranked], dict[str, str]]:
    """Keep hits in rank order, dropping near-duplicates (cosine above ``duplicate_cosine``)
    of a hit kept before; stop once ``limit`` are kept. Return the kept hits and, for each
    dropped item, the kept one it collapsed into.

    Hits after the ``limit``-th kept one are not looked at: they are not shown, so neither is
    what they duplicate, and their vectors are never fetched. The vectors are looked up as
    the walk reaches hits without one, a few more each time than the hits still wanted
    (usually once a layer): fetching and converting the vectors of all 40-80 candidates
    would cost every search for the few it compares (ADR 0006)."""
    wanted = len(ranked) if limit is None else min(limit, len(ranked))
    kept: list[Ranked] = []
    owners: list[Ranked] = []
    into: dict[str, str] = {}
    known: dict[str, npt.NDArray[np.float32]] = {}
    asked = 0  # the hits ranked[:asked] have been looked up
    matrix: npt.NDArray[np.float32] | None = None  # the owners' unit vectors, row by row
    for at, hit in enumerate(ranked):
        if len(kept) == wanted:
            break
        if at >= asked:
            asked = at + wanted - len(kept) + SPARE_VECTORS
            known.update(vectors([r.candidate for r in ranked[at:asked]]))
        unit = _unit(known.get(hit.candidate.item_id))
        if unit is not None and matrix is not None and owners:
            similar = matrix[:len(owners)] @ unit
            best = int(np.argmax(similar))
            if float(similar[best]) > recipe.duplicate_cosine:
                into[hit.candidate.item_id] = owners[best].candidate.item_id
                continue
        kept.append(hit)
        if unit is not None:
            if matrix is None:
                matrix = np.empty((wanted, unit.size), np.float32)
            matrix[len(owners)] = unit
            owners.append(hit)
    return kept, into


def _unit(vector: "npt.NDArray[np.float32] | None") -> "npt.NDArray[np.float32] | None":
    """``vector`` scaled to unit length; ``None`` if missing or zero (such a hit takes no part
    in collapsing)."""
    if vector is None:
        return None
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else None
