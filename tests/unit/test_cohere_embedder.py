"""The Cohere adapter against a local fake of Cohere's embed API: the real SDK over real HTTP,
no network beyond the loopback."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memledger_platform.embedding.cohere import CohereEmbedder
from memledger_platform.embedding.embedder import EmbedderUnavailable


class FakeCohere:
    """Answers POST /v2/embed; fails the first ``failures`` calls with ``status``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.failures, self.status = 0, 429
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.requests.append({"path": self.path, "auth": self.headers["authorization"],
                                      **body})
                if fake.failures > 0:
                    fake.failures -= 1
                    self._answer(fake.status, {"message": "slow down"})
                elif self.headers["authorization"] != "Bearer good-key":
                    self._answer(401, {"message": "invalid api token"})
                else:
                    dims = body["output_dimension"]
                    vectors = [[(len(t) + i) / 100 for i in range(dims)] for t in body["texts"]]
                    self._answer(200, {"id": "x", "embeddings": {"float": vectors},
                                       "texts": body["texts"], "meta": {},
                                       "response_type": "embeddings_by_type"})

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def fake() -> Iterator[FakeCohere]:
    server = FakeCohere()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()


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
