"""The embedder the settings ask for: the enricher embeds documents with it and the query
service embeds queries with it, so both always speak the same model."""

from dataclasses import dataclass

from memledger_platform.embedding.embedder import Embedder, HashingEmbedder, LocalMiniLmEmbedder
from memledger_platform.settings import Settings


@dataclass(frozen=True)
class Model:
    """What the embedder's vectors are, known without loading it: the vector index of its
    vectors is named for ``model_id`` and has ``dims`` dimensions."""

    model_id: str
    dims: int


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


def model_of(settings: Settings) -> Model:
    """The model ``from_settings`` would load (for the vector projector, which never embeds)."""
    kind = settings.embedder_kind
    if kind == "hashing":
        return Model(HashingEmbedder.model_id, HashingEmbedder().dims)
    if kind == "cohere":
        from memledger_platform.embedding.cohere import cohere_model_id

        return Model(cohere_model_id(settings.cohere_model, settings.cohere_dims),
                     settings.cohere_dims)
    return Model(LocalMiniLmEmbedder.model_id, LocalMiniLmEmbedder.dims)
