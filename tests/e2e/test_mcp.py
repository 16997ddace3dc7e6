"""The MCP server as an agent's host runs it: ``memledger mcp`` in its own process, spoken to
through the SDK's stdio client, against the real ``memledger up`` (one for this module; each
test uses spaces of its own). Only public interfaces: MCP, and the Python client where the
test sets up what no tool does (a space policy)."""

import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp_types import TextContent, TextResourceContents

from memledger_client import AsyncClient
from memledger_schemas.commands import SetSpacePolicy
from tests.e2e.conftest import Running, started
from tests.support import eventually


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with started(tmp_path_factory.mktemp("mcp") / "home") as running:
        yield running


@dataclass
class Agent:
    """The stdio client, remembering every tool it called."""

    client: McpClient
    called: set[str] = field(default_factory=set)

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        assert not result.is_error, (tool, self.text(result.content))
        assert result.structured_content is not None, tool
        self.called.add(tool)
        return dict(result.structured_content)

    async def refused(self, tool: str, **arguments: Any) -> str:
        result = await self.client.call_tool(tool, arguments)
        assert result.is_error, (tool, result.structured_content)
        return self.text(result.content)

    async def read(self, uri: str) -> Any:
        [contents] = (await self.client.read_resource(uri)).contents
        assert isinstance(contents, TextResourceContents)
        return json.loads(contents.text)

    @staticmethod
    def text(content: list[Any]) -> str:
        return " ".join(c.text for c in content if isinstance(c, TextContent))


@asynccontextmanager
async def connected(server: Running, cwd: Path) -> AsyncIterator[Agent]:
    """``memledger mcp`` for a space of its own, as agent "helper" (a context manager, not a
    fixture: the stdio client's task group must end in the task that started it)."""
    space = f"m{uuid.uuid4().hex[:12]}"
    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "memledger_cli", "mcp", "--url", server.url, "--space", space,
        "--agent", "helper"], cwd=cwd)
    async with McpClient(params) as client:
        yield Agent(client)


async def test_the_mcp_server_remembers_and_recalls_over_stdio(server: Running,
                                                                tmp_path: Path) -> None:
    async with connected(server, tmp_path) as agent:
        remembered = await agent.call("remember", kind="preference",
                                      content="The user prefers dark roast coffee")


        async def recalled() -> None:
            # found once embedded: by its words alone it ranks below even this mode's floor
            found = await agent.call("recall", query="dark roast coffee", mode="brainstorming")
            assert [h["item_id"] for h in found["hits"]] == [remembered["item_id"]]

        await eventually(recalled, timeout=60)
        missing = await agent.refused("forget", item_id=str(uuid.uuid4()))
    assert "not_found" in missing


async def test_every_tool_resource_and_prompt_works_against_memledger_up(
        server: Running, tmp_path: Path) -> None:
    async with connected(server, tmp_path) as agent:
        tools = {t.name for t in (await agent.client.list_tools()).tools}
        space = (await agent.call("remember", content="Alice works at Acme",
                                  triple={"subject": "alice", "predicate": "works_at",
                                          "object": "acme"},
                                  valid_from="2020-01-01T00:00:00Z"))["space_id"]
        await _memory(agent, space)
        await _conversation(agent)
        await _graph(agent)
        await _formed(agent)
        await _directory(agent, space)
        await _prune(agent)
        async with AsyncClient(server.url) as ml:
            await ml.send(SetSpacePolicy(space_id=space, retention_days={"observation": 30}))
        await _offerings(agent, space)
    assert agent.called == tools


async def _memory(agent: Agent, space: str) -> None:
    moved = await agent.call("remember", content="Alice works at Globex",
                             triple={"subject": "alice", "predicate": "works_at",
                                     "object": "globex"})

    async def recalled() -> dict[str, Any]:
        found = await agent.call("recall", query="where does Alice work", kinds=["fact"],
                                 agent_id="helper", mode="brainstorming")
        assert moved["item_id"] in [h["item_id"] for h in found["hits"]]
        return found

    found = await eventually(recalled, timeout=60)
    assert moved["superseded"] is not None
    assert found["retrieval_id"] is not None
    fed = await agent.call("feedback", item_ids=[moved["item_id"]], signal="used",
                           retrieval_id=found["retrieval_id"])
    assert fed["recorded"] == 1
    await agent.call("revise", item_id=moved["item_id"], importance=0.9,
                     reason="she is the lead")
    then = await agent.call("what_was_true", valid_at="2021-01-01T00:00:00Z")
    assert [i["content"] for i in then["items"]] == ["Alice works at Acme"]
    history = await agent.call("history", item_id=moved["item_id"])
    assert [c["event_type"] for c in history["changes"]][-1] == "memory.revised"
    retracted = await agent.call("remember", content="The office is closed", kind="observation")
    await agent.call("retract", item_id=retracted["item_id"], reason="it reopened")
    gone = await agent.call("remember", content="A mistaken note")
    await agent.call("forget", item_id=gone["item_id"], reason="never true")
    changes = await agent.call("what_changed_since", limit=100)
    assert "memory.archived" in [c["event_type"] for c in changes["changes"]]
    assert (await agent.refused("history", item_id=str(uuid.uuid4()))).startswith(
        "memory item")


