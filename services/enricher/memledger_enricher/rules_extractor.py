"""``Extractor`` by rules, offline and deterministic (the default): the extraction rules
(``extraction``) read as triples about the speaker, the entities their profile values name
(a company, a place, a language) with the speaker's relation to each, and extractive
summaries (``summary``).

Each rule reads as a predicate about whoever said it. A single-valued one ("prefers", "works
at", "lives in") holds one object at a time, so a newer statement supersedes the older ("I
prefer tea", later "I prefer coffee"); a space's policy may make a predicate multi-valued. A
many-valued one ("is allergic to", "speaks") puts its value in the predicate, so two
allergies stand side by side and saying one again restates it.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from memledger_enricher.extraction import Extraction, extract
from memledger_enricher.extractor import (
    Entity,
    Extractor,
    Fact,
    FactKind,
    Findings,
    Relation,
    Summary,
    Turn,
)
from memledger_enricher.summary import extractive

RULES_VERSION = "rules/v1"


@dataclass(frozen=True)
class Reading:
    kind: FactKind
    verb: str
    single: bool
    entity: str | None = None
    """The type of entity the value names, if any (related to the speaker by ``relation``)."""
    relation: str | None = None


READINGS: dict[str, Reading] = {
    "prefer": Reading("preference", "prefers", single=True),
    "always": Reading("preference", "always", single=False),
    "name": Reading("fact", "is named", single=True),
    "allergy": Reading("fact", "is allergic to", single=False),
    "dislike": Reading("preference", "dislikes", single=False),
    "work": Reading("fact", "works at", single=True, entity="organization",
                    relation="works_at"),
    "live": Reading("fact", "lives in", single=True, entity="place", relation="lives_in"),
    "remind": Reading("fact", "wants to be reminded about", single=False),
    "speak": Reading("fact", "speaks", single=False, entity="language", relation="speaks"),
    "free": Reading("preference", "is usually free", single=True),
}
"""How each extraction rule (by id) reads as a triple about its speaker."""


class RulesExtractor(Extractor):
    extractor_id = "rules"
    prompt_version = RULES_VERSION

    def extract(self, turn: Turn) -> Findings:
        found = [(e, READINGS[e.rule_id]) for e in extract(turn.text) if e.rule_id in READINGS]
        facts = tuple(fact(turn.speaker, e, r) for e, r in found)
        named = [(e, r) for e, r in found if r.entity is not None]
        entities = tuple(Entity(e.value[:512], str(r.entity)) for e, r in named)
        speaker = (Entity(turn.speaker[:512], "person"),) if named else ()
        relations = tuple(Relation(turn.speaker[:512], str(r.relation), e.value[:512],
                                   e.confidence) for e, r in named)
        return Findings(facts, speaker + entities, relations)

    def summarise(self, turns: Sequence[Turn]) -> Summary | None:
        return extractive(turns)


def fact(speaker: str, extraction: Extraction, reading: Reading) -> Fact:
    """The triple a rule's finding reads as, about ``speaker``."""
    value = extraction.value
    statement = f"{speaker} {reading.verb} {value}"
    predicate = reading.verb if reading.single else f"{reading.verb} {value.casefold()}"
    return Fact(reading.kind, speaker[:512], predicate[:512], value[:512], statement,
                extraction.confidence)
