"""``memledger mcp``: memledger's memory as tools for agents, over the Model Context Protocol
(stdio, the official ``mcp`` SDK). Each tool is one thin call to the Python client; a refusal
comes back as a tool error saying what was wrong and what to do next (``mcp_errors``). Logs
go to stderr only: stdout is the protocol channel.

Settings (validated at start): ``MEMLEDGER_URL`` (default http://127.0.0.1:8420),
``MEMLEDGER_TENANT``, ``MEMLEDGER_API_KEY``, ``MEMLEDGER_SPACE`` (the space tools use when
given none; ``remember`` creates it on first use), ``MEMLEDGER_AGENT`` (the agent id the
server's writes carry).
"""

import argparse
import logging
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from memledger_cli.mcp_conversations import ConversationTools
from memledger_cli.mcp_directory import DirectoryTools
from memledger_cli.mcp_errors import bad_arguments, failures
from memledger_cli.mcp_forming import FormingTools
from memledger_cli.mcp_graph import GraphTools
from memledger_cli.mcp_prune import PruneTools
from memledger_cli.mcp_reads import ReadTools
from memledger_cli.mcp_resources import Offerings, offer
from memledger_cli.mcp_tools import Defaults, MemoryTools, ToolGroup
from memledger_client import DEFAULT_URL, AsyncClient
from memledger_platform.settings import Settings, SettingsError
from memledger_schemas.types import Slug

log = logging.getLogger("memledger.mcp")

INSTRUCTIONS = """memledger is a long-term memory: every write is kept as an immutable event.
Use remember for facts, decisions, preferences and observations worth keeping; recall to find
what is known about something, then feedback with its retrieval_id on what you used;
get_context (or the warm_start prompt) before answering in a conversation; revise, retract,
promote and forget to keep memory right; start_session and add_message to keep a conversation,
list_sessions and read_conversation to find one again; link_entity, relate and related for
who and what is connected; what_changed_since with the cursor it returned last time to catch
up; what_was_true for the past (valid_at: when it was true, as_of_position: what memledger
knew then); history for how an item came to be; prune (a dry run first) to forget many items
at once; profile for what is believed about a person or agent, themes for what a space's
memories are about. Resources: memledger://spaces, memledger://spaces/{space}/policy and
.../stats."""

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True,
                              open_world_hint=False)

TOOLS: tuple[tuple[type[ToolGroup], ToolAnnotations, tuple[str, ...]], ...] = (
    (MemoryTools, WRITE, ("remember", "revise", "promote", "feedback")),
    (MemoryTools, DESTRUCTIVE, ("retract", "forget")),
    (ReadTools, READ, ("recall", "get_context", "what_changed_since", "what_was_true",
                       "history")),
    (ConversationTools, WRITE, ("start_session", "add_message", "end_session")),
    (ConversationTools, READ, ("list_sessions", "read_conversation")),
    (GraphTools, WRITE, ("link_entity", "relate")),
    (GraphTools, DESTRUCTIVE, ("unrelate",)),
    (GraphTools, READ, ("related",)),
    (DirectoryTools, READ, ("list_spaces", "list_agents")),
    (DirectoryTools, WRITE, ("create_space", "register_agent")),
    (PruneTools, DESTRUCTIVE, ("prune",)),
    (FormingTools, READ, ("profile", "themes")),
)
"""Every tool: its group, what it does to memory, its name (the group's method)."""


class McpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMLEDGER_", extra="ignore", frozen=True)

    url: str = Field(default=DEFAULT_URL, pattern=r"^https?://\S+$")
    tenant: Slug | None = None
    api_key: str | None = Field(default=None, repr=False)
    space: Slug = "default"
    agent: Slug | None = None


def load_mcp_settings(**overrides: Any) -> McpSettings:
    """From ``MEMLEDGER_*`` (and the command line); ``SettingsError`` names the variable."""
    try:
        return McpSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as error:
        names = ", ".join(f"MEMLEDGER_{'.'.join(map(str, e['loc'])).upper()}: {e['msg']}"
                          for e in error.errors())
        raise SettingsError(f"invalid settings: {names}") from None


class MemledgerMcp(MCPServer):
    """The SDK's server, telling a model its argument mistakes field by field (an argument a
    tool does not take, since a silently ignored ``space_id`` would write to the default
    space, or one its input schema refuses), and a tool's refusals in the tool's own words."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None
                        ) -> CallToolResult | InputRequiredResult:
        await self._no_unknown(name, arguments)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            cause = error.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(bad_arguments(name, cause)) from cause
            if isinstance(cause, ToolError):
                raise cause from cause.__cause__  # our own words, without the SDK's prefix
            raise

    async def _no_unknown(self, name: str, arguments: dict[str, Any]) -> None:
        tool = next((t for t in await self.list_tools() if t.name == name), None)
        if tool is None:
            return  # the SDK says the tool is unknown
        known = set(tool.input_schema.get("properties", {}))
        unknown = sorted(set(arguments) - known)
        if unknown:
            raise ToolError(f"Invalid arguments for {name}: {', '.join(unknown)}: not an "
                            f"argument of {name} (it takes: {', '.join(sorted(known))}). "
                            "Fix these arguments and call it again.")


def build_server(client: AsyncClient, space: str, agent: str | None = None) -> MCPServer:
    """The MCP server over ``client`` (nothing is contacted until a tool is called)."""
    server = MemledgerMcp("memledger", instructions=INSTRUCTIONS, version="1")
    defaults = Defaults(space, agent)
    groups: dict[type[ToolGroup], ToolGroup] = {}
    for group, annotations, names in TOOLS:
        tools = groups.setdefault(group, group(client, defaults, failures))
        for name in names:
            server.add_tool(getattr(tools, name), annotations=annotations)
    offer(server, Offerings(client, defaults, failures))
    return server


# --- the command --------------------------------------------------------------------------

def run_command(args: argparse.Namespace, _: Settings) -> int:
    try:
        settings = load_mcp_settings(url=args.url, tenant=args.tenant, space=args.space,
                                     agent=args.agent)
    except SettingsError as error:
        print(f"memledger: {error}", file=sys.stderr)
        return 2
    anyio.run(serve, settings)
    return 0


async def serve(settings: McpSettings) -> None:
    log.info("memledger mcp on stdio, for %s (space %s)", settings.url, settings.space)
    async with AsyncClient(settings.url, tenant=settings.tenant,
                           api_key=settings.api_key) as client:
        await build_server(client, settings.space, settings.agent).run_stdio_async()