async def _conversation(agent: Agent) -> None:
    sid = (await agent.call("start_session", title="planning"))["session_id"]
    await agent.call("add_message", session_id=sid, content="Shall we ship on Friday?",
                     participant="Ann")
    await agent.call("add_message", session_id=sid, content="Yes, after the review.",
                     role="assistant")
    note = await agent.call("remember", content="Ship on Friday after the review",
                            kind="decision", session_id=sid)
    await agent.call("promote", item_id=note["item_id"], reason="the team agreed")
    context = await agent.call("get_context", session_id=sid, budget_tokens=500)
    assert "Shall we ship on Friday?" in context["rendered"]
    await agent.call("end_session", session_id=sid)
    listed = await agent.call("list_sessions", agent_id="helper")
    assert [(s["session_id"], s["status"], s["messages"]) for s in listed["sessions"]] == [
        (sid, "ended", 2)]
    read = await agent.call("read_conversation", session_id=sid)
    assert [m["content"] for m in read["messages"]] == ["Shall we ship on Friday?",
                                                        "Yes, after the review."]


async def _graph(agent: Agent) -> None:
    await agent.call("link_entity", entity_id="person:alice", name="Alice", type="person")
    await agent.call("link_entity", entity_id="org:globex", name="Globex",
                     type="organisation", aliases=["Globex Corp"])
    relation = (await agent.call("relate", source_entity="person:alice",
                                 relation_type="works_at", target_entity="org:globex"))
    walked = await agent.call("related", entity_id="person:alice")
    assert [n["entity_id"] for n in walked["neighbours"]] == ["org:globex"]
    await agent.call("unrelate", relation_id=relation["relation_id"], reason="she left")
    assert (await agent.call("related", entity_id="person:alice"))["neighbours"] == []


async def _formed(agent: Agent) -> None:
    believed = await agent.call("profile", subject="alice")
    assert [f["content"] for f in believed["facts"]] == ["Alice works at Globex"]
    themes = await agent.call("themes")
    assert all(t["size"] >= 2 for t in themes["themes"])


async def _directory(agent: Agent, space: str) -> None:
    other = f"o{uuid.uuid4().hex[:12]}"
    await agent.call("create_space", space_id=other, name="another")
    name = f"a{uuid.uuid4().hex[:12]}"
    await agent.call("register_agent", agent_id=name, name="Planner")
    spaces = await agent.call("list_spaces", limit=1_000)
    assert {space, other} <= {s["space_id"] for s in spaces["spaces"]}
    agents = await agent.call("list_agents", limit=1_000)
    assert name in [a["agent_id"] for a in agents["agents"]]
    refused = await agent.refused("remember", content="x", space=f"x{uuid.uuid4().hex[:8]}")
    assert "Call list_spaces" in refused


async def _prune(agent: Agent) -> None:
    for n in range(3):
        await agent.call("remember", content=f"scratch note {n}", tags=["scratch"])
    dry = await agent.call("prune", tags=["scratch"])
    assert (len(dry["matched"]), dry["archived"]) == (3, [])
    done = await agent.call("prune", tags=["scratch"], dry_run=False)
    assert sorted(done["archived"]) == sorted(m["item_id"] for m in dry["matched"])
    assert (await agent.call("prune", tags=["scratch"]))["matched"] == []


async def _offerings(agent: Agent, space: str) -> None:
    spaces = await agent.read("memledger://spaces")
    assert space in [s["space_id"] for s in spaces["spaces"]]

    async def policy() -> dict[str, Any]:
        found: dict[str, Any] = await agent.read(f"memledger://spaces/{space}/policy")
        assert found["policy_version"] == 1
        return found

    governing = await eventually(policy, timeout=10)
    assert governing["policy"]["retention_days"] == {"observation": 30}
    stats = await agent.read(f"memledger://spaces/{space}/stats")
    assert stats["items"]["fact"]["archived"] >= 4  # the pruned notes and the forgotten one
    # no tag of the agent's; memory formed from the session may be counted by its tags already
    assert set(stats["tags"]) <= {"derived", "summary"}
    assert (stats["sessions"], stats["messages"]) == ({"ended": 1}, 2)

    async def warm_start() -> None:
        prompt = await agent.client.get_prompt("warm_start", {"query": "when do we ship?"})
        [message] = prompt.messages
        assert isinstance(message.content, TextContent)
        assert message.content.text.startswith(f"memledger's briefing from space {space!r}")
        assert "Ship on Friday after the review" in message.content.text

    await eventually(warm_start, timeout=60)
