"""Time relative to an event in a search's words: "before she moved", "after the wedding",
"since I started the new job", "while camping". The event's own time is not in the words: it
is found by searching the same scope, as of the same basis, for the event (its best hit above
a relevance bar is the anchor), and the expression becomes a window of valid time on the
anchor's side, which ranking favours as it does a named period (``when``): a boost, never a
filter. The ordering relations (before, until, after, since) lift by ``Recipe.anchor_weight``,
those of the same time (when, while, during) by ``Recipe.anchor_around_weight``: 0 by
default, since they often name a span ("during her journey") rather than one event's day.

Recognised by grammar alone: a temporal subordinator or preposition followed by a clause (a
subject and a verb) or a noun phrase (a determiner or possessive and a noun, a gerund, a
name). Not recognised: the word alone or before a pronoun that points back ("have we met
before?", "after that"), "after all", the question word ("when did she move?"), "a while",
phrasal verbs ("look after the kids"), and "since" as "because" (a clause in the present
tense: "since you like hiking"). An expression whose words name a period ("before May 2023")
is the date parser's (``when``).
"""

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from memledger_platform.vectorindex import sparse
from memledger_platform.vectorindex.port import Hit, Scope, VectorIndex
from memledger_query.core import when
from memledger_query.core.ranking import Recipe

Relation = Literal["before", "after", "around"]
RELATIONS: tuple[Relation, ...] = ("before", "after", "around")

_RELATIONS: dict[str, Relation] = {
    "before": "before", "until": "before", "till": "before", "after": "after",
    "since": "after", "when": "around", "while": "around", "during": "around"}
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\u2019-]*|[^\w\s]")
_BOUNDARY = frozenset(".,;:?!\"()[]")
_STOP = frozenset({"what", "which", "who", "whom", "whose", "where", "why", "how", "and",
                   "but", "or", "so", "because", "if", *_RELATIONS})
"""Words that end the anchor's phrase: another clause or expression begins."""
_SUBJECTS = frozenset({"i", "you", "he", "she", "we", "they", "it"})
_DETERMINERS = frozenset({"the", "a", "an", "my", "your", "his", "her", "our", "their", "its",
                          "this", "that", "these", "those", "some", "one"})
_POINTING_BACK = frozenset({"that", "this", "then", "now", "it", "them", "him", "her", "us",
                            "me", "you", "there", "these", "those", "which", "what", "all",
                            "long", "ever", "yet"})
"""A phrase of one of these alone names no event of its own ("after that", "before then")."""
_AUXILIARIES = frozenset({"did", "do", "does", "is", "was", "were", "are", "will", "would",
                          "has", "have", "had", "can", "could", "should", "shall", "may",
                          "might", "must", "am"})
_PHRASAL_AFTER = frozenset({"look", "looks", "looked", "looking", "take", "takes", "took",
                            "taking", "taken", "named", "name", "ask", "asks", "asked", "chase",
                            "chased", "lust", "lusted", "hanker", "hankered"})
_WHILE_AS_NOUN = frozenset({"a", "the", "worth", "awhile"})
_IRREGULAR_PAST = frozenset({
    "was", "were", "had", "did", "went", "got", "came", "began", "became", "left", "met",
    "made", "took", "gave", "found", "bought", "brought", "thought", "told", "said", "saw",
    "knew", "lost", "won", "ran", "sold", "sent", "spent", "built", "felt", "fell", "broke",
    "chose", "drove", "flew", "grew", "heard", "held", "kept", "led", "paid", "quit", "read",
    "rode", "sat", "set", "shot", "slept", "spoke", "stood", "swam", "taught", "threw",
    "understood", "woke", "wore", "wrote", "ate", "drew", "forgot", "hid", "hurt", "let",
    "put", "shut", "split", "stuck", "struck", "swore", "tore", "moved"})
"""Past forms of English verbs that do not end in "-ed" (a temporal "since" takes a past
clause; "since" with a present one means "because")."""


