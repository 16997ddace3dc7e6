"""``Embedder`` on Cohere's embed API (v2), used when a Cohere key is configured.

Documents and queries are embedded with their own input types, as Cohere recommends; requests
carry at most 96 texts; 429s and 5xx responses are retried with backoff by the SDK; a refused
key is an ``EmbedderUnavailable`` naming the setting.
"""

from collections.abc import Sequence
from typing import Literal

import cohere
from cohere.core.api_error import ApiError

from memledger_platform.embedding.embedder import Embedder, EmbedderUnavailable, Vector

_MAX_TEXTS = 96
InputType = Literal["search_document", "search_query"]


def cohere_model_id(model: str, dims: int) -> str:
    return f"cohere/{model}/{dims}"


class CohereEmbedder(Embedder):
    def __init__(self, api_key: str, *, model: str = "embed-v4.0", dims: int = 1024,
                 base_url: str | None = None, max_retries: int = 4,
                 timeout_seconds: float = 30.0) -> None:
        self.model_id = cohere_model_id(model, dims)
        self.dims = dims
        self._model = model
        self._client = cohere.ClientV2(api_key=api_key, base_url=base_url,
                                       max_retries=max_retries, timeout=timeout_seconds,
                                       log_warning_experimental_features=False)

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        return self._embed(texts, "search_document")

    def embed_query(self, text: str) -> Vector:
        return self._embed([text], "search_query")[0]

    def _embed(self, texts: Sequence[str], input_type: InputType) -> list[Vector]:
        vectors: list[Vector] = []
        for start in range(0, len(texts), _MAX_TEXTS):
            vectors.extend(self._call(texts[start:start + _MAX_TEXTS], input_type))
        return vectors

    def _call(self, texts: Sequence[str], input_type: InputType) -> list[Vector]:
        try:
            response = self._client.embed(model=self._model, input_type=input_type,
                                          texts=list(texts), output_dimension=self.dims,
                                          embedding_types=["float"])
        except ApiError as error:
            if error.status_code in (401, 403):
                raise EmbedderUnavailable(
                    "Cohere refused the API key: check MEMLEDGER_COHERE_API_KEY") from None
            raise
        floats = response.embeddings.float_ or []
        if len(floats) != len(texts):
            raise EmbedderUnavailable(f"Cohere returned {len(floats)} vectors for {len(texts)} "
                                      "texts")
        return [[float(x) for x in vector] for vector in floats]
