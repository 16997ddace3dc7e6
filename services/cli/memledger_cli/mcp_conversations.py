"""The MCP tools of conversations: start_session, add_message and end_session to keep one;
list_sessions and read_conversation to find and read them back."""

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field

from memledger_cli.mcp_answers import POSITION, Answer
from memledger_cli.mcp_tools import Reason, Space, ToolGroup
from memledger_client.results import Conversation, SessionList
from memledger_schemas import commands as c
from memledger_schemas.events import Role

SessionId = Annotated[UUID, Field(description="the session's id (start_session and "
                                              "list_sessions give them)")]
Instant = Annotated[datetime | None, Field(description="ISO 8601 with offset")]


class SessionStarted(Answer):
    session_id: str = Field(description="pass it to add_message, remember, get_context...")
    space_id: str
    position: int = Field(description=POSITION)


class MessageAdded(Answer):
    message_id: str
    session_id: str
    position: int = Field(description=POSITION)


class SessionEnded(Answer):
    session_id: str
    position: int = Field(description=POSITION)


class ConversationTools(ToolGroup):
    async def start_session(
        self, title: Annotated[str | None, Field(max_length=512)] = None,
        space: Space = None) -> SessionStarted:
        """Start a conversation (a session): its messages and session memory are kept
        together, and get_context puts its recent turns first."""
        target = self._space(space)
        with self._guard("start_session"):
            result = await self._send(c.StartSession, space_id=target, title=title)
            return SessionStarted(session_id=result.ids["session_id"], space_id=target,
                                  position=result.position)

    async def add_message(
        self, session_id: SessionId, content: Annotated[str, Field(min_length=1)],
        role: Annotated[Role, Field(description="who speaks: user, assistant, system, "
                                                "tool")] = "user",
        participant: Annotated[str | None, Field(max_length=512, description=(
            "the speaker's name, if the role does not say enough"))] = None,
        said_at: Annotated[datetime | None, Field(description=(
            "when it was said, if not now (imported history; ISO 8601 with offset)"))] = None,
        space: Space = None) -> MessageAdded:
        """Add one turn to a conversation: recall finds it by meaning and words, and
        read_conversation shows it in order."""
        with self._guard("add_message"):
            result = await self._send(c.AppendMessage, space_id=self._space(space),
                                      session_id=session_id, role=role, content=content,
                                      participant=participant, said_at=said_at)
            return MessageAdded(message_id=result.ids["message_id"],
                                session_id=str(session_id), position=result.position)

    async def end_session(self, session_id: SessionId, reason: Reason = None,
                          space: Space = None) -> SessionEnded:
        """End a conversation (its session memory may then expire by the space's policy)."""
        with self._guard("end_session"):
            result = await self._send(c.EndSession, space_id=self._space(space),
                                      session_id=session_id, reason=reason)
            return SessionEnded(session_id=str(session_id), position=result.position)

    async def list_sessions(
        self, space: Space = None,
        agent_id: Annotated[str | None, Field(max_length=64, description=(
            "only sessions this agent started"))] = None,
        participant: Annotated[str | None, Field(max_length=512, description=(
            "only sessions where this participant said something"))] = None,
        status: Literal["active", "ended"] | None = None,
        started_from: Instant = None, started_to: Instant = None,
        limit: Annotated[int, Field(ge=1, le=1_000)] = 20,
        cursor: Annotated[str | None, Field(description=(
            "next_cursor of the previous call: the page after it"))] = None) -> SessionList:
        """The space's conversations, most recently started first, with their message
        counts, participants and when they were held."""
        with self._guard("list_sessions"):
            return await self.client.sessions(
                self._space(space), agent_id=agent_id, participant=participant, status=status,
                started_from=started_from, started_to=started_to, limit=limit, after=cursor)

    async def read_conversation(
        self, session_id: SessionId, space: Space = None,
        limit: Annotated[int, Field(ge=1, le=1_000)] = 200,
        as_of_position: Annotated[int | None, Field(ge=0, description=(
            "the conversation as memledger knew it at this position"))] = None
    ) -> Conversation:
        """A conversation's messages in the order they were said (who, what, when)."""
        with self._guard("read_conversation"):
            return await self.client.messages(self._space(space), session_id,
                                              as_of_position=as_of_position, limit=limit)
