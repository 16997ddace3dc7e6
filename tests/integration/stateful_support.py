"""Schemathesis' stateful testing against a running server.

The two OpenAPI documents become one (the embedded mode serves both on one port), with the
write document's links (create a space → write in it → revise what was written) and links
from each write to the reads of what it wrote, waiting for its position (``min_position``).
A state machine follows them with an API key, in a worker thread (the server runs on the
test's event loop), and keeps every failure and every link it followed with its status.
"""

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import hypothesis
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Flaky
from schemathesis import Case
from schemathesis.config import SchemathesisConfig
from schemathesis.core.transport import Response
from schemathesis.engine.errors import is_inconsistent_replay
from schemathesis.generation.stateful.state_machine import (
    APIStateMachine,
    StepInput,
    StepOutput,
    release_state_machines,
)

from tests.integration import fuzz_support

QUERY = "Query"
"""Prefix of the query document's component names in the merged one (both have an
``ErrorBody``, not the same)."""
READ_AFTER = {
    # a write → the reads that show what it wrote (the query document's paths, GET)
    "assert_memory": ("/v1/spaces/{space_id}/items/{item_id}",
                      "/v1/spaces/{space_id}/items/{item_id}/history",
                      "/v1/spaces/{space_id}/items/{item_id}/chain"),
    "revise_memory": ("/v1/spaces/{space_id}/items/{item_id}",
                      "/v1/spaces/{space_id}/items/{item_id}/history"),
    "supersede_memory": ("/v1/spaces/{space_id}/items/{item_id}/chain",),
    "create_space": ("/v1/spaces/{space_id}/items", "/v1/spaces/{space_id}/changes",
                     "/v1/spaces/{space_id}/graph", "/v1/spaces/{space_id}/policies"),
    "start_session": ("/v1/spaces/{space_id}/sessions/{session_id}/messages",),
    "append_message": ("/v1/spaces/{space_id}/sessions/{session_id}/messages",),
}
EXPRESSIONS = {
    # a read's path parameter → where it comes from in a write's request or answer
    "space_id": ("$response.body#/ids/space_id", "$request.path.space_id"),
    "item_id": ("$response.body#/ids/item_id",),
    "session_id": ("$response.body#/ids/session_id", "$request.path.session_id"),
}


def merged(ingest: dict[str, Any], query: dict[str, Any]) -> dict[str, Any]:
    """One document of both, with links from writes to reads (``READ_AFTER``)."""
    renamed: dict[str, Any] = json.loads(json.dumps(query).replace(
        '"#/components/schemas/', f'"#/components/schemas/{QUERY}'))
    doc: dict[str, Any] = json.loads(json.dumps(ingest))
    for path, item in renamed["paths"].items():
        doc["paths"].setdefault(path, {}).update(item)
    doc["components"]["schemas"].update(
        {f"{QUERY}{name}": schema for name, schema in renamed["components"]["schemas"].items()})
    _link_reads(doc)
    return doc


def only(doc: dict[str, Any], links: dict[str, set[str]]) -> dict[str, Any]:
    """``doc`` with only ``links`` (operation id → the names of the links it keeps)."""
    kept: dict[str, Any] = json.loads(json.dumps(doc))
    for item in kept["paths"].values():
        for operation in item.values():
            for response in operation["responses"].values():
                found = response.get("links", {})
                response["links"] = {name: link for name, link in found.items()
                                     if name in links.get(operation["operationId"], set())}
    return kept


def _link_reads(doc: dict[str, Any]) -> None:
    operations = {op["operationId"]: op for item in doc["paths"].values()
                  for op in item.values()}
    for source, paths in READ_AFTER.items():
        committed = operations[source]["responses"]["201"]
        where = _path_of(doc, source)
        for path in paths:
            read = doc["paths"][path]["get"]
            committed.setdefault("links", {})[f"read {path}"] = {
                "operationId": read["operationId"],
                "parameters": {**{p: _expression(p, where) for p in _parameters(path)},
                               "min_position": "$response.body#/position"}}


def _path_of(doc: dict[str, Any], operation_id: str) -> str:
    return next(str(path) for path, item in doc["paths"].items()
                if any(op["operationId"] == operation_id for op in item.values()))


