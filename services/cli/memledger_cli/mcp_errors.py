"""How a refusal reaches the agent: what was wrong, which argument, and what to call next.

A client error becomes a tool error (``failures``), a resource error (``resource_failures``)
or a protocol error for a prompt (``prompt_failures``); arguments that fail a tool's input
schema are told the same way (``bad_arguments``).
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import ValidationError

from memledger_client import (
    CircuitOpen,
    Conflict,
    Forbidden,
    InvalidRequest,
    MemledgerError,
    NotFound,
    NotYetVisible,
    RateLimited,
    Unauthorized,
    Unavailable,
    Unreachable,
)

log = logging.getLogger("memledger.mcp")

_WHERE = ("path.", "query.", "body.", "header.")
"""Where a field sat in the HTTP request: not what the agent called it."""


@contextmanager
def failures(tool: str, base_url: str, space: str) -> Iterator[None]:
    """A client error as a tool error the agent can act on."""
    try:
        yield
    except MemledgerError as error:
        log.info("tool %s refused: %s", tool, error)
        raise ToolError(explain(error, tool, base_url, space)) from error


@contextmanager
def resource_failures(uri: str, base_url: str, space: str) -> Iterator[None]:
    """A client error as a resource error (a missing space: not found)."""
    try:
        yield
    except MemledgerError as error:
        log.info("resource %s refused: %s", uri, error)
        kind = ResourceNotFoundError if isinstance(error, NotFound) else ResourceError
        raise kind(explain(error, uri, base_url, space)) from error


@contextmanager
def prompt_failures(prompt: str, base_url: str, space: str) -> Iterator[None]:
    """A client error, or arguments that fail ``prompt``'s checks, as a protocol error."""
    try:
        yield
    except ValidationError as error:
        raise MCPError(INVALID_PARAMS, bad_arguments(prompt, error, "get the prompt")
                       ) from error
    except MemledgerError as error:
        log.info("prompt %s refused: %s", prompt, error)
        code = INVALID_PARAMS if isinstance(error, InvalidRequest | NotFound) else (
            INTERNAL_ERROR)
        raise MCPError(code, explain(error, prompt, base_url, space)) from error


def explain(error: MemledgerError, name: str, base_url: str, space: str) -> str:
    """What was wrong with a call of ``name`` (a tool, resource or prompt), and what next."""
    if isinstance(error, InvalidRequest):
        code = "" if error.code == "invalid_request" else f" ({error.code})"
        return (f"Invalid arguments for {name}: {_fields(error)}{code}. Fix these arguments "
                f"and call it again.")
    return f"{error.message} ({error.code}). {next_step(error, base_url, space)}"


def next_step(error: MemledgerError, base_url: str, space: str) -> str:
    """What the agent can do about ``error``."""
    if isinstance(error, NotFound):
        return _find(error.message, space)
    steps: list[tuple[type[MemledgerError], str]] = [
        (Unreachable, f"memledger does not answer at {base_url}: start it (`memledger up`) "
                      "or set MEMLEDGER_URL, then call the tool again."),
        (NotYetVisible, "The write is committed but not readable yet: call the tool again in "
                        "a moment."),
        (CircuitOpen, "memledger failed several calls in a row: wait half a minute, then "
                      "call the tool again."),
        (RateLimited, "Too many requests: wait a few seconds, then call the tool again."),
        (Unavailable, "memledger is unavailable for now: call the tool again in a moment."),
        (Conflict, "The item changed meanwhile or is no longer active: read it again "
                   "(what_was_true or history), then decide."),
        (InvalidRequest, "Fix the arguments and call again."),
        (Unauthorized, "Set MEMLEDGER_API_KEY for the MCP server to a valid key."),
        (Forbidden, "The API key may not do this: use a key with the role and spaces needed "
                    "(list_spaces shows the spaces this key may use)."),
    ]
    return next((text for kind, text in steps if isinstance(error, kind)),
                "Check the arguments and call again.")


_FINDERS = (
    ("space", "Call list_spaces for the spaces there are (create_space makes one; the "
              "tools' default space, {space!r}, is created by the first remember)."),
    ("session", "Call list_sessions for the space's sessions (or start_session), and "
                "check the space."),
    ("entity", "Call link_entity to create it first (or related with an entity id that "
               "exists), and check the space."),
    ("relation", "relate gives relation ids, and related lists them: check the id and the "
                 "space."),
    ("retrieval", "Pass the retrieval_id a recall returned, or none."),
)


def _find(message: str, space: str) -> str:
    found = next((text for what, text in _FINDERS if message.startswith(what)), None)
    return (found or "Check the id (recall and what_was_true list item ids) and the space "
            "(the default is {space!r}; list_spaces lists them).").format(space=space)


def _fields(error: MemledgerError) -> str:
    named = [f"{_argument(f.path)}: {_reason(f.reason)}" for f in error.fields if f.path]
    return "; ".join(named) or _reason(error.message.removeprefix("body: "))


def _reason(text: str) -> str:
    return text.removeprefix("Value error, ")


def _argument(path: str) -> str:
    for where in _WHERE:
        if path.startswith(where):
            return path[len(where):]
    return path


def bad_arguments(name: str, error: ValidationError, then: str = "call it") -> str:
    """Arguments that fail an input schema, field by field, for a model to correct."""
    fields = "; ".join(_field(e) for e in error.errors(include_url=False))
    return (f"Invalid arguments for {name}: {fields}. Fix these arguments and {then} again "
            f"(the input schema describes each one).")


def _field(problem: Any) -> str:
    where = ".".join(str(part) for part in problem["loc"]) or "arguments"
    if problem["type"] == "missing":
        return f"{where}: required"
    given = repr(problem.get("input"))
    shown = given if len(given) <= 60 else given[:57] + "..."
    return f"{where}: {problem['msg']} (got {shown})"
