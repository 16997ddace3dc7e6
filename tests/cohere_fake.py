"""A local fake of Cohere's API, for the Cohere adapters' tests: the real SDK over real HTTP,
no network beyond the loopback."""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GOOD_KEY = "good-key"


class FakeCohere:
    """Answers POSTs with ``reply(body)`` for the key ``GOOD_KEY`` (401 for another), after
    failing the first ``failures`` calls with ``status``; keeps every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.failures, self.status = 0, 429
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _answer(self, auth: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.failures > 0:
            self.failures -= 1
            return self.status, {"message": "slow down"}
        if auth != f"Bearer {GOOD_KEY}":
            return 401, {"message": "invalid api token"}
        return 200, self.reply(body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.requests.append({"path": self.path, "auth": self.headers["authorization"],
                                      **body})
                status, payload = fake._answer(self.headers["authorization"], body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@contextmanager
def serving(fake: FakeCohere) -> Iterator[FakeCohere]:
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
