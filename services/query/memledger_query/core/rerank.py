"""``Reranker``: a second opinion on the best few hits of a search, from a model that reads the
query and each hit's text together (a cross-encoder), and its adapters.

- ``CohereReranker``: Cohere's rerank API (v2) through the ``cohere`` SDK, used only when
  configured (``MEMLEDGER_RERANKER=cohere`` and a Cohere key).

Off by default: no package installable here ships a local cross-encoder with its weights, and
a remote call costs more than the search it would reorder (docs/search.md).

``reorder`` applies a reranker to a ranked list: the first ``depth`` hits are scored by the
reranker, whose score takes the place of the fused relevance in each hit's score (recency,
importance, confidence, utility, time, the session's words and a turn's asking still count),
and they are reordered by it; the hits below ``depth`` follow in their order. Thresholds
still cut on relevance, before reranking.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace

from memledger_platform.settings import Settings
from memledger_query.core.ranking import Ranked


class RerankerUnavailable(RuntimeError):
    """The reranker refused the call (a bad key, a bad model): the message names the setting."""


class Reranker(ABC):
    """Scores documents against a query.

    Contract (every adapter): one score per document, in the documents' order, higher is more
    relevant, in [0, 1]; the same query and documents give the same scores; ``model_id`` names
    the model (it is part of the ranking policy's version).
    """

    model_id: str

    @abstractmethod
    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """A relevance score per document."""


class CohereReranker(Reranker):
    def __init__(self, api_key: str, *, model: str = "rerank-v3.5",
                 base_url: str | None = None, max_retries: int = 2,
                 timeout_seconds: float = 10.0) -> None:
        import cohere  # only when configured: the SDK takes a second to import

        self.model_id = f"cohere/{model}"
        self._model = model
        self._client = cohere.ClientV2(api_key=api_key, base_url=base_url,
                                       max_retries=max_retries, timeout=timeout_seconds,
                                       log_warning_experimental_features=False)

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        from cohere.core.api_error import ApiError

        if not documents:
            return []
        try:
            response = self._client.rerank(model=self._model, query=query,
                                           documents=list(documents), top_n=len(documents))
        except ApiError as error:
            if error.status_code in (401, 403):
                raise RerankerUnavailable(
                    "Cohere refused the API key: check MEMLEDGER_COHERE_API_KEY") from None
            raise
        found = [0.0] * len(documents)
        for result in response.results:
            found[result.index] = float(result.relevance_score)
        return found


def from_settings(settings: Settings) -> Reranker | None:
    """The reranker the settings ask for (``None``: off)."""
    if settings.reranker == "off":
        return None
    assert settings.cohere_api_key is not None  # the settings validator ensures it
    return CohereReranker(settings.cohere_api_key, model=settings.cohere_rerank_model,
                          base_url=settings.cohere_base_url)


def reorder(ranked: Sequence[Ranked], query: str, reranker: Reranker, depth: int
            ) -> list[Ranked]:
    """``ranked`` with its first ``depth`` hits rescored by ``reranker`` and reordered (ties:
    by item id); the rest after them, as they were."""
    top = list(ranked[:depth])
    scores = reranker.scores(query, [str(r.candidate.payload.get("content", "")) for r in top])
    rescored = [_rescored(r, s) for r, s in zip(top, scores, strict=True)]
    rescored.sort(key=lambda r: (-r.score, r.candidate.item_id))
    return rescored + list(ranked[depth:])


def _rescored(hit: Ranked, rerank: float) -> Ranked:
    f = hit.factors
    if f is None:
        return replace(hit, score=rerank)
    others = f.recency * f.importance * f.confidence * f.useful * f.timely * f.session * f.asks
    return replace(hit, score=rerank * others, factors=f._replace(rerank=rerank))