@dataclass(frozen=True)
class Relative:
    """An event-relative expression: ``text`` as written ("before she moved"), its
    ``relation`` to the event, the ``anchor`` phrase naming the event ("she moved"), and
    ``search``: the words the event is searched by (the anchor, with the names the question
    gives a pronoun that is the anchor's subject)."""

    text: str
    relation: Relation
    anchor: str
    search: str


def find(query: str, named: Sequence[str] = (),
         relations: Collection[Relation] = RELATIONS) -> Relative | None:
    """The first event-relative expression of ``query`` of one of ``relations`` (None: none),
    leaving out one whose words hold a period the date parser named (``named``: their
    texts)."""
    spans = list(_TOKEN.finditer(query))
    tokens = [m.group() for m in spans]
    for at, token in enumerate(tokens):
        relation = _RELATIONS.get(token.lower())
        if relation is None or relation not in relations or not _subordinates(tokens, at):
            continue
        phrase = _phrase(tokens, at + 1)
        if not phrase or not _names_an_event(token.lower(), phrase):
            continue
        anchor = query[spans[at + 1].start():spans[at + len(phrase)].end()]
        text = query[spans[at].start():spans[at + len(phrase)].end()]
        if any(p.lower() in text.lower() or text.lower() in p.lower() for p in named):
            continue
        return Relative(text, relation, anchor, _searched(anchor, phrase, tokens, at))
    return None


def _subordinates(tokens: Sequence[str], at: int) -> bool:
    """Whether the word at ``at`` may begin an event-relative expression where it stands."""
    word = tokens[at].lower()
    before = tokens[at - 1].lower() if at > 0 else ""
    after = tokens[at + 1].lower() if at + 1 < len(tokens) else ""
    if word == "when" and (at == 0 or before in _BOUNDARY) and not _clause_then_comma(tokens,
                                                                                     at):
        return False  # the question word: "When did she move?", "When Sam lost his job?"
    if word in ("when", "since") and (after in _AUXILIARIES or after == "when"):
        return False  # "what did she say when did...", "since when"
    if word == "while" and before in _WHILE_AS_NOUN:
        return False
    return not (word == "after" and before in _PHRASAL_AFTER)


def _clause_then_comma(tokens: Sequence[str], at: int) -> bool:
    """Whether the clause after ``at`` ends in a comma and more follows ("When she moved,
    what ..."): a leading subordinate clause, not a question."""
    rest = tokens[at + 1:]
    return "," in rest and rest.index(",") + 1 < len(rest) and \
        (rest[0].lower() not in _AUXILIARIES)


def _phrase(tokens: Sequence[str], start: int) -> list[str]:
    """The words after ``start`` up to a boundary (punctuation, a question word, a
    conjunction, another subordinator), at most eight."""
    words: list[str] = []
    for token in tokens[start:start + 8]:
        if token in _BOUNDARY or (words and token.lower() in _STOP):
            break
        words.append(token)
    return words


def _names_an_event(word: str, phrase: Sequence[str]) -> bool:
    """Whether ``phrase`` after the subordinator ``word`` is a clause or a noun phrase naming
    an event of its own."""
    first = phrase[0].lower()
    if when.is_time_word(first):
        return False  # "before May 2023", "after last week": the date parser's
    if len(phrase) == 1 and (first in _POINTING_BACK or first in _SUBJECTS):
        return False  # "before?", "after that", "since then"
    if word == "after" and first == "all":
        return False
    if first in _SUBJECTS or (phrase[0][:1].isupper() and len(phrase) > 1
                              and _is_verb(phrase[1])):
        return _clause(word, phrase)
    if first in _DETERMINERS:
        return len(phrase) > 1 and phrase[1].lower() not in _POINTING_BACK
    return (first.endswith("ing") and len(first) > 4) or (
        phrase[0][:1].isupper() and phrase[0].isalpha() and word != "when")


