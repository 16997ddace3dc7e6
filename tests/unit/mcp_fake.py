"""A small fake of memledger's HTTP API for the MCP server's unit tests (httpx.MockTransport):
spaces, memories and their lifecycle, feedback, batches, sessions and messages, entities and
relations, listings, policies, stats, search and context, the item reads and the changes
feed, with global positions (the state and the reads: ``mcp_fake_reads``); and the MCP
client over it."""

import json
import re
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from mcp import Client
from mcp_types import CallToolResult, TextContent

from memledger_cli.mcp_server import build_server
from memledger_client import NO_RETRY, AsyncClient
from tests.unit.mcp_fake_reads import NOW, FakeReads, error, written

ID = r"([\w-]+)"
Handler = Callable[..., httpx.Response]

EVENTS = {"revise": "memory.revised", "retract": "memory.retracted",
          "promote": "memory.promoted", "archive": "memory.archived"}
ITEM: dict[str, Any] = {
    "status": "active", "triple": None, "confidence": 1.0, "importance": 0.5, "sources": [],
    "valid_from": NOW, "valid_to": None, "session_id": None, "agent_id": None}


class FakeMemledger(FakeReads):
    def __init__(self) -> None:
        super().__init__()
        self.routes: list[tuple[str, str, Handler]] = [
            ("POST", r"/v1/spaces", self.create_space),
            ("GET", r"/v1/spaces", self.list_spaces),
            ("POST", r"/v1/batch", self.batch),
            ("POST", rf"/v1/spaces/{ID}/memories", self.assert_memory),
            ("POST", rf"/v1/spaces/{ID}/memories/{ID}/(revise|retract|promote|archive)",
             self.item_command),
            ("POST", rf"/v1/spaces/{ID}/feedback", self.feedback),
            ("POST", rf"/v1/spaces/{ID}/sessions", self.start_session),
            ("GET", rf"/v1/spaces/{ID}/sessions", self.list_sessions),
            ("POST", rf"/v1/spaces/{ID}/sessions/{ID}/messages", self.append),
            ("GET", rf"/v1/spaces/{ID}/sessions/{ID}/messages", self.conversation),
            ("POST", rf"/v1/spaces/{ID}/sessions/{ID}/end", self.end_session),
            ("POST", rf"/v1/spaces/{ID}/entities", self.upsert_entity),
            ("GET", rf"/v1/spaces/{ID}/entities/(.+)/neighbours", self.neighbours),
            ("POST", rf"/v1/spaces/{ID}/relations", self.relate),
            ("POST", rf"/v1/spaces/{ID}/relations/{ID}/retract", self.unrelate),
            ("POST", r"/v1/agents", self.register_agent),
            ("GET", r"/v1/agents", self.list_agents),
            ("GET", rf"/v1/spaces/{ID}/policies", self.list_policies),
            ("GET", rf"/v1/spaces/{ID}/stats", self.stats),
            ("GET", rf"/v1/spaces/{ID}/profiles/([^/]+)", self.profile),
            ("GET", rf"/v1/spaces/{ID}/themes", self.themes),
            ("POST", r"/v1/search", self.search),
            ("POST", r"/v1/context", self.context),
            ("GET", rf"/v1/spaces/{ID}/items", self.list_items),
            ("GET", rf"/v1/spaces/{ID}/items/{ID}", self.item),
            ("GET", rf"/v1/spaces/{ID}/items/{ID}/history", self.history),
            ("GET", rf"/v1/spaces/{ID}/changes", self.feed),
        ]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = json.loads(request.content) if request.content else {}
        for method, pattern, handler in self.routes:
            found = re.fullmatch(pattern, request.url.path)
            if method == request.method and found:
                return handler(*found.groups(), body=body, params=request.url.params)
        return error(404, f"no route {request.url.path}")
    # --- writes -------------------------------------------------------------------------------

    def create_space(self, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        space = body["space_id"]
        if space in self.spaces:
            return error(409, f"space {space!r} already exists")
        position = self.record("space.created", space, space)
        self.spaces[space] = {"space_id": space, "name": body.get("name"), "position": position}
        return written(position, {"space_id": space})

    def assert_memory(self, space: str, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        if space not in self.spaces:
            return error(404, f"space {space!r} not found")
        item_id = f"0190a000-0000-7000-8000-{len(self.items):012d}"
        held = self._holder(space, body.get("triple"))
        position = self.record("memory.asserted", space, item_id, content=body["content"])
        self.items[item_id] = {**ITEM, "item_id": item_id, "space_id": space,
                               "content": body["content"], "kind": body["kind"],
                               "tags": body.get("tags", []), "triple": body.get("triple"),
                               "importance": body.get("importance", 0.5),
                               "known_since_position": position}
        return written(position, {"item_id": item_id, **({"superseded": held} if held else {})})

    def _holder(self, space: str, triple: dict[str, str] | None) -> str | None:
        if triple is None:
            return None
        for item in self.items.values():
            held = item["triple"]
            if (item["space_id"] == space and item["status"] == "active" and held
                    and (held["subject"], held["predicate"]) == (triple["subject"],
                                                                 triple["predicate"])):
                item["status"] = "superseded"
                return str(item["item_id"])
        return None

    def item_command(self, space: str, item_id: str, action: str, *, body: dict[str, Any],
                     **_: Any) -> httpx.Response:
        item = self.items.get(item_id)
        if item is None or item["space_id"] != space:
            return error(404, f"memory item {item_id!r} not found in space {space!r}")
        if action in ("retract", "archive") and item["status"] != "active":
            return error(409, f"memory item {item_id!r} is {item['status']}")
        item["status"] = {"retract": "retracted", "archive": "archived"}.get(
            action, item["status"])
        item["content"] = body.get("content") or item["content"]
        position = self.record(EVENTS[action], space, item_id, reason=body.get("reason"))
        return written(position, {"item_id": item_id})

    def feedback(self, space: str, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        if body["item_id"] not in self.items:
            return error(404, f"memory item {body['item_id']!r} not found")
        position = self.record("feedback.recorded", space, body["item_id"], **body)
        return written(position, {"feedback_id": str(uuid.uuid4())})

    def batch(self, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        """Archives and feedback, all or none (a missing item refuses the batch)."""
        commands = body["commands"]
        for n, command in enumerate(commands):
            if command["item_id"] not in self.items:
                return error(404, f"memory item {command['item_id']!r} not found",
                             path=f"commands.{n}.item_id")
        answers = [json.loads((self.feedback(c["space_id"], body=c)
                               if c["command"] == "record_feedback" else
                               self.item_command(c["space_id"], c["item_id"], "archive",
                                                 body=c)).content) for c in commands]
        return httpx.Response(201, json={"position": answers[-1]["position"],
                                         "results": answers})

    def start_session(self, space: str, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        if space not in self.spaces:
            return error(404, f"space {space!r} not found")
        session = str(uuid.uuid4())
        self.sessions[session] = {"space_id": space, "title": body.get("title"),
                                  "status": "active", "agent_id": body.get("agent_id")}
        return written(self.record("session.started", space, session), {"session_id": session})

    def append(self, space: str, session: str, *, body: dict[str, Any], **_: Any
               ) -> httpx.Response:
        if self.sessions.get(session, {}).get("space_id") != space:
            return error(404, f"session {session!r} not found")
        message = str(uuid.uuid4())
        position = self.record("conversation.message_appended", space, session, **body)
        self.messages.append({**body, "message_id": message, "position": position})
        return written(position, {"message_id": message})

    def end_session(self, space: str, session: str, **_: Any) -> httpx.Response:
        if session not in self.sessions:
            return error(404, f"session {session!r} not found")
        self.sessions[session]["status"] = "ended"
        return written(self.record("session.ended", space, session), {"session_id": session})

    def upsert_entity(self, space: str, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        self.entities[body["entity_id"]] = body
        return written(self.record("entity.upserted", space, body["entity_id"]),
                       {"entity_id": body["entity_id"]})

    def relate(self, space: str, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        for end in (body["source_entity"], body["target_entity"]):
            if end not in self.entities:
                return error(404, f"entity {end!r} not found")
        relation = str(uuid.uuid4())
        self.relations[relation] = {**body, "status": "active"}
        return written(self.record("relation.asserted", space, relation),
                       {"relation_id": relation})

    def unrelate(self, space: str, relation: str, **_: Any) -> httpx.Response:
        if relation not in self.relations:
            return error(404, f"relation {relation!r} not found")
        self.relations[relation]["status"] = "retracted"
        return written(self.record("relation.retracted", space, relation),
                       {"relation_id": relation})

    def register_agent(self, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        self.agents[body["agent_id"]] = body
        return written(self.record("agent.registered", "", body["agent_id"]),
                       {"agent_id": body["agent_id"]})


@asynccontextmanager
async def connected(handler: Callable[[httpx.Request], httpx.Response],
                    agent: str | None = None) -> AsyncIterator[Client]:
    """The MCP server over ``handler``, through the SDK's in-process client."""
    api = AsyncClient("http://memledger.test", retry=NO_RETRY,
                      transport=httpx.MockTransport(handler))
    async with api, Client(build_server(api, "agent", agent), mode="legacy") as session:
        yield session


async def call(session: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call that must succeed: its structured answer."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


async def refused(session: Client, tool: str, **arguments: Any) -> str:
    """A tool call that must fail: its error text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return text(result)


def text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))
