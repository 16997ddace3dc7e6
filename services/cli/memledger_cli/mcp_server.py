"""``memledger mcp``: memledger's memory as tools for agents, over the Model Context Protocol
(stdio, the official ``mcp`` SDK). Each tool is one thin call to the Python client; a refusal
comes back as a tool error saying what to do next. Logs go to stderr only: stdout is the
protocol channel.

Settings (validated at start): ``MEMLEDGER_URL`` (default http://127.0.0.1:8420),
``MEMLEDGER_TENANT``, ``MEMLEDGER_API_KEY``, ``MEMLEDGER_SPACE`` (the space tools use when
given none; ``remember`` creates it on first use).
"""

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from memledger_cli.mcp_tools import Tools
from memledger_client import (
    DEFAULT_URL,
    AsyncClient,
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
from memledger_platform.settings import Settings, SettingsError
from memledger_schemas.types import Slug

log = logging.getLogger("memledger.mcp")

INSTRUCTIONS = """memledger is a long-term memory: every write is kept as an immutable event.
Use remember for facts, decisions, preferences and observations worth keeping; recall to find
what is known about something; get_context before answering in a conversation; what_changed_since
with the cursor it returned last time to catch up; what_was_true for the past (valid_at: when it
was true, as_of_position: what memledger knew then); history for how an item came to be; forget
to archive an item that is wrong or no longer wanted (history keeps it)."""

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
FORGET = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                         open_world_hint=False)


class McpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMLEDGER_", extra="ignore", frozen=True)

    url: str = Field(default=DEFAULT_URL, pattern=r"^https?://\S+$")
    tenant: Slug | None = None
    api_key: str | None = Field(default=None, repr=False)
    space: Slug = "default"


def load_mcp_settings(**overrides: Any) -> McpSettings:
    """From ``MEMLEDGER_*`` (and the command line); ``SettingsError`` names the variable."""
    try:
        return McpSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as error:
        names = ", ".join(f"MEMLEDGER_{'.'.join(map(str, e['loc'])).upper()}: {e['msg']}"
                          for e in error.errors())
        raise SettingsError(f"invalid settings: {names}") from None


def build_server(client: AsyncClient, space: str) -> MCPServer:
    """The MCP server over ``client`` (nothing is contacted until a tool is called)."""
    server = MCPServer("memledger", instructions=INSTRUCTIONS, version="1")
    tools = Tools(client, space, failures)
    server.add_tool(tools.remember, annotations=WRITE)
    for read in (tools.recall, tools.get_context, tools.what_changed_since,
                 tools.what_was_true, tools.history):
        server.add_tool(read, annotations=READ)
    server.add_tool(tools.forget, annotations=FORGET)
    return server


@contextmanager
def failures(tool: str, base_url: str, space: str) -> Iterator[None]:
    """A client error as a tool error the agent can act on."""
    try:
        yield
    except MemledgerError as error:
        log.info("tool %s refused: %s", tool, error)
        raise ToolError(f"{error.message} ({error.code}). {next_step(error, base_url, space)}"
                        ) from error


def next_step(error: MemledgerError, base_url: str, space: str) -> str:
    fields = "; ".join(f"{f.path}: {f.reason}" for f in error.fields)
    steps: list[tuple[type[MemledgerError], str]] = [
        (Unreachable, f"memledger does not answer at {base_url}: start it (`memledger up`) "
                      "or set MEMLEDGER_URL, then call the tool again."),
        (NotYetVisible, "The write is committed but not readable yet: call the tool again in "
                        "a moment."),
        (RateLimited, "Too many requests: wait a few seconds, then call the tool again."),
        (Unavailable, "memledger is unavailable for now: call the tool again in a moment."),
        (NotFound, f"Check the id (recall and what_was_true list ids) and the space (the "
                   f"default is {space!r}; spaces must exist)."),
        (Conflict, "The item changed meanwhile or is no longer active: read it again "
                   "(what_was_true or history), then decide."),
        (InvalidRequest, f"Fix these arguments and call again: {fields or error.message}."),
        (Unauthorized, "Set MEMLEDGER_API_KEY for the MCP server to a valid key."),
        (Forbidden, "The API key may not do this: use a key with the role and spaces needed."),
    ]
    return next((text for kind, text in steps if isinstance(error, kind)),
                "Check the arguments and call again.")


# --- the command --------------------------------------------------------------------------

def run_command(args: argparse.Namespace, _: Settings) -> int:
    try:
        settings = load_mcp_settings(url=args.url, tenant=args.tenant, space=args.space)
    except SettingsError as error:
        print(f"memledger: {error}", file=sys.stderr)
        return 2
    anyio.run(serve, settings)
    return 0


async def serve(settings: McpSettings) -> None:
    log.info("memledger mcp on stdio, for %s (space %s)", settings.url, settings.space)
    async with AsyncClient(settings.url, tenant=settings.tenant,
                           api_key=settings.api_key) as client:
        await build_server(client, settings.space).run_stdio_async()
