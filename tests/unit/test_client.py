"""The Python client against a scripted HTTP server (httpx.MockTransport): routes, idempotency
keys across retries, backoff, read-your-writes, error mapping. No network."""

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from memledger_client import (
    NO_RETRY,
    AsyncClient,
    Client,
    Conflict,
    Forbidden,
    InvalidRequest,
    MemledgerError,
    NotFound,
    NotYetVisible,
    RateLimited,
    RetryPolicy,
    Unauthorized,
    Unavailable,
    Unreachable,
)
from memledger_client.retry import retry_after
from memledger_schemas.commands import AssertMemory, CreateSpace, SetSpacePolicy, UpsertEntity

ITEM = "0190a000-0000-7000-8000-00000000a11c"
Reply = httpx.Response | Exception
Handler = Callable[[httpx.Request], Reply]


def written(position: int, command: str = "assert_memory") -> httpx.Response:
    return httpx.Response(201, json={
        "command": command, "event_ids": [f"e{position}"], "position": position,
        "positions": [position], "stream_version": 1, "ids": {"item_id": ITEM},
        "duplicate": False})


def problem(status: int, code: str, message: str = "no", **extra: Any) -> httpx.Response:
    return httpx.Response(status, json={"error": {"status": status, "code": code,
                                                  "message": message, "fields": [], **extra}})


BASIS: dict[str, Any] = {"position": 7, "recorded_at": None, "valid_at": "2026-01-01T00:00:00Z"}
ITEM_BODY: dict[str, Any] = {
    "item_id": ITEM, "space_id": "demo", "kind": "fact", "status": "active",
    "content": "The sky is blue", "triple": None, "confidence": 1.0, "importance": 0.5,
    "tags": [], "sources": [], "valid_from": "2026-01-01T00:00:00Z", "valid_to": None,
    "known_since_position": 7, "session_id": None, "agent_id": None}


