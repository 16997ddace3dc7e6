"""LoCoMo conversations through memledger's public API, and their questions asked of it.

Each conversation goes into its own space, in order: as sessions and messages (``said_at`` =
the session's date, the speaker as ``participant``), or, where the server cannot search
messages, each turn as a memory (``"<speaker>: <text>"``, kind ``episode``, valid from the
session's date). Hits are mapped back to turns by the ids the writes returned, never by their
text. Each question is then asked with ``POST /v1/search`` at the day after the conversation's
last session (``valid_at``), ``threshold: 0``, and timed.
"""

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from memledger_cli.bench.load import load, post
from memledger_cli.bench.locomo import Conversation, Question, Turn
from memledger_cli.bench.searchable import watching

Store = Literal["messages", "memories"]
K = 20
"""Hits asked for per question (planning mode's default): enough for every metric reported
(MRR is taken within them)."""
EMBED_LIMIT_S = 1_800
_NAMESPACE = uuid.UUID("8e7c51a0-3f4b-4d6a-9c2e-1b5d7f9a0c34")


@dataclass(frozen=True)
class Loaded:
    conversation: Conversation
    space: str
    turn_of: dict[str, str]
    """Turn (dia) id by the id of the message or item that holds it."""


@dataclass(frozen=True)
class Asked:
    question: Question
    ranking: list[str]
    """Turn ids, best first."""
    ms: float
    anchored: bool = False
    """Whether the question's event-relative expression ("before she moved") resolved to a
    window through its anchor event (the answer's ``time_windows``)."""


def document(turn: Turn) -> str:
    """A turn as a reader sees it: who said what."""
    return f"{turn.speaker}: {turn.text}"


def space_of(conversation: Conversation) -> str:
    return f"locomo-{conversation.name}"


def commands(conversation: Conversation, store: Store) -> list[dict[str, Any]]:
    """The writes that load ``conversation`` into its space, in order (deterministic ids:
    loading it again writes nothing new)."""
    space = space_of(conversation)
    out: list[dict[str, Any]] = [{"command": "create_space", "space_id": space}]
    for session in conversation.sessions:
        said = session.said_at.isoformat()
        session_id = session_id_of(space, session.number)
        if store == "messages":
            out.append({"command": "start_session", "space_id": space,
                        "session_id": session_id, "title": f"session {session.number}"})
        for turn in session.turns:
            out.append(_message(space, session_id, turn, said) if store == "messages"
                       else _memory(space, turn, said))
    return out


def _message(space: str, session_id: str, turn: Turn, said: str) -> dict[str, Any]:
    return {"command": "append_message", "space_id": space, "session_id": session_id,
            "message_id": _id(space, turn.dia_id), "role": "user",
            "participant": turn.speaker, "content": turn.text, "said_at": said}


def _memory(space: str, turn: Turn, said: str) -> dict[str, Any]:
    return {"command": "assert_memory", "space_id": space, "item_id": _id(space, turn.dia_id),
            "kind": "episode", "content": document(turn), "valid_from": said}


def session_id_of(space: str, number: int) -> str:
    """The id session ``number`` of the conversation in ``space`` is loaded under."""
    return _id(space, f"session/{number}")


def _id(space: str, name: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{space}/{name}"))


def turns_written(conversation: Conversation, sent: Sequence[dict[str, Any]],
                  results: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Turn id by the message or item id each turn's write returned."""
    turns = iter(conversation.turns)
    found: dict[str, str] = {}
    for command, result in zip(sent, results, strict=True):
        if command["command"] in ("append_message", "assert_memory"):
            ids = result["ids"]
            found[str(ids.get("message_id") or ids["item_id"])] = next(turns).dia_id
    return found


async def store_of(http: aiohttp.ClientSession, wanted: str) -> Store:
    """``wanted``, or with ``auto`` messages if the server searches them, else memories."""
    if wanted in ("messages", "memories"):
        return "messages" if wanted == "messages" else "memories"
    async with http.post("/v1/search", json={"query": "probe", "kinds": ["message"],
                                             "k": 1}) as response:
        await response.read()
        return "messages" if response.status == 200 else "memories"


async def load_all(http: aiohttp.ClientSession, nats_url: str,
                   conversations: Sequence[Conversation], store: Store) -> list[Loaded]:
    """Every conversation written, in order, and embedded."""
    loaded = []
    async with watching(nats_url, "*") as embeddings:
        for conversation in conversations:
            sent = commands(conversation, store)
            # One client: a session starts before its messages, which keep their order.
            results = await load(http, sent, clients=1)
            turn_of = turns_written(conversation, sent, results)
            loaded.append(Loaded(conversation, space_of(conversation), turn_of))
        waits = [embeddings.expect(written) for each in loaded for written in each.turn_of]
        await asyncio.wait_for(asyncio.gather(*waits), EMBED_LIMIT_S)
    return loaded


async def ask_all(http: aiohttp.ClientSession, loaded: Sequence[Loaded],
                  extra: dict[str, Any] | None = None) -> list[Asked]:
    """Every question of every conversation, one at a time (so each is timed alone)."""
    asked = []
    for each in loaded:
        for question in each.conversation.questions:
            asked.append(await ask(http, each, question, extra or {}))
    return asked


async def ask(http: aiohttp.ClientSession, loaded: Loaded, question: Question,
              extra: dict[str, Any]) -> Asked:
    answer, ms = await answered(http, loaded, question, extra)
    ranking = [loaded.turn_of[h] for h in map(hit_id, answer["results"]) if h in loaded.turn_of]
    anchored = any(w.get("anchor_id") for w in answer.get("time_windows") or ())
    return Asked(question, ranking, ms, anchored)


async def search(http: aiohttp.ClientSession, loaded: Loaded, question: Question,
                 extra: dict[str, Any]) -> tuple[list[dict[str, Any]], float]:
    """The hits of ``question`` asked of its conversation's space, and how long it took (ms)."""
    answer, ms = await answered(http, loaded, question, extra)
    hits: list[dict[str, Any]] = answer["results"]
    return hits, ms


async def answered(http: aiohttp.ClientSession, loaded: Loaded, question: Question,
                   extra: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The answer to ``question`` asked of its conversation's space, and how long it took
    (ms)."""
    body = {"query": question.question, "spaces": [loaded.space], "k": K, "threshold": 0,
            "valid_at": loaded.conversation.asked_at.isoformat(), **extra}
    started = time.perf_counter()
    answer: dict[str, Any] = await post(http, "/v1/search", body)
    return answer, (time.perf_counter() - started) * 1000


def hit_id(hit: dict[str, Any]) -> str:
    """The message id of a message hit, the item id of a memory hit."""
    return str(hit.get("message_id") or hit["item_id"])
