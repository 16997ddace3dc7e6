"""The SituatedQA part of ``bench retrieval``: answers that change over time, and what the
valid-time filter adds to finding the one that held at a date.

Every answer segment of a question's timeline (``situatedqa``) is stored as a statement
("england last get to the semi final of a world cup: 2018"), never as the question itself,
twice: in a space where it is valid over its segment (from the date the answer is first given
until the next answer's), and in a space where it has no valid time of its own (valid from the
epoch, open-ended). Unrelated statements (``corpus``) are stored beside them as distractors.

Questions are asked as the data rephrases them for their date ("... as of 2019"), with
``k: 1`` and ``threshold: 0``; a row is correct when the hit gives one of the row's gold
answers:

- ``as_of_accuracy``: in the timed space, with ``valid_at`` = the row's date (the filter);
- ``as_of_accuracy_without_filter``: in the untimed space, the same question with no
  ``valid_at``: only the words of the question can choose between the segments;
- ``current_accuracy``: the question as first written, in the timed space, with no
  ``valid_at`` (now), against the answer of its latest date.

``*_changed`` is the same over the rows whose answer is no longer the current one.
"""

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from memledger_cli.bench import corpus
from memledger_cli.bench import situatedqa as sqa
from memledger_cli.bench.load import Overloaded, load, post
from memledger_cli.bench.searchable import watching
from memledger_cli.bench.settle import settled

TIMED, UNTIMED = "situatedqa", "situatedqa-untimed"
DISTRACTORS = 2_000
WAIT_MS = 20_000
"""How long a search may wait for the read models (the enricher may still be writing)."""
RETRIES = 3
"""Tries of a search the server answered 503 or 504 (busy: these searches are not timed)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAMESPACE = uuid.UUID("5d9f1c3e-8a7b-4c2d-9e1f-0a3b5c7d9e21")


@dataclass
class Statements:
    """The questions, their segments as statements in both spaces, and which answers each
    stored statement gives."""

    questions: dict[str, list[sqa.Row]]
    answers: dict[str, set[str]] = field(default_factory=dict)
    commands: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for qid, rows in self.questions.items():
            for n, segment in enumerate(sqa.timeline(rows)):
                text = sqa.statement(rows[0].question, segment.shown)
                for space in (TIMED, UNTIMED):
                    item = str(uuid.uuid5(_NAMESPACE, f"{space}/{qid}/{n}"))
                    self.answers[item] = segment.answers
                    self.commands.append(_assert(space, item, text, segment))

    def correct(self, item: str | None, gold: frozenset[str]) -> bool:
        return item is not None and bool(self.answers.get(item, set()) & gold)


def _assert(space: str, item: str, text: str, segment: sqa.Segment) -> dict[str, Any]:
    timed = space == TIMED
    return {"command": "assert_memory", "space_id": space, "item_id": item, "kind": "fact",
            "content": text,
            "valid_from": (segment.valid_from if timed else _EPOCH).isoformat(),
            "valid_to": segment.valid_to.isoformat() if timed and segment.valid_to else None}


def distractors(count: int) -> list[dict[str, Any]]:
    """Unrelated statements, in both spaces (always valid)."""
    return [{"command": "assert_memory", "space_id": space, "kind": "fact", "content": text,
             "valid_from": _EPOCH.isoformat()}
            for text in corpus.base_sentences(count, seed=11) for space in (TIMED, UNTIMED)]


async def measure(http: aiohttp.ClientSession, nats_url: str, path: Path, limit: int | None,
                  clients: int, noise_count: int = DISTRACTORS) -> dict[str, Any]:
    """Load, wait until embedded, ask; the ``situatedqa_*`` fields of the result."""
    data = Statements(sqa.questions(path, limit))
    for space in (TIMED, UNTIMED):
        await post(http, "/v1/spaces", {"space_id": space})
    noise = distractors(noise_count)
    async with watching(nats_url, "*") as embeddings:
        embedded = [embeddings.expect(c["item_id"]) for c in data.commands]
        await load(http, data.commands + noise)
        for future in embedded:
            await future
    await settled(http)
    scores = await _score(http, data, clients)
    rows = sum(len(r) for r in data.questions.values())
    return {"situatedqa_questions": len(data.questions), "situatedqa_rows": rows,
            "situatedqa_statements": len(data.commands) // 2,
            "situatedqa_distractors": len(noise) // 2,
            "situatedqa_rows_changed": _changed(data),
            **{f"situatedqa_{key}": value for key, value in scores.items()}}


def _changed(data: Statements) -> int:
    return sum(1 for rows in data.questions.values() for row in rows
               if not row.answers & sqa.latest(rows).answers)


async def _score(http: aiohttp.ClientSession, data: Statements, clients: int
                 ) -> dict[str, float]:
    timed: list[tuple[bool, bool]] = []  # (correct, answer changed since)
    untimed: list[tuple[bool, bool]] = []
    current: list[bool] = []

    def row_job(row: sqa.Row, now: frozenset[str]) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            moved = not row.answers & now
            asked = row.asked or row.question
            found = await _top(http, TIMED, asked, row.at.isoformat())
            timed.append((data.correct(found, row.answers), moved))
            found = await _top(http, UNTIMED, asked, None)
            untimed.append((data.correct(found, row.answers), moved))
        return job

    def current_job(rows: list[sqa.Row]) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            found = await _top(http, TIMED, rows[0].question, None)
            current.append(data.correct(found, sqa.latest(rows).answers))
        return job

    jobs = [row_job(row, sqa.latest(rows).answers)
            for rows in data.questions.values() for row in rows]
    jobs += [current_job(rows) for rows in data.questions.values()]
    await run_jobs(jobs, clients)
    return {"as_of_accuracy": _share([ok for ok, _ in timed]),
            "as_of_accuracy_without_filter": _share([ok for ok, _ in untimed]),
            "as_of_accuracy_changed": _share([ok for ok, moved in timed if moved]),
            "as_of_accuracy_changed_without_filter": _share(
                [ok for ok, moved in untimed if moved]),
            "current_accuracy": _share(current)}


async def _top(http: aiohttp.ClientSession, space: str, question: str,
               valid_at: str | None) -> str | None:
    body: dict[str, Any] = {"query": question, "spaces": [space], "k": 1, "threshold": 0,
                            "wait_ms": WAIT_MS}
    if valid_at is not None:
        body["valid_at"] = valid_at
    for attempt in range(RETRIES):
        try:
            answer = await post(http, "/v1/search", body)
            break
        except Overloaded:
            if attempt == RETRIES - 1:
                raise
    return answer["results"][0]["item_id"] if answer["results"] else None


async def run_jobs(jobs: list[Callable[[], Awaitable[None]]], clients: int) -> None:
    """Run ``jobs`` on ``clients`` concurrent workers."""
    queue = iter(jobs)

    async def client() -> None:
        for job in queue:
            await job()

    await asyncio.gather(*(client() for _ in range(clients)))


def _share(values: list[bool]) -> float:
    return round(sum(values) / len(values), 4) if values else float("nan")
