"""The extractor the settings ask for: rules by default, none when off, Cohere's chat model
only with a key (and then the key also turns the automatic embedder to Cohere)."""

import pytest

from memledger_enricher import extractors
from memledger_enricher.cohere_extractor import CohereExtractor
from memledger_enricher.rules_extractor import RulesExtractor
from memledger_platform.settings import Settings


def test_the_default_extractor_is_the_offline_rules() -> None:
    extractor = extractors.from_settings(Settings())
    assert isinstance(extractor, RulesExtractor)
    assert (extractor.extractor_id, extractor.prompt_version) == ("rules", "rules/v1")


def test_extraction_off_forms_nothing() -> None:
    assert extractors.from_settings(Settings(extractor="off")) is None


def test_the_cohere_extractor_is_named_by_the_configured_chat_model() -> None:
    settings = Settings(extractor="cohere", cohere_api_key="k", cohere_chat_model="command-r",
                        cohere_base_url="http://127.0.0.1:9")
    extractor = extractors.from_settings(settings)
    assert isinstance(extractor, CohereExtractor)
    assert (extractor.extractor_id, extractor.prompt_version) == ("cohere/command-r",
                                                                  "cohere-json/v1")


def test_the_cohere_extractor_without_a_key_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="MEMLEDGER_EXTRACTOR=cohere needs "
                                         "MEMLEDGER_COHERE_API_KEY"):
        Settings(extractor="cohere")


def test_a_cohere_key_turns_the_automatic_embedder_to_cohere_unless_local_is_asked_for(
        ) -> None:
    assert Settings(extractor="cohere", cohere_api_key="k").embedder_kind == "cohere"
    assert Settings(extractor="cohere", cohere_api_key="k",
                    embedder="local").embedder_kind == "local"
