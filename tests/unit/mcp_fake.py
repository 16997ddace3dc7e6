"""A small fake of memledger's HTTP API for the MCP server's unit tests (httpx.MockTransport):
spaces, memories and their lifecycle, feedback, batches, sessions and messages, entities and
relations, listings, policies, stats, search and context, the item reads and the changes
feed, with global positions. Every request is recorded. Answers are built from the client's
own models, so their shapes are the server's."""

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
from memledger_client.results import (
    AgentList,
    AgentSummary,
    Basis,
    Conversation,
    Entity,
    Message,
    Neighbour,
    Neighbours,
    PolicyHistory,
    PolicyVersion,
    Relation,
    SessionList,
    SessionSummary,
    SpaceList,
    SpaceStats,
    SpaceSummary,
)

NOW = "2026-01-01T00:00:00Z"
ID = r"([\w-]+)"
Handler = Callable[..., httpx.Response]

EVENTS = {"revise": "memory.revised", "retract": "memory.retracted",
          "promote": "memory.promoted", "archive": "memory.archived"}
ITEM: dict[str, Any] = {
    "status": "active", "triple": None, "confidence": 1.0, "importance": 0.5, "sources": [],
    "valid_from": NOW, "valid_to": None, "session_id": None, "agent_id": None}


class FakeMemledger:
    def __init__(self) -> None:
        self.spaces: dict[str, dict[str, Any]] = {}
        self.items: dict[str, dict[str, Any]] = {}
        self.sessions: dict[str, dict[str, Any]] = {}
        self.messages: list[dict[str, Any]] = []
        self.entities: dict[str, dict[str, Any]] = {}
        self.relations: dict[str, dict[str, Any]] = {}
        self.agents: dict[str, dict[str, Any]] = {}
        self.policies: list[dict[str, Any]] = []
        self.changes: list[dict[str, Any]] = []
        self.requests: list[httpx.Request] = []
        self.audit_fails = False
        """Audited searches fail as where the query service cannot record them."""
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

    def sent(self, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path == path]

    def body(self, path: str) -> dict[str, Any]:
        """The JSON body of the last POST to ``path``."""
        posts = [r for r in self.sent(path) if r.method == "POST"]
        found: dict[str, Any] = json.loads(posts[-1].content)
        return found

    def record(self, event_type: str, space: str, subject: str, **payload: Any) -> int:
        position = len(self.changes) + 1
        self.changes.append({"position": position, "recorded_at": NOW, "event_type": event_type,
                             "event_id": f"e{position}", "subject": subject, "space_id": space,
                             "actor": "http", "reason": payload.get("reason"),
                             "valid_from": None, "valid_to": None, "payload": payload})
        return position

    def basis(self) -> Basis:
        return Basis(position=len(self.changes), recorded_at=None, valid_at=NOW)

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

    # --- reads --------------------------------------------------------------------------------

    def list_spaces(self, **_: Any) -> httpx.Response:
        return ok(SpaceList(basis=self.basis(), next_cursor=None, spaces=[
            SpaceSummary(space_id=s, name=v["name"], description=None, status="active",
                         policy_version=0, created_position=v["position"], created_at=None)
            for s, v in sorted(self.spaces.items())]))

    def list_agents(self, **_: Any) -> httpx.Response:
        return ok(AgentList(basis=self.basis(), next_cursor=None, agents=[
            AgentSummary(agent_id=a, name=v.get("name"), description=None, registered_at=None,
                         position=1) for a, v in sorted(self.agents.items())]))

    def list_sessions(self, space: str, **_: Any) -> httpx.Response:
        if space not in self.spaces:
            return error(404, f"space {space!r} not found")
        return ok(SessionList(basis=self.basis(), next_cursor=None, sessions=[
            SessionSummary(session_id=s, space_id=space, title=v["title"],
                           agent_id=v["agent_id"], status=v["status"], started_at=NOW,
                           ended_at=None, messages=len(self._said(s)), participants=[],
                           first_said_at=None, last_said_at=None)
            for s, v in self.sessions.items() if v["space_id"] == space]))

    def conversation(self, space: str, session: str, **_: Any) -> httpx.Response:
        if session not in self.sessions:
            return error(404, f"session {session!r} not found in {space!r}")
        return ok(Conversation(basis=self.basis(), session_id=session,
                               status=self.sessions[session]["status"], messages=[
            Message(message_id=m["message_id"], session_id=session, position=m["position"],
                    role=m["role"], content=m["content"], participant=m.get("participant"),
                    agent_id=None, recorded_at=NOW, said_at=m.get("said_at") or NOW)
            for m in self._said(session)]))

    def _said(self, session: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["session_id"] == session]

    def neighbours(self, space: str, entity: str, **_: Any) -> httpx.Response:
        if entity not in self.entities:
            return error(404, f"entity {entity!r} not found in space {space!r} as of 1")
        live = {r: v for r, v in self.relations.items() if v["status"] == "active"
                and entity in (v["source_entity"], v["target_entity"])}
        others = {v["target_entity"] if v["source_entity"] == entity else v["source_entity"]
                  for v in live.values()}
        return ok(Neighbours(
            basis=self.basis(), entity=self._entity(entity),
            neighbours=[Neighbour(**self._entity(o).model_dump(), depth=1) for o in others],
            relations=[Relation(relation_id=r, source_entity=v["source_entity"],
                                relation_type=v["relation_type"],
                                target_entity=v["target_entity"], confidence=1.0,
                                status="active") for r, v in live.items()]))

    def _entity(self, entity: str) -> Entity:
        found = self.entities[entity]
        return Entity(entity_id=entity, name=found["name"], type=found["type"],
                      aliases=found.get("aliases", []))

    def list_policies(self, space: str, **_: Any) -> httpx.Response:
        if space not in self.spaces:
            return error(404, f"space {space!r} not found")
        return ok(PolicyHistory(basis=self.basis(), space_id=space, versions=[
            PolicyVersion(**p) for p in self.policies]))

    def stats(self, space: str, **_: Any) -> httpx.Response:
        if space not in self.spaces:
            return error(404, f"space {space!r} not found")
        kinds: dict[str, dict[str, int]] = {}
        for item in self.items.values():
            by_status = kinds.setdefault(item["kind"], {})
            by_status[item["status"]] = by_status.get(item["status"], 0) + 1
        return ok(SpaceStats(basis=self.basis(), space_id=space, items=kinds, tags={},
                             sessions={"active": len(self.sessions)},
                             messages=len(self.messages), entities=len(self.entities),
                             relations={"active": len(self.relations)}))

    def search(self, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        if body.get("audit") and self.audit_fails:
            return error(503, "the retrieval could not be recorded", code="audit_failed")
        words = set(body["query"].lower().split())
        hits = [{**i, "layer": "filtered", "score": 0.5, "relevance": 0.5, "valid_from": 0.0,
                 "valid_to": None} for i in self.items.values()
                if words & set(i["content"].lower().split()) and i["status"] == "active"]
        audited = str(uuid.uuid4()) if body.get("audit") else None
        return httpx.Response(200, json={
            "basis": self.basis().model_dump(mode="json"), "mode": body.get("mode"),
            "threshold": 0.25, "model": "fake", "results": hits, "collapsed": {},
            "retrieval_id": audited})

    def context(self, *, body: dict[str, Any], **_: Any) -> httpx.Response:
        if body["space_id"] not in self.spaces:
            return error(404, f"space {body['space_id']!r} not found")
        lines = "\n".join(f"- [{i['kind']}] {i['content']}" for i in self.items.values())
        return httpx.Response(200, json={
            "basis": self.basis().model_dump(mode="json"), "budget_tokens": body["budget_tokens"],
            "used_tokens": 9, "tokenizer": "chars/4", "query": body.get("query"),
            "sections": [], "rendered": f"## Recent history\n{lines}"})

    def item(self, space: str, item_id: str, **_: Any) -> httpx.Response:
        if item_id not in self.items:
            return error(404, f"memory item {item_id!r} not found in space {space!r}")
        return httpx.Response(200, json={"basis": self.basis().model_dump(mode="json"),
                                         "item": self.items[item_id]})

    def list_items(self, space: str, *, params: httpx.QueryParams, **_: Any) -> httpx.Response:
        after, kinds = params.get("after", ""), params.get_list("kind")
        found = sorted((i for i in self.items.values() if i["space_id"] == space
                        and i["item_id"] > after and i["status"] == "active"
                        and (not kinds or i["kind"] in kinds)), key=lambda i: i["item_id"])
        return httpx.Response(200, json={"basis": self.basis().model_dump(mode="json"),
                                         "items": found[:int(params.get("limit", "100"))]})

    def history(self, space: str, item_id: str, **_: Any) -> httpx.Response:
        if item_id not in self.items:
            return error(404, f"memory item {item_id!r} not found in {space!r}")
        return httpx.Response(200, json={
            "basis": self.basis().model_dump(mode="json"), "item_id": item_id,
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


def ok(answer: Any) -> httpx.Response:
    return httpx.Response(200, json=answer.model_dump(mode="json"))


def written(position: int, ids: dict[str, str]) -> httpx.Response:
    return httpx.Response(201, json={"command": "x", "event_ids": [f"e{position}"],
                                     "position": position, "positions": [position],
                                     "stream_version": 1, "ids": ids, "duplicate": False})


def error(status: int, message: str, path: str | None = None, code: str | None = None
          ) -> httpx.Response:
    fields = [{"path": path, "reason": message}] if path else []
    code = code or {404: "not_found", 409: "conflict", 422: "invalid_request"}[status]
    return httpx.Response(status, json={"error": {"status": status, "code": code,
                                                  "message": message, "fields": fields}})


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
