"""The Cohere adapter against a local fake of Cohere's embed API: the real SDK over real HTTP,
no network beyond the loopback."""

from collections.abc import Iterator
from typing import Any

import pytest

from memledger_platform.embedding.cohere import CohereEmbedder
from memledger_platform.embedding.embedder import EmbedderUnavailable
from tests.cohere_fake import FakeCohere, serving


class FakeEmbed(FakeCohere):
    """Answers POST /v2/embed: a vector per text, from its length."""

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        dims = body["output_dimension"]
        vectors = [[(len(t) + i) / 100 for i in range(dims)] for t in body["texts"]]
        return {"id": "x", "embeddings": {"float": vectors}, "texts": body["texts"],
                "meta": {}, "response_type": "embeddings_by_type"}


@pytest.fixture
def fake() -> Iterator[FakeCohere]:
    with serving(FakeEmbed()) as running:
        yield running


def _embedder(fake: FakeCohere, key: str = "good-key") -> CohereEmbedder:
    return CohereEmbedder(key, dims=8, base_url=fake.url, max_retries=3, timeout_seconds=5)


def test_documents_and_queries_use_their_own_input_types(fake: FakeCohere) -> None:
    embedder = _embedder(fake)
    documents = embedder.embed_documents(["tea", "coffee"])
    query = embedder.embed_query("what does Alice drink?")
    assert [len(v) for v in [*documents, query]] == [8, 8, 8]
    assert [r["input_type"] for r in fake.requests] == ["search_document", "search_query"]
    assert {r["path"] for r in fake.requests} == {"/v2/embed"}
    assert fake.requests[0]["model"] == "embed-v4.0"
    assert embedder.model_id == "cohere/embed-v4.0/8"


def test_more_than_96_texts_go_in_several_requests_in_order(fake: FakeCohere) -> None:
    texts = [f"text {i}" for i in range(200)]
    vectors = _embedder(fake).embed_documents(texts)
    assert [len(r["texts"]) for r in fake.requests] == [96, 96, 8]
    assert vectors[150] == [(len(texts[150]) + i) / 100 for i in range(8)]


@pytest.mark.parametrize("status", [429, 500, 503])
def test_rate_limits_and_server_errors_are_retried(fake: FakeCohere, status: int) -> None:
    fake.failures, fake.status = 2, status
    assert len(_embedder(fake).embed_documents(["tea"])) == 1
    assert len(fake.requests) == 3


def test_a_refused_key_is_a_clear_error_naming_the_setting(fake: FakeCohere) -> None:
    with pytest.raises(EmbedderUnavailable, match="MEMLEDGER_COHERE_API_KEY"):
        _embedder(fake, key="bad-key").embed_documents(["tea"])
