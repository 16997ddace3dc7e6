"""Rule-based extraction from what a user says: preferences, habits, profile facts,
restrictions, reminders, availability. Pure and deterministic, so the events it yields
(``preference.extracted``) come out the same on every replay.

Each rule is data: a stable id, the category it fills, a confidence, and a pattern whose named
group ``value`` is what was learned.
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    rule_id: str
    category: str
    confidence: float
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Extraction:
    rule_id: str
    category: str
    value: str
    confidence: float


def _rule(rule_id: str, category: str, confidence: float, pattern: str) -> Rule:
    # At the start of a sentence or clause; the value runs to the end of the clause (a value
    # with a comma in it, "Acme, Inc.", is cut there: rules are cheap, not clever). "and I"
    # and "but I" also start a clause: "My name is Ada and I work at Acme" yields both.
    return Rule(rule_id, category, confidence, re.compile(
        r"(?:^|(?<=[.!?;,]\s)|(?<=\band\s)|(?<=\bbut\s))" + pattern
        + r"\s+(?P<value>[^.!?;,\n]+?)\s*(?=[.!?;,\n]|\s+(?:and|but)\s+i\b|$)",
        re.IGNORECASE))


RULES: tuple[Rule, ...] = (
    _rule("prefer", "preference", 0.95, r"i\s+(?:really\s+)?prefer"),
    _rule("always", "habit", 0.90, r"i\s+always"),
    _rule("name", "profile.name", 1.0, r"my\s+name\s+is"),
    _rule("allergy", "restriction", 0.95, r"i(?:'m|\s+am)\s+allergic\s+to"),
    _rule("dislike", "preference.negative", 0.85, r"i\s+(?:don't|do\s+not)\s+like"),
    _rule("work", "profile.company", 0.90, r"i\s+work\s+(?:at|for)"),
    _rule("live", "profile.location", 0.90, r"i\s+live\s+in"),
    _rule("remind", "task.reminder", 1.0, r"remind\s+me\s+(?:about|to)"),
    _rule("speak", "profile.language", 0.95, r"i\s+speak"),
    _rule("free", "availability", 0.85, r"i(?:'m|\s+am)\s+usually\s+free"),
)


def extract(text: str, rules: tuple[Rule, ...] = RULES) -> list[Extraction]:
    """Everything the rules find in ``text``, in the order it appears."""
    found = [(match.start(), Extraction(rule.rule_id, rule.category,
                                        match.group("value").strip(), rule.confidence))
             for rule in rules for match in rule.pattern.finditer(text)]
    return [extraction for _, extraction in sorted(found, key=lambda pair: pair[0])]
