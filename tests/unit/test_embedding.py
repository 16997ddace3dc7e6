"""The Embedder contract, for every adapter; and that the local model knows meaning."""

import math

import pytest

from memledger_platform.embedding.embedder import Embedder, HashingEmbedder, LocalMiniLmEmbedder

TEXTS = ["Alice prefers tea over coffee", "The deploy pipeline failed on Tuesday",
         "Remind me about the dentist appointment", "I live in Lisbon"]


@pytest.fixture(scope="module", params=["hashing", "local-minilm"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    return HashingEmbedder() if request.param == "hashing" else LocalMiniLmEmbedder()


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_every_vector_has_the_declared_size_and_unit_length(embedder: Embedder) -> None:
    for vector in embedder.embed_documents(TEXTS):
        assert len(vector) == embedder.dims
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-4)


def test_the_same_text_gets_the_same_vector_alone_or_in_a_batch(embedder: Embedder) -> None:
    batch = embedder.embed_documents(TEXTS)
    for text, vector in zip(TEXTS, batch, strict=True):
        alone = embedder.embed_query(text)
        assert max(abs(x - y) for x, y in zip(alone, vector, strict=True)) < 1e-4


def test_an_empty_batch_gives_no_vectors(embedder: Embedder) -> None:
    assert embedder.embed_documents([]) == []


def test_the_local_model_ranks_a_paraphrase_above_unrelated_sentences() -> None:
    model = LocalMiniLmEmbedder()
    query = model.embed_query("What does Alice like to drink?")
    documents = model.embed_documents([
        "Alice prefers tea over coffee", "The deploy pipeline failed on Tuesday",
        "Bob's favourite colour is green", "The invoice is due next month"])
    scores = [_cosine(query, d) for d in documents]
    assert scores.index(max(scores)) == 0
    assert scores[0] - max(scores[1:]) > 0.2


def test_the_local_model_names_itself_and_its_size() -> None:
    assert LocalMiniLmEmbedder.model_id == "all-MiniLM-L6-v2/int8-dynamic-onnx"
    assert LocalMiniLmEmbedder.dims == 384
