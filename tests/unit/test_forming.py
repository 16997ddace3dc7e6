"""Forming memories from a conversation, without engines: the rules extractor's triples, the
extractive summary, and the commands they become (keys, ids, sources, derivation)."""

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest

from memledger_enricher import forming
from memledger_enricher.extractor import Turn
from memledger_enricher.forming_service import Forming
from memledger_enricher.rules_extractor import RulesExtractor
from memledger_enricher.session_turns import SessionTurns
from memledger_enricher.summary import extractive
from memledger_platform.events import decode
from memledger_schemas import commands as c
from memledger_schemas.subjects import Subjects

SESSION = UUID(int=0x51)
SAID = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
RULES = RulesExtractor()
ORIGIN = forming.Origin("acme", "notes", SESSION, "corr-1", "u7", "key-1")


def turn(n: int, text: str, speaker: str | None = "Ada", role: str = "user") -> Turn:
    return Turn(UUID(int=0x1000 + n), role, text, speaker, SAID, "u7")


def test_a_stated_preference_reads_as_a_triple_about_whoever_said_it() -> None:
    [fact] = RULES.extract(turn(1, "I prefer green tea in the morning.")).facts
    assert (fact.kind, fact.subject, fact.predicate, fact.object) == (
        "preference", "Ada", "prefers", "green tea in the morning")
    assert fact.statement == "Ada prefers green tea in the morning"
    assert fact.confidence == 0.95


def test_without_a_participant_the_speaker_is_the_role() -> None:
    [fact] = RULES.extract(turn(1, "I live in Lisbon", speaker=None)).facts
    assert (fact.subject, fact.predicate, fact.object) == ("user", "lives in", "Lisbon")


def test_a_many_valued_statement_keeps_its_value_in_the_predicate() -> None:
    nuts, shellfish = (RULES.extract(turn(n, f"I'm allergic to {food}")).facts[0]
                       for n, food in ((1, "nuts"), (2, "shellfish")))
    assert nuts.predicate != shellfish.predicate
    assert nuts.predicate == "is allergic to nuts"


def test_a_company_and_a_place_are_entities_related_to_the_speaker() -> None:
    found = RULES.extract(turn(1, "I work at Acme Corp and I live in Lisbon"))
    assert {(e.name, e.type) for e in found.entities} == {
        ("Ada", "person"), ("Acme Corp", "organization"), ("Lisbon", "place")}
    assert {(r.source, r.relation, r.target) for r in found.relations} == {
        ("Ada", "works_at", "Acme Corp"), ("Ada", "lives_in", "Lisbon")}


def test_a_fact_becomes_a_derived_memory_of_the_project_with_its_source_and_derivation(
        ) -> None:
    said = turn(1, "I prefer tea")
    [[command]] = forming.from_turn(ORIGIN, said, RULES.extract(said), RULES)
    assert isinstance(command, c.DeriveMemory)
    assert (command.kind, command.layer, command.session_id) == ("preference", "project",
                                                                 SESSION)
    assert command.triple is not None
    assert command.triple.object == "tea"
    assert [(s.type, s.ref) for s in command.sources] == [("message", str(said.message_id))]
    assert (command.derivation.extractor, command.derivation.prompt_version) == (
        "rules", "rules/v1")
    assert (command.subject_id, command.source_key_id) == ("u7", "key-1")
    assert command.valid_from == SAID
    assert command.item_id == forming.item_id("acme", str(command.idempotency_key))


def test_the_same_turn_gives_the_same_commands_and_another_turn_other_keys() -> None:
    said, again, other = turn(1, "I prefer tea"), turn(1, "I prefer tea"), turn(2, "I prefer tea")
    first = forming.from_turn(ORIGIN, said, RULES.extract(said), RULES)
    assert first == forming.from_turn(ORIGIN, again, RULES.extract(again), RULES)
    later = forming.from_turn(ORIGIN, other, RULES.extract(other), RULES)
    assert first[0][0].idempotency_key != later[0][0].idempotency_key


def test_entities_come_before_facts_and_relations_after_them() -> None:
    said = turn(1, "I work at Acme Corp")
    waves = forming.from_turn(ORIGIN, said, RULES.extract(said), RULES)
    assert [[type(cmd).__name__ for cmd in wave] for wave in waves] == [
        ["UpsertEntity", "UpsertEntity"], ["DeriveMemory"], ["AssertRelation"]]
    entity_ids = {cmd.entity_id for cmd in waves[0] if isinstance(cmd, c.UpsertEntity)}
    [relation] = waves[2]
    assert isinstance(relation, c.AssertRelation)
    assert {relation.source_entity, relation.target_entity} == entity_ids
    assert all("acme" not in e.lower() for e in entity_ids)  # ids in the clear hold no name


