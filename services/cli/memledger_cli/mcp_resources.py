"""What the MCP server offers besides tools: resources an agent (or its host) reads as JSON,
``memledger://spaces``, ``memledger://spaces/{space}/policy`` and
``memledger://spaces/{space}/stats``; and the ``warm_start`` prompt, the context bundle of a
conversation ready to put in front of the model."""

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, ConfigDict, Field

from memledger_cli.mcp_answers import Answer
from memledger_cli.mcp_errors import prompt_failures, resource_failures
from memledger_cli.mcp_tools import ToolGroup
from memledger_client.results import Basis, PolicyHistory
from memledger_schemas.types import SLUG_PATTERN

SPACES = "memledger://spaces"
POLICY = "memledger://spaces/{space}/policy"
STATS = "memledger://spaces/{space}/stats"
JSON = "application/json"
_LISTED = 1_000
"""Spaces the spaces resource lists (the list_spaces tool pages through more)."""


class Policy(Answer):
    basis: Basis
    space_id: str
    policy_version: int = Field(description="0: no policy was ever set")
    policy: dict[str, Any] | None = Field(description="the governing version's settings")
    set_at_position: int | None
    recorded_at: datetime | None
    actor: str | None
    versions: int


class WarmStart(BaseModel):
    """The prompt's arguments (strings on the wire), checked as a tool's are."""

    model_config = ConfigDict(extra="forbid")
    session_id: UUID | None = None
    query: Annotated[str | None, Field(min_length=1, max_length=4_096)] = None
    budget_tokens: Annotated[int, Field(ge=16, le=100_000)] = 2_000
    space: Annotated[str | None, Field(pattern=SLUG_PATTERN)] = None


class Offerings(ToolGroup):
    """The resources and the prompt, over the same client and defaults as the tools."""

    def _read(self, uri: str) -> AbstractContextManager[None]:
        return resource_failures(uri, self.client.base_url, self.defaults.space)

    async def spaces(self) -> str:
        """The spaces this key may use (id, name, status, policy version), in id order."""
        with self._read(SPACES):
            return (await self.client.spaces(limit=_LISTED)).model_dump_json()

    async def policy(self, space: str) -> str:
        """The space's governing policy: retention and decay per kind, session ttl, maximum
        items, consolidation, audit, members; with its version and when it was set."""
        with self._read(POLICY.format(space=space)):
            return policy_of(await self.client.policies(space)).model_dump_json()

    async def stats(self, space: str) -> str:
        """What the space holds: items by kind and status, its most used tags, sessions,
        messages, entities and relations."""
        with self._read(STATS.format(space=space)):
            return (await self.client.space_stats(space)).model_dump_json()

    async def warm_start(self, session_id: str | None = None, query: str | None = None,
                         budget_tokens: str | None = None, space: str | None = None) -> str:
        """What memledger knows for this conversation, to start from: its recent turns,
        relevant memories, standing preferences and steering rules, recent history
        (budget_tokens: its size, default 2000; space: default the server's)."""
        given = {"session_id": session_id, "query": query, "budget_tokens": budget_tokens,
                 "space": space}
        with prompt_failures("warm_start", self.client.base_url, self.defaults.space):
            asked = WarmStart.model_validate({k: v for k, v in given.items() if v})
            target = self._space(asked.space)
            answer = await self.client.context(target, session_id=asked.session_id,
                                               query=asked.query,
                                               budget_tokens=asked.budget_tokens)
        return (f"memledger's briefing from space {target!r} (position "
                f"{answer.basis.position}, {answer.used_tokens} of {answer.budget_tokens} "
                f"tokens). Use it as background; call recall for more, and remember what is "
                f"worth keeping.\n\n{answer.rendered}")


def policy_of(history: PolicyHistory) -> Policy:
    """The last version governs: each names every setting (unnamed ones carried over)."""
    last = history.versions[-1] if history.versions else None
    return Policy(basis=history.basis, space_id=history.space_id,
                  policy_version=last.policy_version if last else 0,
                  policy=_settings(last.policy) if last else None,
                  set_at_position=last.position if last else None,
                  recorded_at=last.recorded_at if last else None,
                  actor=last.actor if last else None, versions=len(history.versions))


def _settings(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k not in ("space_id", "policy_version")}


def offer(server: MCPServer, offerings: Offerings) -> None:
    """Add the resources and the prompt to ``server``."""
    server.resource(SPACES, name="spaces", mime_type=JSON)(offerings.spaces)
    server.resource(POLICY, name="policy", mime_type=JSON)(offerings.policy)
    server.resource(STATS, name="stats", mime_type=JSON)(offerings.stats)
    server.prompt(name="warm_start", title="Warm start from memory")(offerings.warm_start)
