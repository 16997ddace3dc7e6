"""Rule-based extraction, table-driven: each rule, its category, value and confidence."""

import pytest

from memledger_enricher.extraction import Extraction, extract


@pytest.mark.parametrize(("text", "expected"), [
    ("I prefer green tea in the morning.", ("prefer", "preference", "green tea in the morning",
                                            0.95)),
    ("I always review pull requests before lunch", ("always", "habit",
                                                    "review pull requests before lunch", 0.90)),
    ("My name is Ada Lovelace.", ("name", "profile.name", "Ada Lovelace", 1.0)),
    ("I'm allergic to peanuts", ("allergy", "restriction", "peanuts", 0.95)),
    ("I am allergic to penicillin!", ("allergy", "restriction", "penicillin", 0.95)),
    ("I don't like meetings on Fridays.", ("dislike", "preference.negative",
                                           "meetings on Fridays", 0.85)),
    ("I do not like cilantro", ("dislike", "preference.negative", "cilantro", 0.85)),
    ("I work at Acme Corp.", ("work", "profile.company", "Acme Corp", 0.90)),
    ("I work for the city council", ("work", "profile.company", "the city council", 0.90)),
    ("I live in Lisbon", ("live", "profile.location", "Lisbon", 0.90)),
    ("Remind me about the dentist on Monday.", ("remind", "task.reminder",
                                                "the dentist on Monday", 1.0)),
    ("remind me to call Bob", ("remind", "task.reminder", "call Bob", 1.0)),
    ("I speak Portuguese and English.", ("speak", "profile.language", "Portuguese and English",
                                         0.95)),
    ("I'm usually free after 4pm on weekdays", ("free", "availability",
                                                "after 4pm on weekdays", 0.85)),
], ids=lambda v: v[0] if isinstance(v, tuple) else None)
def test_each_rule_finds_its_value_with_its_confidence(
        text: str, expected: tuple[str, str, str, float]) -> None:
    assert extract(text) == [Extraction(*expected)]


def test_several_statements_in_one_message_come_out_in_order() -> None:
    found = extract("Hi! My name is Ada. I live in London, I work at the Analytical Engine "
                    "Company; I don't like noise.")
    assert [(e.category, e.value) for e in found] == [
        ("profile.name", "Ada"), ("profile.location", "London"),
        ("profile.company", "the Analytical Engine Company"), ("preference.negative", "noise")]


@pytest.mark.parametrize("text", [
    "Do you prefer tea?", "She said I should always be careful", "my namesake is Bob",
    "The city where I live is Lisbon", "", "I prefer"])
def test_text_that_states_nothing_about_the_speaker_yields_nothing(text: str) -> None:
    assert extract(text) == []


def test_extraction_is_deterministic() -> None:
    text = "I prefer window seats. I always travel light."
    assert extract(text) == extract(text)
