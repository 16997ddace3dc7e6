"""The MCP server through the SDK's in-process client (JSON-RPC over memory streams), its
memledger client talking to a small fake of the HTTP API (``mcp_fake``). No network: the
server as a whole, and the read tools."""

import json
from typing import Any

import httpx
import pytest

from memledger_cli.mcp_server import TOOLS, load_mcp_settings
from memledger_platform.settings import SettingsError
from tests.unit.mcp_fake import FakeMemledger, call, connected, refused, text

UUID = "0190a000-0000-7000-8000-00000000beef"
EVERY_TOOL = {
    "remember", "revise", "retract", "promote", "forget", "feedback", "recall", "get_context",
    "what_changed_since", "what_was_true", "history", "start_session", "add_message",
    "end_session", "list_sessions", "read_conversation", "link_entity", "relate", "unrelate",
    "related", "list_spaces", "create_space", "list_agents", "register_agent", "prune",
    "profile", "themes"}


@pytest.fixture
def fake() -> FakeMemledger:
    return FakeMemledger()


async def test_the_server_offers_every_tool_and_marks_what_each_does_to_memory(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert set(tools) == EVERY_TOOL == {n for _, _, names in TOOLS for n in names}
    hints = {n: t.annotations for n, t in tools.items()}
    read_only = {n for n, a in hints.items() if a and a.read_only_hint}
    assert read_only == {"recall", "get_context", "what_changed_since", "what_was_true",
                         "history", "list_sessions", "read_conversation", "related",
                         "list_spaces", "list_agents", "profile", "themes"}
    destructive = {n for n, a in hints.items() if a and a.destructive_hint}
    assert destructive == {"retract", "forget", "unrelate", "prune"}
    assert tools["remember"].input_schema["required"] == ["content"]
    assert all(t.description for t in tools.values())


async def test_the_server_offers_the_resources_and_the_warm_start_prompt(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        resources = (await session.list_resources()).resources
        templates = (await session.list_resource_templates()).resource_templates
        prompts = (await session.list_prompts()).prompts
    assert [str(r.uri) for r in resources] == ["memledger://spaces"]
    assert sorted(t.uri_template for t in templates) == [
        "memledger://spaces/{space}/policy", "memledger://spaces/{space}/stats"]
    assert [p.name for p in prompts] == ["warm_start"]
    assert {a.name for a in prompts[0].arguments or []} == {
        "session_id", "query", "budget_tokens", "space"}


async def test_remember_creates_the_default_space_on_first_use(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        answer = await call(session, "remember", content="Alice prefers tea",
                            kind="preference", tags=["drinks"])
    assert answer["space_id"] == "agent"
    assert answer["position"] == 2
    assert set(fake.spaces) == {"agent"}
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
    assert fake.spaces == {}


async def test_an_invalid_argument_is_a_tool_error_naming_the_field(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        empty = await refused(session, "remember", content="")
        too_important = await refused(session, "remember", content="x", importance=5)
        no_kind = await refused(session, "remember", content="x", kind="rumour")
        missing = await refused(session, "remember")
    assert "Fix these arguments" in empty
    assert "content" in empty
    assert too_important == (
        "Invalid arguments for remember: importance: Input should be less than or equal to 1 "
        "(got 5). Fix these arguments and call it again (the input schema describes each "
        "one).")
    assert "kind: Input should be 'fact'" in no_kind
    assert "(got 'rumour')" in no_kind
    assert "content: required" in missing
    assert fake.requests == []


async def test_an_argument_the_tool_does_not_take_is_refused_not_ignored(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        error = await refused(session, "remember", content="x", space_id="elsewhere")
    assert error.startswith("Invalid arguments for remember: space_id: not an argument of "
                            "remember (it takes: confidence, content, importance, kind, ")
    assert "space," in error
    assert fake.requests == []


async def test_every_tool_names_the_bad_argument_and_sends_nothing(
        fake: FakeMemledger) -> None:
    """One argument each tool checks itself, before any request."""
    bad: dict[str, dict[str, Any]] = {
        "remember": {"content": "x", "session_id": "not-a-uuid"},
        "revise": {"item_id": "nope", "content": "x"},
        "retract": {"item_id": "nope"}, "promote": {"item_id": str(UUID), "layer": "session"},
        "forget": {"item_id": str(UUID), "reason": ""},
        "feedback": {"item_ids": [], "signal": "used"},
        "recall": {"query": "x", "k": 0}, "get_context": {"budget_tokens": 1},
        "what_changed_since": {"limit": 0}, "what_was_true": {"kinds": ["gossip"]},
        "history": {"item_id": "nope"}, "start_session": {"title": "t" * 600},
        "add_message": {"session_id": str(UUID), "content": "x", "role": "narrator"},
        "end_session": {"session_id": "nope"}, "list_sessions": {"status": "paused"},
        "read_conversation": {"session_id": str(UUID), "limit": 0},
        "link_entity": {"entity_id": "has space", "name": "n", "type": "t"},
        "relate": {"source_entity": "a", "relation_type": "", "target_entity": "b"},
        "unrelate": {"relation_id": "nope"}, "related": {"entity_id": "a", "depth": 9},
        "list_spaces": {"status": "gone"}, "create_space": {"space_id": "no spaces"},
        "list_agents": {"limit": 0}, "register_agent": {"agent_id": "a.b"},
        "prune": {"kinds": ["fact"], "limit": 0}, "profile": {"subject": ""},
        "themes": {"space": 7}}
    named = {"remember": "session_id", "revise": "item_id", "retract": "item_id",
             "promote": "layer", "forget": "reason", "feedback": "item_ids", "recall": "k",
             "get_context": "budget_tokens", "what_changed_since": "limit",
             "what_was_true": "kinds.0", "history": "item_id", "start_session": "title",
             "add_message": "role", "end_session": "session_id", "list_sessions": "status",
             "read_conversation": "limit", "link_entity": "entity_id",
             "relate": "relation_type", "unrelate": "relation_id", "related": "depth",
             "list_spaces": "status", "create_space": "space_id", "list_agents": "limit",
             "register_agent": "agent_id", "prune": "limit", "profile": "subject",
             "themes": "space"}
    async with connected(fake) as session:
        errors = {tool: await refused(session, tool, **arguments)
                  for tool, arguments in bad.items()}
    assert set(errors) == EVERY_TOOL
    for tool, error in errors.items():
        assert f"Invalid arguments for {tool}: {named[tool]}: " in error, error
        assert "Fix these arguments" in error
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
    settings = load_mcp_settings(space="override", agent="planner")
    assert (settings.url, settings.space, settings.tenant, settings.agent) == (
        "http://10.0.0.1:9000", "override", None, "planner")
    with pytest.raises(SettingsError, match="MEMLEDGER_AGENT"):
        load_mcp_settings(agent="not an id")