class Server:
    """Answers with ``replies`` in turn (the last one repeats) and records every request."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []
        self.delays: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.content]

    def client(self, **options: Any) -> Client:
        return Client("http://memledger.test", transport=httpx.MockTransport(self),
                      sleep=self.delays.append, **options)


@pytest.fixture
def no_jitter() -> RetryPolicy:
    return RetryPolicy(attempts=4, backoff=0.1, jitter=False)


# --- writes -----------------------------------------------------------------------------------

def test_a_write_posts_its_command_to_the_route_with_a_generated_idempotency_key() -> None:
    server = Server(written(3))
    with server.client(tenant="acme", api_key="mlk_k_s") as client:
        result = client.assert_memory("demo", "The sky is blue", kind="fact", tags=["sky"])
    request, body = server.requests[0], server.bodies()[0]
    assert (request.method, request.url.path) == ("POST", "/v1/spaces/demo/memories")
    assert request.headers["X-Memledger-Tenant"] == "acme"
    assert request.headers["Authorization"] == "Bearer mlk_k_s"
    assert body["content"] == "The sky is blue"
    assert body["tags"] == ["sky"]
    assert body["idempotency_key"].startswith("mlc-")
    assert (result.position, result.item_id) == (3, ITEM)


def test_every_command_model_goes_to_its_own_route_through_send() -> None:
    server = Server(written(4, "upsert_entity"))
    with server.client() as client:
        client.send(UpsertEntity(space_id="demo", entity_id="person:alice", name="Alice",
                                 type="person"))
    assert server.requests[0].url.path == "/v1/spaces/demo/entities"


def test_a_retried_write_reuses_its_idempotency_key_and_the_next_call_gets_a_new_one(
        no_jitter: RetryPolicy) -> None:
    server = Server(problem(503, "unavailable"), httpx.ConnectError("refused"), written(5),
                    written(6))
    with server.client(retry=no_jitter) as client:
        client.create_space("demo")
        client.create_space("other")
    keys = [body["idempotency_key"] for body in server.bodies()]
    assert keys[0] == keys[1] == keys[2]
    assert keys[3] != keys[0]
    assert server.delays == [0.1, 0.2]


def test_a_policy_update_sends_only_the_fields_it_names_so_the_rest_are_kept() -> None:
    server = Server(written(2, "set_space_policy"), httpx.Response(201, json={
        "position": 3, "results": [written(3, "set_space_policy").json()]}))
    with server.client() as client:
        client.send(SetSpacePolicy(space_id="demo", audit_retrievals=True, max_items=None))
        client.batch([SetSpacePolicy(space_id="demo", forget_below=0.2)])
    single, batch = server.bodies()
    assert single.keys() == {"command", "space_id", "audit_retrievals", "max_items",
                             "idempotency_key"}
    assert single["max_items"] is None  # named: cleared
    assert batch["commands"][0].keys() == {"command", "space_id", "forget_below",
                                           "idempotency_key"}


def test_an_idempotency_key_given_by_the_caller_is_kept() -> None:
    server = Server(written(2))
    with server.client() as client:
        client.send(CreateSpace(space_id="demo", idempotency_key="mine-1"))
    assert server.bodies()[0]["idempotency_key"] == "mine-1"


def test_a_batch_gives_each_command_its_own_key_and_reports_the_last_position() -> None:
    server = Server(httpx.Response(201, json={"position": 9, "results": [
        written(8).json(), written(9).json()]}))
    with server.client() as client:
        result = client.batch([CreateSpace(space_id="demo"), AssertMemory(
            space_id="demo", kind="fact", content="x")])
        assert client.position == 9
    keys = [c["idempotency_key"] for c in server.bodies()[0]["commands"]]
    assert len(set(keys)) == 2
    assert result.results[1].position == 9


def test_an_invalid_shortcut_call_fails_before_any_request_naming_the_field() -> None:
    server = Server(written(1))
    with server.client() as client, pytest.raises(InvalidRequest) as raised:
        client.assert_memory("demo", "", importance=3.0)
    assert {f.path for f in raised.value.fields} == {"content", "importance"}
    assert server.requests == []


# --- retries ----------------------------------------------------------------------------------

def test_429_waits_as_long_as_retry_after_says(no_jitter: RetryPolicy) -> None:
    server = Server(httpx.Response(429, headers={"Retry-After": "2"}), written(1))
    with server.client(retry=no_jitter) as client:
        client.create_space("demo")
    assert server.delays == [2.0]


@pytest.mark.parametrize("status", [502, 503, 504])
def test_gateway_and_unavailable_answers_are_retried_with_exponential_backoff(
        status: int, no_jitter: RetryPolicy) -> None:
    server = Server(httpx.Response(status, text="<html>bad gateway</html>"))
    with server.client(retry=no_jitter) as client, pytest.raises(Unavailable) as raised:
        client.health()
    assert len(server.requests) == 4
    assert server.delays == [0.1, 0.2, 0.4]
    assert raised.value.status == status
    assert raised.value.code == f"http_{status}"


@pytest.mark.parametrize("status", [400, 404, 409, 422])
def test_refusals_are_not_retried(status: int) -> None:
    server = Server(problem(status, "refused"))
    with server.client() as client, pytest.raises(MemledgerError):
        client.create_space("demo")
    assert len(server.requests) == 1


def test_no_answer_after_every_attempt_is_unreachable(no_jitter: RetryPolicy) -> None:
    server = Server(httpx.ConnectError("connection refused"))
    with server.client(retry=no_jitter) as client, pytest.raises(Unreachable) as raised:
        client.health()
    assert len(server.requests) == 4
    assert raised.value.status is None
    assert "memledger.test" in raised.value.message


def test_backoff_has_full_jitter_below_a_cap() -> None:
    policy = RetryPolicy(backoff=1.0, max_backoff=3.0)
    delays = [policy.delay(attempt) for attempt in (1, 2, 3, 4, 5) for _ in range(50)]
    assert min(delays) >= 0
    assert max(delays) <= 3.0
    assert policy.delay(1, retry_after=500) == policy.max_retry_after


def test_retry_after_may_be_an_http_date() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    response = httpx.Response(429, headers={"Retry-After": format_datetime(
        now + timedelta(seconds=30), usegmt=True)})
    assert retry_after(response, now) == 30.0
    assert retry_after(httpx.Response(429, headers={"Retry-After": "soon"}), now) is None


# --- read-your-writes -------------------------------------------------------------------------

def item_answer() -> httpx.Response:
    return httpx.Response(200, json={"basis": BASIS, "item": ITEM_BODY})


def test_reads_wait_for_the_highest_position_the_clients_writes_returned() -> None:
    server = Server(written(7), written(5), item_answer())
    with server.client() as client:
        client.create_space("demo")
        client.assert_memory("demo", "The sky is blue")
        answer = client.item("demo", ITEM)
        assert client.position == 7
    assert server.requests[2].url.params["min_position"] == "7"
    assert answer.item.content == "The sky is blue"


def test_read_your_writes_can_be_turned_off_per_call_or_per_client() -> None:
    server = Server(written(7), item_answer(), item_answer(), written(7), item_answer())
    with server.client() as client:
        client.create_space("demo")
        client.item("demo", ITEM, min_position=None)
        client.item("demo", ITEM, min_position=3, valid_at=datetime(2026, 1, 1, tzinfo=UTC))
    with server.client(read_your_writes=False) as client:
        client.create_space("demo")
        client.item("demo", ITEM)
    params = [r.url.params for r in server.requests if r.method == "GET"]
    assert [p.get("min_position") for p in params] == [None, "3", None]
    assert params[1]["valid_at"] == "2026-01-01T00:00:00+00:00"


def test_search_and_context_carry_min_position_in_their_body() -> None:
    search = {"basis": BASIS, "mode": "planning", "threshold": 0.25, "model": "m",
              "results": [], "collapsed": {}}
    context = {"basis": BASIS, "budget_tokens": 100, "used_tokens": 0, "tokenizer": "chars/4",
               "query": None, "sections": [], "rendered": ""}
    server = Server(written(11), httpx.Response(200, json=search),
                    httpx.Response(200, json=context))
    with server.client() as client:
        client.create_space("demo")
        client.search("sky", spaces=["demo"], mode="execution")
        client.context("demo", budget_tokens=100)
    _, searched, contexted = server.bodies()
    assert searched == {"query": "sky", "spaces": ["demo"], "mode": "execution",
                        "min_position": 11}
    assert contexted == {"space_id": "demo", "budget_tokens": 100, "min_position": 11}


def test_the_changes_feed_is_followed_by_its_cursor_to_the_end() -> None:
    def page(positions: list[int], cursor: str) -> httpx.Response:
        return httpx.Response(200, json={"next_cursor": cursor, "position": 3, "changes": [
            {"position": p, "recorded_at": "2026-01-01T00:00:00Z", "event_type": "x",
             "event_id": f"e{p}", "subject": "s", "space_id": "demo", "actor": None,
             "reason": None, "valid_from": None, "valid_to": None, "payload": {}}
            for p in positions]})

    server = Server(page([1, 2], "c2"), page([3], "c3"), page([], "c3"))
    with server.client() as client:
        seen = [c.position for c in client.iter_changes("demo", limit=2)]
    assert seen == [1, 2, 3]
    assert [r.url.params.get("after") for r in server.requests] == [None, "c2", "c3"]
    assert server.requests[0].url.path == "/v1/spaces/demo/changes"


def test_list_filters_use_the_query_parameter_names_of_the_api() -> None:
    server = Server(httpx.Response(200, json={"basis": BASIS, "items": [ITEM_BODY]}))
    with server.client() as client:
        found = client.items("demo", kinds=["fact", "decision"], tags=["a"], limit=5)
    params = server.requests[0].url.params
    assert params.get_list("kind") == ["fact", "decision"]
    assert (params["tag"], params["limit"]) == ("a", "5")
    assert found.items[0].item_id == ITEM


# --- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("reply", "kind", "check"), [
    (httpx.Response(422, json={"error": {
        "status": 422, "code": "invalid_request", "message": "content: too short",
        "fields": [{"path": "content", "reason": "too short"}]}}),
     InvalidRequest, lambda e: e.fields[0].path == "content"),
    (problem(404, "not_found", "space 'nope' not found"), NotFound,
     lambda e: e.message == "space 'nope' not found"),
    (problem(409, "conflict", current_version=4), Conflict, lambda e: e.current_version == 4),
    (problem(503, "not_yet_visible", projected_position=12), NotYetVisible,
     lambda e: e.projected_position == 12),
    (httpx.Response(429, headers={"Retry-After": "1"}), RateLimited,
     lambda e: e.retry_after == 1.0),
    (problem(400, "invalid_cursor"), InvalidRequest, lambda e: e.code == "invalid_cursor"),
    (problem(401, "unauthenticated"), Unauthorized, lambda e: e.code == "unauthenticated"),
    (problem(403, "forbidden"), Forbidden, lambda e: e.code == "forbidden"),
    (httpx.Response(418, text="teapot"), MemledgerError, lambda e: e.message == "teapot"),
])
def test_error_bodies_become_exceptions_with_status_code_message_and_fields(
        reply: httpx.Response, kind: type[MemledgerError],
        check: Callable[[Any], bool]) -> None:
    server = Server(reply)
    with server.client(retry=NO_RETRY) as client, pytest.raises(kind) as raised:
        client.create_space("demo")
    assert type(raised.value) is kind
    assert raised.value.status == reply.status_code
    assert check(raised.value)


# --- async ------------------------------------------------------------------------------------

async def test_the_async_client_retries_with_the_same_key_and_reads_its_writes(
        no_jitter: RetryPolicy) -> None:
    async_server = Server(problem(502, "bad_gateway"), written(21), item_answer())
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    async with AsyncClient("http://memledger.test", retry=no_jitter, sleep=sleep,
                           transport=httpx.MockTransport(async_server)) as client:
        result = await client.assert_memory("demo", "The sky is blue")
        answer = await client.item("demo", ITEM)
    first, second = async_server.bodies()[:2]
    assert first["idempotency_key"] == second["idempotency_key"]
    assert (result.position, delays) == (21, [0.1])
    assert async_server.requests[2].url.params["min_position"] == "21"
    assert answer.basis.position == 7


def test_a_url_no_attempt_can_reach_is_unreachable_at_once() -> None:
    delays: list[float] = []
    with Client("ftp://memledger.test", sleep=delays.append) as client, \
            pytest.raises(Unreachable, match=r"ftp://memledger\.test"):
        client.health()
    assert delays == []


def test_listings_page_with_the_cursor_they_were_given() -> None:
    page: dict[str, Any] = {"basis": BASIS, "spaces": [], "next_cursor": None}
    agents: dict[str, Any] = {"basis": BASIS, "agents": [], "next_cursor": None}
    server = Server(httpx.Response(200, json=page), httpx.Response(200, json=agents),
                    httpx.Response(200, json={"receipts": []}))
    with server.client(read_your_writes=False) as client:
        assert client.spaces(limit=2, after="beta", status="active").next_cursor is None
        client.agents(as_of_position=7)
        client.erasures(limit=5)
    spaces, listed_agents, erasures = (r.url for r in server.requests)
    assert (spaces.path, dict(spaces.params)) == (
        "/v1/spaces", {"status": "active", "limit": "2", "after": "beta"})
    assert dict(listed_agents.params) == {"as_of_position": "7", "limit": "100"}
    assert (erasures.path, dict(erasures.params)) == ("/v1/erasures", {"limit": "5"})


async def test_a_spaces_stats_policies_and_an_entitys_neighbours_are_read_on_their_routes(
        ) -> None:
    stats: dict[str, Any] = {"basis": BASIS, "space_id": "demo", "items": {
        "fact": {"active": 2}}, "tags": {"sky": 2}, "sessions": {}, "messages": 0,
        "entities": 0, "relations": {}}
    policies: dict[str, Any] = {"basis": BASIS, "space_id": "demo", "versions": [
        {"policy_version": 1, "position": 3, "recorded_at": "2026-01-01T00:00:00Z",
         "actor": "key:k1", "policy": {"max_items": 10}}]}
    entity = {"entity_id": "wikidata/Q42", "name": "Douglas", "type": "person", "aliases": []}
    neighbours: dict[str, Any] = {"basis": BASIS, "entity": entity, "neighbours": [],
                                  "relations": []}
    server = Server(httpx.Response(200, json=stats), httpx.Response(200, json=policies),
                    httpx.Response(200, json=neighbours))
    async with AsyncClient("http://memledger.test", transport=httpx.MockTransport(server),
                           read_your_writes=False) as client:
        counted = await client.space_stats("demo")
        governing = await client.policies("demo", as_of_position=7)
        walked = await client.neighbours("demo", "wikidata/Q42", depth=2)
    assert (counted.items, counted.tags) == ({"fact": {"active": 2}}, {"sky": 2})
    assert governing.versions[-1].policy == {"max_items": 10}
    assert walked.entity.entity_id == "wikidata/Q42"
    stats_at, policies_at, neighbours_at = (r.url for r in server.requests)
    assert (stats_at.path, dict(stats_at.params)) == ("/v1/spaces/demo/stats", {})
    assert (policies_at.path, dict(policies_at.params)) == (
        "/v1/spaces/demo/policies", {"as_of_position": "7"})
    assert neighbours_at.raw_path == (
        b"/v1/spaces/demo/entities/wikidata%2FQ42/neighbours?depth=2")


def test_the_blocking_client_reads_the_same_routes() -> None:
    stats: dict[str, Any] = {"basis": BASIS, "space_id": "demo", "items": {}, "tags": {},
                             "sessions": {}, "messages": 0, "entities": 0, "relations": {}}
    server = Server(httpx.Response(200, json=stats), httpx.Response(
        200, json={"basis": BASIS, "space_id": "demo", "versions": []}))
    with server.client(read_your_writes=False) as client:
        assert client.space_stats("demo").messages == 0
        assert client.policies("demo").versions == []
    assert [r.url.path for r in server.requests] == ["/v1/spaces/demo/stats",
                                                     "/v1/spaces/demo/policies"]
