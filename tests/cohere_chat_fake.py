"""A local fake of Cohere's chat API (``POST /v2/chat``), answering like the API with a JSON
text the test chooses, or slowly, or with text that is not what was asked for."""

import json
import time
from typing import Any

from tests.cohere_fake import FakeCohere

TURN_ANSWER: dict[str, Any] = {
    "facts": [{"kind": "preference", "subject": "Ada", "predicate": "prefers",
               "object": "tea", "statement": "Ada prefers tea", "confidence": 0.9}],
    "entities": [{"name": "Ada", "type": "person"}, {"name": "Acme", "type": "organization"}],
    "relations": [{"source": "Ada", "relation": "works_at", "target": "Acme",
                   "confidence": 0.8}]}


class FakeChat(FakeCohere):
    """Answers a turn with what ``by_text`` holds for its text (JSON, or a string sent as it
    is: malformed output), else ``TURN_ANSWER``; a transcript with a one-line summary of it.
    A turn whose text is in ``limited`` is answered 429, always."""

    def __init__(self) -> None:
        super().__init__()
        self.by_text: dict[str, dict[str, Any] | str] = {}
        self.limited: set[str] = set()
        self.raw: str | None = None
        """Answer this text to everything instead (malformed output)."""
        self.delay = 0.0
        """Seconds each reply takes (a slow model; a test of timeouts sets it)."""

    def _answer(self, auth: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        said = body.get("messages", [{}])[-1].get("content", "")
        if said.startswith("{") and json.loads(said).get("text") in self.limited:
            return 429, {"message": "slow down"}
        return super()._answer(auth, body)

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(self.delay)
        return {"id": "chat-1", "finish_reason": "COMPLETE",
                "message": {"role": "assistant",
                            "content": [{"type": "text", "text": self.answer(body)}]},
                "usage": {"billed_units": {"input_tokens": 10, "output_tokens": 10}}}

    def answer(self, body: dict[str, Any]) -> str:
        if self.raw is not None:
            return self.raw
        said = body["messages"][-1]["content"]
        if "summary" in json.dumps(body["response_format"]):
            return json.dumps({"summary": "They talked: " + said.splitlines()[0][:200]})
        found = self.by_text.get(json.loads(said)["text"], TURN_ANSWER)
        return found if isinstance(found, str) else json.dumps(found)

    @property
    def chats(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == "/v2/chat"]