def _clause(word: str, phrase: Sequence[str]) -> bool:
    """A subject and a verb: for "since" in the past (present: "because")."""
    if len(phrase) < 2:
        return False
    if word != "since":
        return True
    return any(_is_past(w) for w in phrase[1:3])


def _is_verb(token: str) -> bool:
    lower = token.lower()
    return _is_past(lower) or lower in _AUXILIARIES or lower.endswith(("s", "ing"))


def _is_past(token: str) -> bool:
    lower = token.lower()
    return (lower.endswith("ed") and len(lower) > 3) or lower in _IRREGULAR_PAST


_THIRD_PERSON = frozenset({"he", "she", "they", "his", "her", "their", "him", "them"})


def _searched(anchor: str, phrase: Sequence[str], tokens: Sequence[str], at: int) -> str:
    """The anchor's words, with the question's names when a third-person pronoun in the
    anchor points back to them ("what did Ana paint before she moved" searches "Ana she
    moved"): who did it is part of the event."""
    if not any(w.lower() in _THIRD_PERSON for w in phrase):
        return anchor
    names = [t for i, t in enumerate(tokens[:at]) if i > 0 and _is_name(t)]
    return " ".join([*dict.fromkeys(names), anchor])


def _is_name(token: str) -> bool:
    return token[:1].isupper() and token.isalpha() and token.lower() not in _SUBJECTS \
        and token.lower() not in _STOP


def window(relative: Relative, at: float, anchor_id: str, anchor_text: str) -> when.Period:
    """The window of valid time on the anchor's side: up to the anchor (before), from it
    (after), or the day either side of it (around)."""
    if relative.relation == "before":
        start, end = -math.inf, at
    elif relative.relation == "after":
        start, end = at, math.inf
    else:
        start, end = at - when.DAY, at + when.DAY
    return when.Period(relative.text, start, end, anchor_id=anchor_id, anchor_text=anchor_text,
                       relation=relative.relation)


ANCHOR_CANDIDATES = 10
"""Keyword hits of the anchor search looked at per scope (the best event among them counts)."""


@dataclass(frozen=True)
class Resolved:
    """An event-relative expression and what it resolved to: its window (``period``; None:
    no event's hit reached the bar) and the best keyword relevance the anchor search found."""

    relative: Relative
    period: when.Period | None
    best: float


def resolve(index: VectorIndex, scopes: Sequence[Scope], relative: Relative,
            recipe: Recipe) -> Resolved:
    """``relative`` resolved by one keyword search of each scope (as of the scope's basis, so
    a replay finds the same anchor): the best event hit (a message, an episode, an
    observation) by keyword relevance, ties by item id, is the anchor if it reaches
    ``recipe.anchor_bar``; its valid time (a message's ``said_at``) is the event's."""
    words = sparse.encode_query(relative.search)
    found: list[tuple[float, str, Hit]] = []
    for scope in scopes if words.indices else ():
        found.extend((_relevance(hit.score, recipe), str(hit.payload["item_id"]), hit)
                     for hit in index.search_sparse(words, scope, ANCHOR_CANDIDATES)
                     if hit.payload.get("kind") in when.EVENT_KINDS)
    if not found:
        return Resolved(relative, None, 0.0)
    relevance, item, hit = min(found, key=lambda f: (-f[0], f[1]))
    if relevance < recipe.anchor_bar:
        return Resolved(relative, None, relevance)
    at = float(hit.payload.get("valid_from") or 0.0)
    return Resolved(relative, window(relative, at, item, str(hit.payload.get("content", ""))),
                    relevance)


def _relevance(bm25: float, recipe: Recipe) -> float:
    """BM25 mapped to 0..1 as ranking maps it (``keyword_half`` counts as half relevant)."""
    return bm25 / (bm25 + recipe.keyword_half) if bm25 > 0 else 0.0
