"""The extractor the settings ask for (``None``: extraction is off)."""

from memledger_enricher.extractor import Extractor
from memledger_enricher.rules_extractor import RulesExtractor
from memledger_platform.settings import Settings


def from_settings(settings: Settings) -> Extractor | None:
    if settings.extractor == "off":
        return None
    if settings.extractor == "cohere":
        from memledger_enricher.cohere_extractor import CohereExtractor

        assert settings.cohere_api_key is not None  # the settings validator ensures it
        return CohereExtractor(settings.cohere_api_key, model=settings.cohere_chat_model,
                               base_url=settings.cohere_base_url,
                               timeout_seconds=settings.extractor_timeout_seconds)
    return RulesExtractor()
