"""Tenant isolation as a whole matrix: every route of the served OpenAPI documents and every
method of the proto services (``isolation_cases``), against a running memledger with API keys
on (``isolation_system``), attacked six ways: with another tenant's key, with one's own key
naming another tenant, with a key lacking the space's grant, with a read-only key writing,
with a revoked key, and with no key. Each answer must be the expected refusal, or hold only the
caller's own data: no id, cursor, digest or text of the victim's appears in it (every such
string the victim's own reads show is looked for), and no write lands in the victim's tenant."""

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import grpc
import pytest

from memledger_platform.endpoints import Endpoints
from memledger_schemas.commands import BY_NAME, CreateSpace
from tests.integration.isolation_calls import (
    Answer,
    call_grpc,
    call_http,
    distinctive,
    leaks,
    strings_in,
)
from tests.integration.isolation_cases import (
    PUBLIC,
    GrpcCase,
    HttpCase,
    Unfillable,
    command_routes,
    grpc_cases,
    http_cases,
)
from tests.integration.isolation_system import (
    ATTACKER,
    GRPC_ATTACKER,
    SPACES,
    VICTIM,
    Owned,
    System,
    fill_of,
    populate,
    running,
    writer_of,
)

CONSOLE = frozenset({("GET", "/console"), ("GET", "/console/"), ("GET", "/console/{name}")})
"""Served but not in an OpenAPI document: the operator console's static page (no data)."""

Case = HttpCase | GrpcCase


@dataclass
class World:
    system: System
    channel: grpc.aio.Channel
    http: list[HttpCase]
    grpc: list[GrpcCase]
    secrets: set[str] = field(default_factory=set)
    """Every id, cursor, digest and text of the victim's (none of them the attacker's)."""
    side_secrets: set[str] = field(default_factory=set)
    """Those of the victim's second space only (a key granted "main" must see none)."""
    victim_events: list[tuple[str, str]] = field(default_factory=list)
    """The victim's events before the attacks (the enricher may add to them meanwhile)."""
    sent: dict[str | None, list[str]] = field(default_factory=dict)
    """Every write each key made: a key's writes that name the victim's ids keep them in its
    own tenant, and its reads may show them back."""


