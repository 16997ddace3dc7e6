"""Time in a search's words: "in May 2023", "on 7 July, 2023", "last week", "two years ago",
resolved against the search's valid time into periods of valid time, which ranking favours
(``ranking``: a boost, never a filter, since an event is often told after it happened).

``dateparser`` finds and reads the expressions (its own grammar and vocabulary, no network);
this module only keeps the ones that name a time of their own, and turns each into the whole
period it names: a day, the week (Monday to Monday), the month or the year. Event-relative
expressions ("before she moved") need the event's own time: ``anchors`` finds it, and its
window is a period too, with the anchor it was resolved by.

Pure apart from the parser: the same words at the same valid time give the same periods, so
a search passed its basis back ranks the same.
"""

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

DAY = 86_400.0
MIN_SCALE = 7 * DAY
"""How far outside a period a time still counts for something (at least a week, else the
period's own length): told a few days later, or planned a few days before, it is still near."""

# dateparser reads every word as a possible date ("we" is a Wednesday, "may" a month): it is
# asked only about queries with a digit or one of these words, and a bare word it finds counts
# only when written as a name (capitalised) or as one of the day words.
_HINT = re.compile(
    r"\d|\b(?:ago|last|yesterday|today|tonight|week|weekend|fortnight|month|year|"
    r"january|february|march|april|may|june|july|august|september|october|november|"
    r"december|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", re.IGNORECASE)
_DAY_WORDS = frozenset({"today", "yesterday", "tonight"})
_LEADING = re.compile(r"^(?:(?:in|on|at|during|of|the|since|by|until)\s+)+", re.IGNORECASE)
_SETTINGS: dict[str, Any] = {"PREFER_DATES_FROM": "past", "RETURN_TIME_AS_PERIOD": True}


@dataclass(frozen=True)
class Period:
    """A period named in a query: ``[start, end)`` in epoch seconds (``-inf`` / ``inf``: open
    on that side). One resolved from an event ("before she moved", ``anchors``) names the
    anchor it was resolved by (its item id and text) and its relation to it."""

    text: str
    start: float
    end: float
    anchor_id: str | None = None
    anchor_text: str | None = None
    relation: str | None = None


def resolve(query: str, at: datetime) -> tuple[Period, ...]:
    """The periods ``query`` names, relative to ``at`` (the search's valid time), in the
    order they appear."""
    if not _HINT.search(query):
        return ()
    return _resolve(query, at.astimezone(UTC).replace(tzinfo=None))


def is_time_word(word: str) -> bool:
    """Whether ``word`` is a digit or a word the date parser is asked about ("May", "last")."""
    return bool(_HINT.fullmatch(word) or word[:1].isdigit())


@lru_cache(maxsize=1_024)
def _resolve(query: str, at: datetime) -> tuple[Period, ...]:
    found = []
    for text in _spans(query, at):
        named = _period_of(text, at)
        if named is not None:
            found.append(named)
    return tuple(found)


def _spans(query: str, at: datetime) -> list[str]:
    """The expressions dateparser finds, neighbours joined ("April" "10, 2023")."""
    from dateparser.search import search_dates

    spans: list[tuple[int, int]] = []
    cursor = 0
    for text, _ in search_dates(query, languages=["en"],
                                settings={**_SETTINGS, "RELATIVE_BASE": at}) or []:
        start = query.find(text, cursor)
        if start < 0:
            continue
        end = start + len(text)
        if spans and re.fullmatch(r"[\s,]*", query[spans[-1][1]:start]):
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
        cursor = end
    return [query[a:b] for a, b in spans]


def _period_of(text: str, at: datetime) -> Period | None:
    core = _LEADING.sub("", text.strip()).strip(" ,")
    if not _names_a_time(core):
        return None
    parsed = _parser(at).get_date_data(core)
    if parsed.date_obj is None:
        return None
    bounds = period(parsed.date_obj, str(parsed.period))
    if bounds is None:
        return None
    return Period(text.strip(), _epoch(bounds[0]), _epoch(bounds[1]))


def _names_a_time(core: str) -> bool:
    words = core.split()
    if len(words) != 1:
        return bool(re.search(r"[A-Za-z]", core))  # "2 + 2" names no time
    word = words[0]
    return (bool(re.fullmatch(r"\d{4}", word)) or word.lower() in _DAY_WORDS
            or (word[:1].isupper() and word.isalpha() and len(word) >= 3))


def period(instant: datetime, name: str) -> tuple[datetime, datetime] | None:
    """The whole ``name`` period ("day", "week", "month", "year") holding ``instant``."""
    day = instant.replace(hour=0, minute=0, second=0, microsecond=0)
    if name == "day":
        return day, day + timedelta(days=1)
    if name == "week":
        monday = day - timedelta(days=day.weekday())
        return monday, monday + timedelta(days=7)
    if name == "month":
        first = day.replace(day=1)
        return first, (first + timedelta(days=32)).replace(day=1)
    if name == "year":
        first = day.replace(month=1, day=1)
        return first, first.replace(year=first.year + 1)
    return None  # "time" ("now"): no period of its own


@lru_cache(maxsize=64)
def _parser(at: datetime) -> Any:
    from dateparser.date import DateDataParser

    return DateDataParser(languages=["en"], settings={**_SETTINGS, "RELATIVE_BASE": at})


def _epoch(naive_utc: datetime) -> float:
    return naive_utc.replace(tzinfo=UTC).timestamp()


EVENT_KINDS = frozenset({"message", "episode", "observation"})
"""Kinds that happened at their valid_from (an event), rather than hold over their interval
(a state: a fact, a preference, a decision...). Only events are lifted: what held at a time is
asked for with the search's valid time, and lifting every state that overlaps a year named in
passing ("who won the 2018 world cup?") ranked long-held statements above the right one."""


def nearness(periods: tuple[Period, ...], kind: str, valid_from: float, *,
             anchored: bool = False) -> float:
    """How near an event of ``kind`` at ``valid_from`` is to the periods named by a date
    (``anchored``: to those resolved from an event), in [0, 1]: 1 inside one, then
    ``exp(-distance / max(period length, a week))`` (a week for an open one); 0 without
    periods, and for a state."""
    if not periods or kind not in EVENT_KINDS:
        return 0.0
    return max((_near(p, valid_from) for p in periods if (p.anchor_id is not None) == anchored),
               default=0.0)


def _near(span: Period, at: float) -> float:
    if span.start <= at < span.end:
        return 1.0
    distance = span.start - at if at < span.start else at - span.end
    length = span.end - span.start
    return math.exp(-distance / (max(length, MIN_SCALE) if math.isfinite(length)
                                 else MIN_SCALE))


def warm() -> None:
    """Load the parser's language data now (about a second) rather than in a first search."""
    resolve("in May 2023", datetime(2023, 6, 1, tzinfo=UTC))