def _parameters(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _expression(parameter: str, source_path: str) -> str:
    """The answer's id when the write's answer names it, else the write's path parameter."""
    answer, *from_path = EXPRESSIONS[parameter]
    if from_path and f"{{{parameter}}}" in source_path:
        return from_path[0]
    return answer


@dataclass
class Walk:
    """What a stateful run did: requests, failures, and each (link, status) it followed."""

    scenarios: int = 0
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    followed: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    """(the operation linked from, the link's name, the status) → how often."""
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    """(operation, status) → how often."""

    def follow(self, transition: str, status: int) -> None:
        """Count a followed transition (Schemathesis names it ``<source> -> [<status>]
        <link> -> <target>``)."""
        source, rest = transition.split(" -> [", 1)
        link = rest.split("] ", 1)[1].rsplit(" -> ", 1)[0]
        self.followed[(source, link, status)] += 1

    def reached(self, source: str, link: str) -> bool:
        """Whether following ``link`` from ``source`` (``POST /v1/spaces``) got a 2xx."""
        return any(200 <= status < 300 for (s, name, status) in self.followed
                   if (s, name) == (source, link))


Check = Callable[[Case[Any], Response], None]


def walk(doc: dict[str, Any], url: str, key: str, scenarios: int, steps: int,
         adjust: Callable[[Case[Any]], None], check: Check) -> Walk:
    """Run ``scenarios`` scenarios of up to ``steps`` calls each, every call with ``key``,
    adjusted by ``adjust`` before it is sent and checked by ``check`` after Schemathesis' own
    checks. Blocking: run it in a thread.

    Repeatable as far as a live server allows: suites seeded 0, 1, 2… An answer differs from
    one scenario to the next (a space made by the first is a 409 to the second), so Hypothesis
    may find a scenario it generated before drawing differently and end the suite ("flaky");
    the next suite, with the next seed, goes on (as Schemathesis' own runner does)."""
    done = Walk()
    # The documents' links only: links Schemathesis infers from names (an agent's id into a
    # space's path) would spend the scenarios on requests that cannot succeed.
    schema = schemathesis.openapi.from_dict(doc, config=SchemathesisConfig.from_dict(
        {"phases": {"stateful": {"inference": {"algorithms": []}}}}))
    machine = _counted(_from_new_spaces(_machine(
        schema.as_state_machine(), url, key, adjust, _validator(done, check))), done)
    for seed in range(scenarios):
        if done.scenarios >= scenarios:
            break
        suite: Machine = hypothesis.seed(seed)(
            type(f"Suite{seed}", (machine,), {"rule_order_seed": seed}))
        try:
            suite.run(settings=settings(
                max_examples=scenarios - done.scenarios, stateful_step_count=steps,
                database=None, deadline=None, phases=[Phase.generate],
                suppress_health_check=list(HealthCheck)))
        except (Flaky, AssertionError) as error:
            if not isinstance(error, Flaky) and not is_inconsistent_replay(error):
                raise
        finally:
            release_state_machines(suite)
    return done


Machine = type[APIStateMachine]


def _from_new_spaces(machine: Machine) -> Machine:
    """Every scenario starts by creating a space (writes with made-up ids are the other
    fuzzing's: here they would only be 404s)."""
    first = "RANDOM__POST_v1_spaces"
    assert first in machine.root_rules, sorted(machine.root_rules)
    others = {name: None for name in machine.root_rules if name != first}
    return cast(Machine, type("FromNewSpaces", (machine,),
                              {**others, "root_rules": frozenset({first})}))


def _counted(machine: Machine, done: Walk) -> Machine:
    class Counted(machine):  # type: ignore[valid-type, misc]
        def step(self, input: StepInput) -> StepOutput:
            output: StepOutput = super().step(input)
            done.requests += 1
            done.statuses[(input.case.operation.label, output.response.status_code)] += 1
            if input.transition is not None and input.is_applied:
                done.follow(input.transition.id, output.response.status_code)
            return output

        def teardown(self) -> None:
            done.scenarios += 1
            super().teardown()

    return Counted


def _machine(base: Machine, url: str, key: str, adjust: Callable[[Case[Any]], None],
             validate: Callable[[Case[Any], Response], None]) -> Machine:
    class Locked(base):  # type: ignore[valid-type, misc]
        def before_call(self, case: Case[Any]) -> None:
            adjust(case)

        def get_call_kwargs(self, case: Case[Any]) -> dict[str, Any]:
            return {"base_url": url, "headers": {"authorization": f"Bearer {key}"},
                    "timeout": 300}

        def validate_response(self, response: Response, case: Case[Any],
                              additional_checks: Any = None, **kwargs: Any) -> None:
            validate(case, response)

    return Locked


def _validator(done: Walk, check: Check) -> Callable[[Case[Any], Response], None]:
    def validate(case: Case[Any], response: Response) -> None:
        try:
            fuzz_support.server_error(response)
            case.validate_response(response, checks=fuzz_support.CHECKS)
            check(case, response)
        except (AssertionError, BaseExceptionGroup) as failure:
            done.failures.append(f"{case.as_curl_command()}\n -> {response.status_code} "
                                 f"{response.text[:300]}\n{str(failure)[:600]}")

    return validate
