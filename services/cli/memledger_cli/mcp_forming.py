"""The MCP tools of what memory formed by itself: profile (what is believed about a person
or agent) and themes (what a space's memories are about)."""

from datetime import datetime
from typing import Annotated

from pydantic import Field

from memledger_cli.mcp_tools import Space, ToolGroup
from memledger_client.results import ProfileAnswer, ThemeList


class FormingTools(ToolGroup):
    async def profile(
        self, subject: Annotated[str, Field(min_length=1, max_length=512, description=(
            "a person's or agent's name, as the memories' triples name them"))],
        valid_at: Annotated[datetime | None, Field(description=(
            "what was believed to hold then (default: now; ISO 8601 with offset)"))] = None,
        space: Space = None) -> ProfileAnswer:
        """What is currently believed about a person or agent: the facts and preferences
        whose subject they are (a contradicted one is gone), each with its confidence and
        the messages or items it came from."""
        with self._guard("profile"):
            return await self.client.profile(self._space(space), subject, valid_at=valid_at)

    async def themes(self, space: Space = None) -> ThemeList:
        """The themes the space's memories form (groups close in meaning, labelled by their
        most telling words), the largest first; pass a theme_id to recall as theme."""
        with self._guard("themes"):
            return await self.client.themes(self._space(space))
