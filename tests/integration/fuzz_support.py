"""Schemathesis against an ASGI app, run on the test's own event loop.

Schemathesis loads the schema from the app (``from_asgi``) and generates the cases; the requests
are sent here with httpx's ASGI transport (rather than ``case.call``, whose test client runs the
app on an event loop of its own, not the one the app's writer and readers were started on), and
each response is checked by Schemathesis: never a 5xx, status code and body as documented.
Bounded and repeatable: a fixed number of examples per operation, derandomized.
"""

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]
"""Schemathesis' own checks; 5xx are checked by ``server_error`` (which knows the one 5xx that is
an answer: a read-your-writes wait that ran out, 503 ``not_yet_visible``, documented)."""


@dataclass
class FuzzRun:
    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def cases(schema: Any, positive: int, negative: int) -> Iterator[Case[Any]]:
    """Up to ``positive`` cases per operation that the schema allows and ``negative`` ones it
    does not (wrong types, missing fields, bad formats), the same ones every run."""
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode, examples in ((GenerationMode.POSITIVE, positive),
                               (GenerationMode.NEGATIVE, negative)):
            yield from _draw(operation.as_strategy(generation_mode=mode), examples)


def _draw(strategy: st.SearchStrategy[Case[Any]], examples: int) -> list[Case[Any]]:
    drawn: list[Case[Any]] = []

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case: Case[Any]) -> None:
        drawn.append(case)

    # Unsatisfiable: nothing to break (an operation without parameters): no negative case.
    with contextlib.suppress(Unsatisfiable):
        collect()
    return drawn


async def run(client: httpx.AsyncClient, found: Iterator[Case[Any]],
              adjust: Callable[[Case[Any]], None] = lambda case: None) -> FuzzRun:
    """Send every case, check every response; collect what failed with the request."""
    outcome = FuzzRun()
    for case in found:
        adjust(case)
        kwargs = case.as_transport_kwargs(base_url=str(client.base_url))
        response = await client.request(**_httpx_kwargs(kwargs))
        outcome.requests += 1
        outcome.statuses[response.status_code] = outcome.statuses.get(
            response.status_code, 0) + 1
        try:
            server_error(response)
            case.validate_response(response, checks=CHECKS)
        except (AssertionError, BaseExceptionGroup) as failure:  # a check failed
            outcome.failures.append(f"{case.as_curl_command()}\n -> {response.status_code} "
                                    f"{response.text[:300]}\n{str(failure)[:600]}")
    return outcome


class Answer(Protocol):
    """A response as either transport has it (httpx's, Schemathesis')."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...


def server_error(response: Answer) -> None:
    if response.status_code < 500:
        return
    waited = response.status_code == 503 and "not_yet_visible" in response.text
    assert waited, f"server error {response.status_code}"


def _httpx_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Schemathesis' transport arguments (requests' names) as httpx's."""
    found = {k: v for k, v in kwargs.items() if k in (
        "method", "url", "headers", "params", "json", "content")}
    if "data" in kwargs:
        found["content"] = kwargs["data"]
    return found


def load(path: str, app: Any) -> Any:
    return schemathesis.openapi.from_asgi(path, app)
