"""The MCP server through the SDK's in-process client (JSON-RPC over memory streams), its
memledger client talking to a small fake of the HTTP API (httpx.MockTransport). No network."""

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from memledger_cli.mcp_server import build_server, load_mcp_settings
from memledger_client import NO_RETRY, AsyncClient
from memledger_platform.settings import SettingsError

NOW = "2026-01-01T00:00:00Z"


class FakeMemledger:
    """Just enough of memledger's HTTP API: spaces, memories, archive, search, context, reads
    and the changes feed, with global positions; every request is recorded."""

    def __init__(self) -> None:
        self.spaces: set[str] = set()
        self.items: dict[str, dict[str, Any]] = {}
        self.changes: list[dict[str, Any]] = []
        self.requests: list[httpx.Request] = []
        self.routes: list[tuple[str, str, Callable[..., httpx.Response]]] = [
            ("POST", r"/v1/spaces", self.create_space),
            ("POST", r"/v1/spaces/(\w+)/memories", self.assert_memory),
            ("POST", r"/v1/spaces/(\w+)/memories/([\w-]+)/archive", self.archive),
            ("POST", r"/v1/search", self.search),
            ("POST", r"/v1/context", self.context),
            ("GET", r"/v1/spaces/(\w+)/items", self.list_items),
            ("GET", r"/v1/spaces/(\w+)/items/([\w-]+)", self.item),
            ("GET", r"/v1/spaces/(\w+)/items/([\w-]+)/history", self.history),
            ("GET", r"/v1/spaces/(\w+)/changes", self.feed),
        ]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = json.loads(request.content) if request.content else {}
        for method, pattern, handler in self.routes:
            found = re.fullmatch(pattern, request.url.path)
            if method == request.method and found:
                return handler(*found.groups(), body=body, params=request.url.params)
        return error(404, f"no route {request.url.path}")

    def sent(self, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path == path]

    def record(self, event_type: str, space: str, subject: str, **payload: Any) -> int:
        position = len(self.changes) + 1
        self.changes.append({"position": position, "recorded_at": NOW, "event_type": event_type,
                             "event_id": f"e{position}", "subject": subject, "space_id": space,
                             "actor": "http", "reason": payload.get("reason"),
                             "valid_from": None, "valid_to": None, "payload": payload})
        return position

    def create_space(self, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        if body["space_id"] in self.spaces:
            return error(409, f"space {body['space_id']!r} already exists")
        self.spaces.add(body["space_id"])
        return written(self.record("space.created", body["space_id"], body["space_id"]), {})

    def assert_memory(self, space: str, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        if space not in self.spaces:
            return error(404, f"space {space!r} not found")
        if not body.get("content"):
            return error(422, "content: too short", path="content")
        item_id = f"0190a000-0000-7000-8000-{len(self.items):012d}"
        position = self.record("memory.asserted", space, item_id, content=body["content"])
        self.items[item_id] = {**ITEM, "item_id": item_id, "space_id": space,
                               "content": body["content"], "kind": body["kind"],
                               "tags": body.get("tags", []), "known_since_position": position}
        return written(position, {"item_id": item_id})

    def archive(self, space: str, item_id: str, *, body: dict[str, Any], **_: Any
                ) -> httpx.Response:
        if item_id not in self.items:
            return error(404, f"item {item_id!r} not found")
        self.items[item_id]["status"] = "archived"
        return written(self.record("memory.archived", space, item_id, reason=body["reason"]),
                       {"item_id": item_id})

    def search(self, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        words = set(body["query"].lower().split())
        hits = [{**i, "layer": "filtered", "score": 0.5, "relevance": 0.5, "valid_from": 0.0,
                 "valid_to": None} for i in self.items.values()
                if words & set(i["content"].lower().split()) and i["status"] == "active"]
        return httpx.Response(200, json={"basis": self.basis(), "mode": body.get("mode"),
                                         "threshold": 0.25, "model": "fake",
                                         "results": hits, "collapsed": {}})

    def context(self, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        lines = "\n".join(f"- [{i['kind']}] {i['content']}" for i in self.items.values())
        return httpx.Response(200, json={
            "basis": self.basis(), "budget_tokens": body["budget_tokens"], "used_tokens": 9,
            "tokenizer": "chars/4", "query": body.get("query"), "sections": [],
            "rendered": f"## Recent history\n{lines}"})

    def item(self, space: str, item_id: str, **_: Any) -> httpx.Response:
        if item_id not in self.items:
            return error(404, f"memory item {item_id!r} not found in space {space!r}")
        return httpx.Response(200, json={"basis": self.basis(), "item": self.items[item_id]})

    def list_items(self, space: str, **_: Any) -> httpx.Response:
        return httpx.Response(200, json={"basis": self.basis(), "items": [
            i for i in self.items.values() if i["space_id"] == space]})

    def history(self, space: str, item_id: str, **_: Any) -> httpx.Response:
        if item_id not in self.items:
            return error(404, f"memory item {item_id!r} not found in {space!r}")
        return httpx.Response(200, json={
            "basis": self.basis(), "item_id": item_id,
            "changes": [c for c in self.changes if c["subject"] == item_id],
            "versions": [{"valid_from": NOW, "valid_to": None, "sys_from": 2, "sys_to": None,
                          "attrs": {"content": self.items[item_id]["content"]},
                          "event_id": "e2", "actor": "http"}]})

    def feed(self, space: str, *, params: httpx.QueryParams, **_: Any) -> httpx.Response:
        after = int(params.get("after", "0"))
        page = [c for c in self.changes if c["position"] > after][:int(params["limit"])]
        last = page[-1]["position"] if page else after
        return httpx.Response(200, json={"changes": page, "next_cursor": str(last),
                                         "position": len(self.changes)})

    def basis(self) -> dict[str, Any]:
        return {"position": len(self.changes), "recorded_at": None, "valid_at": NOW}


ITEM: dict[str, Any] = {
    "status": "active", "triple": None, "confidence": 1.0, "importance": 0.5, "sources": [],
    "valid_from": NOW, "valid_to": None, "session_id": None, "agent_id": None}


def written(position: int, ids: dict[str, str]) -> httpx.Response:
    return httpx.Response(201, json={"command": "x", "event_ids": [f"e{position}"],
                                     "position": position, "positions": [position],
                                     "stream_version": 1, "ids": ids, "duplicate": False})


def error(status: int, message: str, path: str | None = None) -> httpx.Response:
    fields = [{"path": path, "reason": message}] if path else []
    code = {404: "not_found", 409: "conflict", 422: "invalid_request"}[status]
    return httpx.Response(status, json={"error": {"status": status, "code": code,
                                                  "message": message, "fields": fields}})


@asynccontextmanager
async def connected(handler: Callable[[httpx.Request], httpx.Response]
                    ) -> AsyncIterator[Client]:
    api = AsyncClient("http://memledger.test", retry=NO_RETRY,
                      transport=httpx.MockTransport(handler))
    async with api, Client(build_server(api, "agent"), mode="legacy") as session:
        yield session


async def call(session: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


def text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


@pytest.fixture
def fake() -> FakeMemledger:
    return FakeMemledger()


async def test_the_server_offers_the_seven_tools_and_marks_the_reads_read_only(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert set(tools) == {"remember", "recall", "get_context", "what_changed_since",
                          "what_was_true", "history", "forget"}
    read_only = {n for n, t in tools.items() if t.annotations and t.annotations.read_only_hint}
    assert read_only == set(tools) - {"remember", "forget"}
    assert tools["remember"].input_schema["required"] == ["content"]
    forget = tools["forget"].annotations
    assert forget is not None
    assert forget.destructive_hint


async def test_remember_creates_the_default_space_on_first_use(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        answer = await call(session, "remember", content="Alice prefers tea",
                            kind="preference", tags=["drinks"])
    assert answer["space_id"] == "agent"
    assert answer["position"] == 2
    assert fake.spaces == {"agent"}
    body = json.loads(fake.sent("/v1/spaces/agent/memories")[-1].content)
    assert (body["kind"], body["tags"]) == ("preference", ["drinks"])


async def test_recall_finds_what_was_remembered_waiting_for_that_write(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        remembered = await call(session, "remember", content="The billing service ships on "
                                "Fridays", kind="decision")
        found = await call(session, "recall", query="when does billing ship", mode="execution")
    assert [h["item_id"] for h in found["hits"]] == [remembered["item_id"]]
    assert found["hits"][0]["kind"] == "decision"
    search = json.loads(fake.sent("/v1/search")[0].content)
    assert search["min_position"] == remembered["position"]
    assert search["spaces"] == ["agent"]


async def test_what_changed_since_resumes_after_the_cursor_it_returned(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "remember", content="first")
        first = await call(session, "what_changed_since")
        await call(session, "remember", content="second")
        second = await call(session, "what_changed_since", cursor=first["next_cursor"])
    assert [c["event_type"] for c in first["changes"]] == ["space.created", "memory.asserted"]
    assert [c["content"] for c in second["changes"]] == ["second"]


async def test_what_was_true_reads_one_item_as_of_a_position_or_the_whole_space(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        item_id = (await call(session, "remember", content="Alice works at Acme"))["item_id"]
        one = await call(session, "what_was_true", item_id=item_id, as_of_position=2,
                         valid_at="2025-06-01T00:00:00Z")
        every = await call(session, "what_was_true", kinds=["fact"])
    assert [i["content"] for i in one["items"]] == ["Alice works at Acme"]
    params = fake.sent(f"/v1/spaces/agent/items/{item_id}")[0].url.params
    assert (params["as_of_position"], params["valid_at"]) == ("2", "2025-06-01T00:00:00+00:00")
    assert [i["item_id"] for i in every["items"]] == [item_id]
    assert one["basis"]["position"] == 2


async def test_history_and_forget_act_on_one_item(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        item_id = (await call(session, "remember", content="The sky is green"))["item_id"]
        forgotten = await call(session, "forget", item_id=item_id, reason="it is blue")
        history = await call(session, "history", item_id=item_id)
    assert forgotten == {"item_id": item_id, "position": 3}
    assert [c["event_type"] for c in history["changes"]] == ["memory.asserted",
                                                             "memory.archived"]
    assert history["changes"][1]["reason"] == "it is blue"
    assert history["versions"][0]["content"] == "The sky is green"


async def test_get_context_returns_the_rendered_briefing(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "remember", content="Deploys need a review", kind="steering_rule")
        briefing = await call(session, "get_context", query="deploy", budget_tokens=300)
    assert "Deploys need a review" in briefing["rendered"]
    body = json.loads(fake.sent("/v1/context")[0].content)
    assert (body["space_id"], body["budget_tokens"], body["query"]) == ("agent", 300, "deploy")


async def test_an_unknown_item_is_a_tool_error_that_says_what_to_do_next(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        result = await session.call_tool("history", {"item_id": "0190a000-0000-7000-8000-"
                                                                "00000000dead"})
    assert result.is_error
    assert "not_found" in text(result)
    assert "Check the id" in text(result)


async def test_a_space_other_than_the_default_is_never_created_by_remember(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        result = await session.call_tool("remember", {"content": "x", "space": "elsewhere"})
    assert result.is_error
    assert "space 'elsewhere' not found" in text(result)
    assert fake.spaces == set()


async def test_an_invalid_argument_is_a_tool_error_naming_the_field(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        result = await session.call_tool("remember", {"content": ""})
    assert result.is_error
    assert "Fix these arguments" in text(result)
    assert "content" in text(result)
    assert fake.requests == []


async def test_an_unreachable_memledger_is_a_tool_error_naming_the_url_and_the_fix() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    async with connected(refuse) as session:
        result = await session.call_tool("recall", {"query": "anything"})
    assert result.is_error
    assert "http://memledger.test" in text(result)
    assert "memledger up" in text(result)
    assert "MEMLEDGER_URL" in text(result)


async def test_tool_calls_write_nothing_on_stdout(fake: FakeMemledger,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    async with connected(fake) as session:
        await call(session, "remember", content="quiet")
        await session.call_tool("history", {"item_id": "nope"})
    assert capsys.readouterr().out == ""


def test_a_bad_setting_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_URL", "not a url")
    with pytest.raises(SettingsError, match="MEMLEDGER_URL"):
        load_mcp_settings()
    monkeypatch.setenv("MEMLEDGER_URL", "http://10.0.0.1:9000")
    monkeypatch.setenv("MEMLEDGER_SPACE", "team")
    settings = load_mcp_settings(space="override")
    assert (settings.url, settings.space, settings.tenant) == (
        "http://10.0.0.1:9000", "override", None)
