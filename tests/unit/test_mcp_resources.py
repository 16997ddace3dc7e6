"""The MCP resources (spaces, a space's policy and stats) and the warm_start prompt, over the
fake HTTP API: their JSON, and refusals that name the argument and what to do next."""

import json
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import TextContent, TextResourceContents

from tests.unit.mcp_fake import FakeMemledger, call, connected
from tests.unit.mcp_fake_reads import NOW


@pytest.fixture
def fake() -> FakeMemledger:
    return FakeMemledger()


async def read(session: Client, uri: str) -> Any:
    contents = (await session.read_resource(uri)).contents
    assert len(contents) == 1
    assert isinstance(contents[0], TextResourceContents)
    assert contents[0].mime_type == "application/json"
    return json.loads(contents[0].text)


async def prompt(session: Client, **arguments: str) -> str:
    messages = (await session.get_prompt("warm_start", arguments)).messages
    assert [m.role for m in messages] == ["user"]
    assert isinstance(messages[0].content, TextContent)
    return messages[0].content.text


async def test_the_spaces_resource_lists_the_spaces(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "create_space", space_id="team")
        await call(session, "remember", content="x")
        spaces = await read(session, "memledger://spaces")
    assert [s["space_id"] for s in spaces["spaces"]] == ["agent", "team"]


async def test_the_policy_resource_gives_the_governing_version(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "create_space", space_id="team")
        none = await read(session, "memledger://spaces/team/policy")
        fake.policies += [
            {"policy_version": v, "position": 10 + v, "recorded_at": NOW, "actor": "key:k1",
             "policy": {"space_id": "team", "policy_version": v, "retention_days": days}}
            for v, days in ((1, {"fact": 400}), (2, {"fact": 30}))]
        governing = await read(session, "memledger://spaces/team/policy")
    assert (none["policy_version"], none["policy"], none["versions"]) == (0, None, 0)
    assert (governing["policy_version"], governing["versions"]) == (2, 2)
    assert governing["policy"] == {"retention_days": {"fact": 30}}
    assert (governing["set_at_position"], governing["actor"]) == (12, "key:k1")


async def test_the_stats_resource_counts_what_the_space_holds(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        item = (await call(session, "remember", content="a fact"))["item_id"]
        await call(session, "remember", content="a rule", kind="steering_rule")
        await call(session, "forget", item_id=item)
        stats = await read(session, "memledger://spaces/agent/stats")
    assert stats["items"] == {"fact": {"archived": 1}, "steering_rule": {"active": 1}}
    assert stats["space_id"] == "agent"


async def test_a_resource_of_an_unknown_space_says_to_list_the_spaces(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        for what in ("policy", "stats"):
            with pytest.raises(MCPError) as refused:
                await session.read_resource(f"memledger://spaces/nowhere/{what}")
            assert refused.value.error.message.startswith(
                "space 'nowhere' not found (not_found). Call list_spaces")


async def test_warm_start_puts_the_context_bundle_before_the_model(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "remember", content="Deploys need a review", kind="steering_rule")
        briefing = await prompt(session, query="deploy", budget_tokens="300",
                                session_id="0190a000-0000-7000-8000-0000000005e5")
    assert briefing.startswith("memledger's briefing from space 'agent' (position 2, 9 of "
                               "300 tokens).")
    assert "- [steering_rule] Deploys need a review" in briefing
    body = fake.body("/v1/context")
    assert (body["budget_tokens"], body["query"], body["session_id"]) == (
        300, "deploy", "0190a000-0000-7000-8000-0000000005e5")


async def test_warm_start_names_a_bad_argument_and_sends_nothing(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        for arguments, field in (({"budget_tokens": "lots"}, "budget_tokens"),
                                 ({"budget_tokens": "5"}, "budget_tokens"),
                                 ({"session_id": "yesterday"}, "session_id"),
                                 ({"space": "no such space"}, "space")):
            with pytest.raises(MCPError) as refused:
                await session.get_prompt("warm_start", arguments)
            assert refused.value.error.message.startswith(
                f"Invalid arguments for warm_start: {field}: "), arguments
            assert "Fix these arguments and get the prompt again" in refused.value.error.message
    assert fake.requests == []


async def test_warm_start_of_an_unknown_space_says_to_list_the_spaces(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        with pytest.raises(MCPError) as refused:
            await session.get_prompt("warm_start", {"space": "nowhere"})
    assert refused.value.error.message.startswith("space 'nowhere' not found (not_found). Call "
                                                  "list_spaces")
