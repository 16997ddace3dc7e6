"""The state of the fake HTTP API of ``mcp_fake`` (what was written, every request), its read
routes, and how it answers. Answers are built from the client's own models, so their shapes
are the server's."""

import json
import uuid
from typing import Any

import httpx

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


class FakeReads:
    def __init__(self) -> None:
        self.spaces: dict[str, dict[str, Any]] = {}
        self.items: dict[str, dict[str, Any]] = {}
        self.sessions: dict[str, dict[str, Any]] = {}
        self.messages: list[dict[str, Any]] = []
        self.entities: dict[str, dict[str, Any]] = {}
        self.relations: dict[str, dict[str, Any]] = {}
        self.theme_list: list[dict[str, Any]] = []
        self.agents: dict[str, dict[str, Any]] = {}
        self.policies: list[dict[str, Any]] = []
        self.changes: list[dict[str, Any]] = []
        self.requests: list[httpx.Request] = []
        self.audit_fails = False
        self.embedder_down = False
        """Search answers as the server does without its embedder (keywords alone)."""
        """Audited searches fail as where the query service cannot record them."""

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
            "retrieval_id": audited, **({"degraded": ["embedder"], "ranking": "keyword"}
                                        if self.embedder_down else {})})

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

    def profile(self, space: str, subject: str, **_: Any) -> httpx.Response:
        if space not in self.spaces:
            return error(404, f"space {space!r} not found")
        about = [i for i in self.items.values() if i["space_id"] == space
                 and i["status"] == "active" and i["kind"] in ("fact", "preference")
                 and (i["triple"] or {}).get("subject", "").casefold() == subject.casefold()]
        return httpx.Response(200, json={"basis": self.basis().model_dump(mode="json"),
                                         "space_id": space, "subject": subject,
                                         "facts": about})

    def themes(self, space: str, **_: Any) -> httpx.Response:
        if space not in self.spaces:
            return error(404, f"space {space!r} not found")
        return httpx.Response(200, json={"basis": self.basis().model_dump(mode="json"),
                                         "space_id": space, "themes": self.theme_list})

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
