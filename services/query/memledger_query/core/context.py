"""Packing an agent's context: pure. Sections in priority order (the current session's turns,
the memories relevant to the query, the relevant earlier turns of other sessions, standing
preferences, steering rules and what is believed about the people involved, recent history,
the space's themes),
each given its share of the token budget; what a section leaves unused passes to the next.
The bundle never exceeds the budget: every entry and header is counted before it is taken, and
the rendered text is exactly the taken parts joined, so it costs no more than their sum.

Tokens are estimated as ceil(characters / 4), the usual rule of thumb for English text with
GPT-style tokenizers; the estimate is a property of the bundle (``tokenizer``), not a promise
about any one model's tokenizer.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

TOKENIZER = "chars/4"

ORDER = ("session", "memories", "conversations", "preferences", "history", "themes")
TITLES = {"session": "## Current session", "memories": "## Relevant memories",
          "conversations": "## Earlier conversations",
          "preferences": "## Preferences and rules", "history": "## Recent history",
          "themes": "## Themes"}
DEFAULT_SHARES = {"session": 1_000, "memories": 500, "conversations": 500, "preferences": 300,
                  "history": 1_500, "themes": 0}
"""Themes come last, with no share of their own: they fill what the others leave."""


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class Entry:
    """One line of the bundle (``ref``: the id of what it came from; ``flag``: what kind of
    entry it is, when the text alone would not say, e.g. a steering-rule candidate)."""

    text: str
    ref: str
    score: float | None = None
    flag: str | None = None

    @property
    def line(self) -> str:
        return self.text.replace("\n", " ") + "\n"

    @property
    def tokens(self) -> int:
        return tokens(self.line)


@dataclass(frozen=True)
class Section:
    name: str
    allowance: int
    entries: tuple[Entry, ...] = field(default=())

    @property
    def header(self) -> str:
        return TITLES[self.name] + "\n"

    @property
    def used(self) -> int:
        return (tokens(self.header) if self.entries else 0) + sum(e.tokens for e in self.entries)

    def render(self) -> str:
        return self.header + "".join(e.line for e in self.entries) if self.entries else ""


def pack(candidates: dict[str, Sequence[Entry]], budget: int,
         shares: dict[str, int] | None = None, *, chronological: tuple[str, ...] = ("session",)
         ) -> list[Section]:
    """Sections filled from ``candidates`` (each best first); ``chronological`` sections are
    then put back in time order (their candidates come newest first)."""
    shares = shares or DEFAULT_SHARES
    total = sum(shares.get(name, 0) for name in ORDER) or 1
    sections, remaining, carry = [], budget, 0
    for name in ORDER:
        allowance = min(remaining, budget * shares.get(name, 0) // total + carry)
        taken = _fill(candidates.get(name, ()), allowance, tokens(TITLES[name] + "\n"))
        if name in chronological:
            taken.reverse()
        section = Section(name, allowance, tuple(taken))
        sections.append(section)
        carry = allowance - section.used
        remaining -= section.used
    return sections


def _fill(candidates: Sequence[Entry], allowance: int, header: int) -> list[Entry]:
    taken: list[Entry] = []
    used = 0
    for entry in candidates:
        cost = entry.tokens + (0 if taken else header)
        if used + cost <= allowance:
            taken.append(entry)
            used += cost
    return taken


def render(sections: Sequence[Section]) -> str:
    return "".join(section.render() for section in sections)