@pytest.fixture(scope="module")
async def world(engines: Endpoints, tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[World]:
    async with running(engines, tmp_path_factory.mktemp("isolation")) as system, \
            writer_of(system) as writer, grpc.aio.insecure_channel(system.grpc) as channel:
        for space in SPACES:
            await populate(system, writer, VICTIM, space)
        await populate(system, writer, ATTACKER, SPACES[0])
        await writer.submit(GRPC_ATTACKER, [CreateSpace(space_id=SPACES[0])])
        system.keys.revoke(system.tokens["victim_revoked"].split("_")[1], datetime.now(UTC))
        found = World(system, channel, *await _cases(system))
        await _collect_secrets(found)
        found.victim_events = _events(system, VICTIM)
        yield found


async def _cases(system: System) -> tuple[list[HttpCase], list[GrpcCase]]:
    async with system.client() as client:
        ingest = (await client.get("/openapi.json")).json()
        query = (await client.get("/v1/query/openapi.json")).json()
    cases = http_cases([(ingest, True), (query, False)])
    return cases, grpc_cases(cases)


async def _call(w: World, case: Case, owned: Owned, key: str | None,
                tenant: str | None = None) -> Answer:
    token = w.system.tokens[key] if key else None
    if isinstance(case, HttpCase):
        return await call_http(w.system, case, fill_of(owned), token, tenant)
    return await call_grpc(w.channel, case, fill_of(owned), token, tenant)


def _reads(w: World) -> list[Case]:
    return [*(c for c in w.http if not c.writes and not c.public),
            *(c for c in w.grpc if not c.writes)]


async def _seen(w: World, key: str, owned: Owned) -> set[str]:
    """Every string ``key``'s own reads of ``owned`` show (both APIs)."""
    found = set()
    for case in _reads(w):
        found |= strings_in((await _call(w, case, owned, key)).text)
    return found


def _owned(owned: Owned) -> set[str]:
    return {*owned.ids.values(), owned.cursor, owned.marker, owned.space}


async def _collect_secrets(w: World) -> None:
    main, side = (w.system.owned[(VICTIM, s)] for s in SPACES)
    victim_main = distinctive(await _seen(w, "victim", main), [main, side]) | _owned(main)
    victim_side = distinctive(await _seen(w, "victim", side), [main, side]) | _owned(side)
    attacker = w.system.owned[(ATTACKER, SPACES[0])]
    theirs = await _seen(w, "attacker", attacker) | _owned(attacker)
    w.secrets = (victim_main | victim_side) - theirs
    w.side_secrets = victim_side - victim_main - theirs


def _events(system: System, tenant: str) -> list[tuple[str, str]]:
    """(event type, actor) of every event of ``tenant``, in order."""
    return [(e.event_type, fields["actor"]) for e in system.store.read_all(0, 1_000_000)
            if (fields := e.fields())["tenant_id"] == tenant]


# --- the attacks --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Attack:
    key: str | None
    """The key's name in ``System.tokens`` (None: no key)."""
    target: tuple[str, str]
    """Whose things the requests name: (tenant, space)."""
    expected: Callable[[Case], set[int]]
    """The HTTP statuses a case may answer with (gRPC: their status codes)."""
    tenant: str | None = None
    """The tenant the request names in its header (metadata)."""
    side_only: bool = False
    """Look only for the strings of the victim's second space (the key may read "main")."""
    writes_only: bool = False

    def key_for(self, case: Case) -> str | None:
        # Another tenant attacks over gRPC from a tenant of its own (see GRPC_ATTACKER).
        return "grpc_attacker" if self.key == "attacker" and isinstance(
            case, GrpcCase) else self.key


def _own_tenant(_: Case) -> set[int]:
    # Another tenant's key acts in its own tenant: refused, not found, or its own data.
    return {200, 201, 403, 404, 409}


def _grant(case: Case) -> set[int]:
    if isinstance(case, GrpcCase) or case.names_a_space or case.writes:
        return {403}  # gRPC takes no key limited to some spaces
    return {200, 403, 404}


ATTACKS = {
    "another tenant's key": Attack("attacker", (VICTIM, "main"), _own_tenant),
    "one's own key naming another tenant": Attack("attacker", (VICTIM, "main"),
                                                 lambda _: {403}, tenant=VICTIM),
    "a key without the space's grant": Attack("victim_main_only", (VICTIM, SPACES[1]), _grant,
                                              side_only=True),
    "a read-only key writing": Attack("victim_reader", (VICTIM, "main"), lambda _: {403},
                                      writes_only=True),
    "a revoked key": Attack("victim_revoked", (VICTIM, "main"), lambda _: {401}),
    "no key": Attack(None, (VICTIM, "main"), lambda _: {401}),
}

GRPC_STATUS = {200: "OK", 201: "OK", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
               404: "NOT_FOUND", 409: "ABORTED"}


async def run_attack(w: World, attack: Attack, writes_only: bool = False) -> list[str]:
    """Every case under ``attack``: a line per answer that is not as expected."""
    secrets = w.side_secrets if attack.side_only else w.secrets
    failures = []
    every: list[Case] = [*(c for c in w.http if not c.public), *w.grpc]
    cases = sorted((c for c in every if c.writes or not (writes_only or attack.writes_only)),
                   key=lambda c: c.archives)
    for case in cases:
        key = attack.key_for(case)
        try:
            answer = await _call(w, case, w.system.owned[attack.target], key, attack.tenant)
        except Unfillable as unfillable:
            failures.append(str(unfillable))
            continue
        written = w.sent.setdefault(key, [])
        failures += _judged(case, answer, attack.expected(case), leaks(
            answer, secrets, "\n".join(written)))
        if case.writes and answer.status in ("200", "201", "OK"):
            written.append(answer.sent)
    return failures


def _judged(case: Case, answer: Answer, expected: set[int], leaked: list[str]) -> list[str]:
    statuses = {str(s) for s in expected} if isinstance(case, HttpCase) else {
        GRPC_STATUS[s] for s in expected}
    found = []
    if answer.status not in statuses:
        found.append(f"{case.name}: {answer.status}, expected one of {sorted(statuses)}: "
                     f"{answer.text[:300]}")
    if leaked:
        found.append(f"{case.name}: the victim's {leaked[:5]} in {answer.text[:300]}")
    return found


# --- the tests ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ATTACKS)
async def test_every_route_and_method_refuses_the_attack_or_answers_with_the_callers_own_data(
        world: World, name: str) -> None:
    failures = await run_attack(world, ATTACKS[name])
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)


