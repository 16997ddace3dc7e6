"""The embedder the settings ask for: the enricher embeds documents with it and the query
service embeds queries with it, so both always speak the same model."""

from memledger_platform.embedding.embedder import Embedder, HashingEmbedder, LocalMiniLmEmbedder
from memledger_platform.settings import Settings


def from_settings(settings: Settings) -> Embedder:
    kind = settings.embedder_kind
    if kind == "hashing":
        return HashingEmbedder()
    if kind == "cohere":
        from memledger_platform.embedding.cohere import CohereEmbedder

        assert settings.cohere_api_key is not None  # the settings validator ensures it
        return CohereEmbedder(settings.cohere_api_key, model=settings.cohere_model,
                              dims=settings.cohere_dims, base_url=settings.cohere_base_url)
    return LocalMiniLmEmbedder(cache_dir=settings.model_cache_dir)
