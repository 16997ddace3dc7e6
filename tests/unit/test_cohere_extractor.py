"""The Cohere extractor against a local fake of Cohere's chat API: the real SDK over real
HTTP, no network beyond the loopback."""

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from uuid import UUID

import pytest

from memledger_enricher.cohere_extractor import CohereExtractor
from memledger_enricher.extractor import ExtractionFailed, Turn
from tests.cohere_chat_fake import FakeChat
from tests.cohere_fake import serving

SAID = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def fake() -> Iterator[FakeChat]:
    with serving(FakeChat()) as running:
        yield running  # type: ignore[misc]


def _extractor(fake: FakeChat, key: str = "good-key", timeout: float = 5.0
               ) -> CohereExtractor:
    return CohereExtractor(key, base_url=fake.url, timeout_seconds=timeout, max_retries=1)


def _turn(text: str = "I prefer tea and I work at Acme", n: int = 1) -> Turn:
    return Turn(UUID(int=n), "user", text, "Ada", SAID)


def test_a_turn_is_asked_for_json_of_its_schema_and_read_back_as_findings(
        fake: FakeChat) -> None:
    found = _extractor(fake).extract(_turn())
    [fact] = found.facts
    assert (fact.kind, fact.subject, fact.predicate, fact.object, fact.confidence) == (
        "preference", "Ada", "prefers", "tea", 0.9)
    assert [(r.source, r.relation, r.target) for r in found.relations] == [
        ("Ada", "works_at", "Acme")]
    [request] = fake.chats
    assert request["response_format"]["type"] == "json_object"
    assert "facts" in request["response_format"]["json_schema"]["properties"]
    assert request["temperature"] == 0
    assert json.loads(request["messages"][-1]["content"])["speaker"] == "Ada"


def test_a_run_of_turns_is_summarised_from_its_transcript_naming_every_turn(
        fake: FakeChat) -> None:
    turns = [_turn(f"line {n}", n) for n in range(3)]
    summary = _extractor(fake).summarise(turns)
    assert summary is not None
    assert summary.text.startswith("They talked: Ada: line 0")
    assert summary.sources == tuple(t.message_id for t in turns)


def test_the_extractor_is_named_by_its_model_and_prompt_version(fake: FakeChat) -> None:
    extractor = _extractor(fake)
    assert (extractor.extractor_id, extractor.prompt_version) == (
        "cohere/command-a-03-2025", "cohere-json/v1")


def test_a_rate_limit_is_retried_by_the_sdk(fake: FakeChat) -> None:
    fake.failures, fake.status = 1, 429
    assert _extractor(fake).extract(_turn()).facts
    assert len(fake.chats) == 2


@pytest.mark.parametrize("status", [429, 503])
def test_a_rate_limit_or_outage_that_lasts_is_a_transient_failure(fake: FakeChat,
                                                                   status: int) -> None:
    fake.failures, fake.status = 10, status
    with pytest.raises(ExtractionFailed) as failed:
        _extractor(fake).extract(_turn())
    assert failed.value.transient
    assert str(status) in failed.value.reason


def test_a_model_that_does_not_answer_in_time_is_a_transient_failure(fake: FakeChat) -> None:
    fake.delay = 2.0
    with pytest.raises(ExtractionFailed) as failed:
        _extractor(fake, timeout=0.3).extract(_turn())
    assert failed.value.transient
    assert "did not answer within 0.3 s" in failed.value.reason


@pytest.mark.parametrize(("raw", "where"), [
    ("Sure! Here are the facts: Ada likes tea.", "(answer)"),
    (json.dumps({"facts": [{"kind": "opinion", "subject": "Ada", "predicate": "p",
                            "object": "o", "statement": "s", "confidence": 0.5}],
                 "entities": [], "relations": []}), "facts.0.kind"),
    (json.dumps({"facts": [], "entities": []}), "relations"),
    (json.dumps({"facts": [{"kind": "fact", "subject": "Ada", "predicate": "p", "object": "o",
                            "statement": "s", "confidence": 7}],
                 "entities": [], "relations": []}), "facts.0.confidence"),
], ids=["prose", "unknown kind", "missing list", "confidence out of range"])
def test_an_answer_that_is_not_the_json_asked_for_fails_for_good_naming_what(
        fake: FakeChat, raw: str, where: str) -> None:
    fake.raw = raw
    with pytest.raises(ExtractionFailed) as failed:
        _extractor(fake).extract(_turn())
    assert not failed.value.transient
    assert where in failed.value.reason


def test_a_refused_key_fails_for_good(fake: FakeChat) -> None:
    with pytest.raises(ExtractionFailed) as failed:
        _extractor(fake, key="bad-key").extract(_turn())
    assert not failed.value.transient
    assert "401" in failed.value.reason