TALK = [
    "We should plan the garden this spring.",
    "I think tomatoes and basil would grow well in the garden beds.",
    "Thanks!",
    "The garden beds need new soil before the tomatoes go in.",
    "My cousin is visiting from Porto next week.",
    "Basil and tomatoes share the same beds in most gardens.",
    "Sure.",
]


def test_a_summary_keeps_the_most_central_sentences_in_the_order_said() -> None:
    turns = [turn(n, text, speaker="Ada" if n % 2 else "Bo") for n, text in enumerate(TALK)]
    summary = extractive(turns, max_sentences=2)
    assert summary is not None
    assert "garden" in summary.text
    assert "Porto" not in summary.text
    assert "Thanks" not in summary.text
    assert list(summary.sources) == sorted(summary.sources, key=lambda m: m.int)
    assert summary == extractive(turns, max_sentences=2)


def test_nothing_worth_keeping_makes_no_summary() -> None:
    assert extractive([turn(1, "Ok."), turn(2, "Sure, thanks!")]) is None


class Talk(SessionTurns):
    def __init__(self, turns: list[Turn]) -> None:
        self.found = turns
        self.asked: list[int] = []

    def turns(self, tenant: str, stream_id: UUID, up_to_version: int) -> list[Turn]:
        self.asked.append(up_to_version)
        return self.found[:up_to_version - 1]


def _message(n: int, text: str, subject: str = "u7") -> dict[str, Any]:
    return {"event_type": "conversation.message_appended", "tenant_id": "acme",
            "space_id": "notes", "event_id": f"e{n}", "stream_id": str(UUID(int=9)),
            "stream_version": n + 1, "subject_id": subject, "key_id": "key-1",
            "actor": "tester", "global_position": n, "recorded_at": SAID.isoformat(),
            "valid_from": SAID.isoformat(),
            "payload": {"session_id": str(SESSION), "message_id": str(UUID(int=0x1000 + n)),
                        "role": "user", "content": text, "participant": "Ada"}}


def _forming(talk: Talk, every: int) -> Forming:
    return Forming(None, Subjects("memledger"), RULES, None, turns=talk,  # type: ignore[arg-type]
                   summary_every=every)


def test_every_n_turns_those_turns_are_summed_up() -> None:
    talk = Talk([turn(n, TALK[(n - 1) % len(TALK)]) for n in range(1, 7)])
    former = _forming(talk, every=3)
    assert former.waves(decode(_message(2, "Sure."))) == []
    [[summary]] = former.waves(decode(_message(3, "Ok.")))
    assert isinstance(summary, c.DeriveMemory)
    assert (summary.kind, summary.tags) == ("episode", ("derived", "summary"))
    assert str(summary.idempotency_key).endswith("/summary/1-3")
    assert talk.asked == [4]


def test_when_a_session_ends_all_of_it_is_summed_up() -> None:
    talk = Talk([turn(n, TALK[n - 1]) for n in range(1, 8)])
    ended = {**_message(8, ""), "event_type": "session.ended",
             "payload": {"session_id": str(SESSION)}}
    [[summary]] = _forming(talk, every=0).waves(decode(ended))
    assert isinstance(summary, c.DeriveMemory)
    assert str(summary.idempotency_key).endswith("/summary/session")
    assert summary.sources
    assert summary.session_id == SESSION


def test_another_subjects_words_stay_out_of_a_summary_sealed_under_this_one() -> None:
    theirs = [Turn(t.message_id, t.role, t.text, t.participant, t.said_at, "u9")
              for t in (turn(n, TALK[n - 1]) for n in range(1, 8))]
    ended = {**_message(8, ""), "event_type": "session.ended",
             "payload": {"session_id": str(SESSION)}}
    assert _forming(Talk(theirs), every=0).waves(decode(ended)) == []


@pytest.mark.parametrize("role", ["assistant", "system", "tool"])
def test_what_is_not_said_by_a_user_gives_no_facts(role: str) -> None:
    event = _message(1, "I prefer tea")
    event["payload"]["role"] = role
    assert _forming(Talk([]), every=0).waves(decode(event)) == []