async def test_the_public_routes_show_nothing_of_any_tenant(world: World) -> None:
    victim = world.system.owned[(VICTIM, "main")]
    for case in (c for c in world.http if c.public):
        answer = await _call(world, case, victim, None)
        assert answer.status == "200", (case.name, answer.text)
        assert not leaks(answer, world.secrets), case.name


def test_every_route_served_is_in_an_openapi_document(world: World) -> None:
    """So that the matrix, generated from the documents, has every route."""
    documented = {(c.method, c.path) for c in world.http}
    assert world.system.routes - documented - PUBLIC - CONSOLE == set()


def test_every_command_has_a_route_and_a_grpc_case(world: World) -> None:
    routes = {c.operation["operationId"] for c in command_routes(world.http)}
    submitted = {c.commands[0].operation["operationId"] for c in world.grpc
                 if c.method.name == "Submit"}
    assert routes == submitted == set(BY_NAME)


async def test_the_victims_own_reads_show_what_the_attacks_must_not_see(world: World) -> None:
    """The matrix can fail: the victim's own key, sent the same read requests, gets its data
    back on every route, and the strings looked for are in those answers."""
    victim = world.system.owned[(VICTIM, "main")]
    shown = [(case.name, answer.status, len(leaks(answer, world.secrets)))
             for case in _reads(world) if not getattr(case, "tenantless", False)
             for answer in [await _call(world, case, victim, "victim")]]
    blind = [s for s in shown if s[1] not in ("200", "OK") or not s[2]]
    assert blind == [], ("the victim's own reads of these show none of its data, so attacks "
                         "on them prove nothing: give the victim such data in "
                         f"isolation_system.commands_for, or a fill the route can use: {blind}")
    assert len(world.side_secrets) > 10


async def test_no_attack_wrote_into_the_victims_tenant(world: World) -> None:
    if not world.sent:  # run alone: make the attacks' writes first
        for attack in ATTACKS.values():
            await run_attack(world, attack, writes_only=True)
    attackers = {f"key:{token.split('_')[1]}" for name, token in world.system.tokens.items()
                 if name != "victim"}
    after = _events(world.system, VICTIM)
    assert after[:len(world.victim_events)] == world.victim_events
    assert [e for e in after[len(world.victim_events):] if e[1] in attackers] == []


async def test_a_key_limited_to_some_spaces_sees_only_their_vector_summaries(
        world: World) -> None:
    """The matrix found it: the summary listed every space of the tenant, with its points."""
    async with world.system.client(world.system.tokens["victim_main_only"]) as client:
        limited = (await client.get("/v1/query/vectors/summary")).json()
    async with world.system.client(world.system.tokens["victim"]) as client:
        whole = (await client.get("/v1/query/vectors/summary")).json()
    assert [s["space_id"] for s in limited["spaces"]] == ["main"]
    assert sorted(s["space_id"] for s in whole["spaces"]) == sorted(SPACES)


async def test_the_index_graph_is_told_to_admins_only(world: World) -> None:
    async with world.system.client(world.system.tokens["victim"]) as client:
        graph = (await client.get("/v1/query/vectors/graph")).json()
    async with world.system.client(world.system.tokens["victim_reader"]) as client:
        refused = await client.get("/v1/query/vectors/graph")
    assert graph["points"] >= graph["indexed"] >= 0
    assert refused.status_code == 403, refused.text


def test_a_route_the_tables_do_not_know_fails_the_matrix() -> None:
    document = {"paths": {"/v1/widgets/{widget_id}": {"get": {"parameters": [
        {"name": "widget_id", "in": "path", "required": True, "schema": {"type": "string"}}]}}}}
    [case] = http_cases([(document, False)])
    with pytest.raises(Unfillable, match=r"widget_id.*PATH_PARAMETERS"):
        case.request({"space_id": "main"})
