"""The MCP tools of the tenant's directory: list_spaces and create_space, list_agents and
register_agent."""

from typing import Annotated, Literal

from pydantic import Field

from memledger_cli.mcp_answers import POSITION, Answer
from memledger_cli.mcp_tools import ToolGroup
from memledger_client.results import AgentList, SpaceList
from memledger_client.writes import command
from memledger_schemas import commands as c
from memledger_schemas.types import SLUG_PATTERN

Slug = Annotated[str, Field(pattern=SLUG_PATTERN, description=(
    "letters, digits, '_' and '-' (at most 64)"))]
Cursor = Annotated[str | None, Field(max_length=256, description=(
    "next_cursor of the previous call: the page after it"))]
Limit = Annotated[int, Field(ge=1, le=1_000)]
Name = Annotated[str | None, Field(max_length=512)]
Description = Annotated[str | None, Field(max_length=65_536)]


class SpaceCreated(Answer):
    space_id: str
    position: int = Field(description=POSITION)


class AgentRegistered(Answer):
    agent_id: str
    position: int = Field(description=POSITION)


class DirectoryTools(ToolGroup):
    async def list_spaces(self, status: Literal["active", "archived"] | None = None,
                          limit: Limit = 100, cursor: Cursor = None) -> SpaceList:
        """The spaces this key may use, in id order (the tools' space argument names one;
        without it they use the server's space)."""
        with self._guard("list_spaces"):
            return await self.client.spaces(status=status, limit=limit, after=cursor)

    async def create_space(self, space_id: Slug, name: Name = None,
                           description: Description = None) -> SpaceCreated:
        """Create a space: a separate memory (its own items, conversations and policy)."""
        with self._guard("create_space"):
            result = await self._send(c.CreateSpace, space_id=space_id, name=name,
                                      description=description)
            return SpaceCreated(space_id=space_id, position=result.position)

    async def list_agents(self, limit: Limit = 100, cursor: Cursor = None) -> AgentList:
        """The agents registered in the tenant, in id order (needs a key for the whole
        tenant)."""
        with self._guard("list_agents"):
            return await self.client.agents(limit=limit, after=cursor)

    async def register_agent(self, agent_id: Slug, name: Name = None,
                             description: Description = None) -> AgentRegistered:
        """Register an agent by id, so others can find it with list_agents (writes name
        their agent with this id)."""
        with self._guard("register_agent"):
            result = await self.client.send(command(
                c.RegisterAgent, agent_id=agent_id, name=name, description=description))
            return AgentRegistered(agent_id=agent_id, position=result.position)
