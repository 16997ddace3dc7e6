"""The MCP tools of conversations (start_session, add_message, end_session, list_sessions,
read_conversation), of the entity graph (link_entity, relate, unrelate, related) and of the
directory (list_spaces, create_space, list_agents, register_agent), over the fake HTTP API."""

import pytest

from tests.unit.mcp_fake import FakeMemledger, call, connected, refused

UNKNOWN = "0190a000-0000-7000-8000-00000000dead"


@pytest.fixture
def fake() -> FakeMemledger:
    return FakeMemledger()


async def test_a_conversation_is_kept_listed_and_read_back_in_order(
        fake: FakeMemledger) -> None:
    async with connected(fake, agent="helper") as session:
        await call(session, "create_space", space_id="agent")
        started = await call(session, "start_session", title="planning")
        sid = started["session_id"]
        said = [await call(session, "add_message", session_id=sid, content=text, role=role,
                           participant=who)
                for text, role, who in (("Shall we ship Friday?", "user", "Ann"),
                                        ("Yes, after the review.", "assistant", None))]
        ended = await call(session, "end_session", session_id=sid, reason="done")
        listed = await call(session, "list_sessions", status="ended")
        conversation = await call(session, "read_conversation", session_id=sid)
    assert fake.body("/v1/spaces/agent/sessions")["agent_id"] == "helper"
    assert [m["session_id"] for m in said] == [sid, sid]
    assert ended == {"session_id": sid, "position": said[-1]["position"] + 1}
    assert [(s["session_id"], s["messages"]) for s in listed["sessions"]] == [(sid, 2)]
    assert [(m["role"], m["content"]) for m in conversation["messages"]] == [
        ("user", "Shall we ship Friday?"), ("assistant", "Yes, after the review.")]
    assert conversation["status"] == "ended"


async def test_a_session_that_is_not_there_points_to_list_sessions(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "create_space", space_id="agent")
        error = await refused(session, "read_conversation", session_id=UNKNOWN)
        missing_space = await refused(session, "list_sessions", space="nowhere")
    assert error.startswith(f"session '{UNKNOWN}' not found in 'agent' (not_found). Call "
                            "list_sessions")
    assert missing_space.startswith("space 'nowhere' not found (not_found). Call list_spaces")


async def test_add_message_needs_a_session_id_and_content(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        error = await refused(session, "add_message", content="hello")
        empty = await refused(session, "add_message", session_id=UNKNOWN, content="")
    assert error.startswith("Invalid arguments for add_message: session_id: required.")
    assert empty.startswith("Invalid arguments for add_message: content: String should have "
                            "at least 1 character")


async def test_entities_are_linked_related_walked_and_unrelated(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        for entity, name, kind in (("person:alice", "Alice", "person"),
                                   ("org:acme", "Acme", "organisation")):
            await call(session, "link_entity", entity_id=entity, name=name, type=kind,
                       aliases=[name.lower()])
        related = await call(session, "relate", source_entity="person:alice",
                             relation_type="works_at", target_entity="org:acme",
                             valid_from="2020-01-01T00:00:00Z")
        walked = await call(session, "related", entity_id="person:alice")
        await call(session, "unrelate", relation_id=related["relation_id"], reason="left")
        after = await call(session, "related", entity_id="person:alice")
    assert fake.body("/v1/spaces/agent/entities")["aliases"] == ["acme"]
    assert fake.body("/v1/spaces/agent/relations")["valid_from"] == "2020-01-01T00:00:00Z"
    assert [n["entity_id"] for n in walked["neighbours"]] == ["org:acme"]
    assert [r["relation_id"] for r in walked["relations"]] == [related["relation_id"]]
    assert after["neighbours"] == []


async def test_relating_an_unknown_entity_points_to_link_entity(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        error = await refused(session, "relate", source_entity="person:bob",
                              relation_type="knows", target_entity="person:carol")
        unknown = await refused(session, "related", entity_id="person:bob")
    assert error == ("entity 'person:bob' not found (not_found). Call link_entity to create it "
                     "first (or related with an entity id that exists), and check the space.")
    assert unknown.startswith("entity 'person:bob' not found in space 'agent'")


async def test_spaces_and_agents_are_listed_created_and_registered(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        created = await call(session, "create_space", space_id="team", name="The team")
        taken = await refused(session, "create_space", space_id="team")
        await call(session, "register_agent", agent_id="planner", name="Planner")
        spaces = await call(session, "list_spaces")
        agents = await call(session, "list_agents", limit=10)
    assert created == {"space_id": "team", "position": 1}
    assert taken.startswith("space 'team' already exists (conflict).")
    assert [(s["space_id"], s["name"]) for s in spaces["spaces"]] == [("team", "The team")]
    assert [a["agent_id"] for a in agents["agents"]] == ["planner"]
    assert fake.sent("/v1/agents")[-1].url.params["limit"] == "10"
