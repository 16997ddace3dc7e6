"""``memledger bench retrieval``: search quality on answers that change over time
(SituatedQA, temporal dev split), dense-only, keyword-only and hybrid.

Every question's answer timeline (``situatedqa``) is loaded as facts with valid times, one
memory per answer segment ("<question> — <answer>", valid from the date the answer is first
given until the next answer's), through ``/v1/batch`` into a private server whose enricher
embeds them with the local model. Then, per weighting and with ``threshold: 0`` (nothing cut):

- as-of accuracy: for each (question, date) row, ``POST /v1/search`` with the question,
  ``valid_at`` = the date and ``k: 1``; correct when the hit's answer is a gold answer of the
  row (``as_of_accuracy_changed``: the same over rows whose answer is not the current one);
- current-answer accuracy: the question with no ``valid_at`` (now), against the answer of the
  question's latest date.

The data is read from where it lies (``--data``, ``$MEMLEDGER_BENCH_SITUATEDQA`` or
``../shared/data/situatedqa`` beside the repository), never copied.
"""

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from memledger_cli.bench import situatedqa as sqa
from memledger_cli.bench.common import Scenario, Steps, measured, private_server
from memledger_cli.bench.load import load, post
from memledger_cli.bench.searchable import watching
from memledger_cli.bench.settle import wait_indexed, wait_quiet

SPACE = "situatedqa"
WEIGHTS: dict[str, dict[str, Any]] = {
    "dense": {"weights": {"dense": 1, "keyword": 0}},
    "keyword": {"weights": {"dense": 0, "keyword": 1}},
    "hybrid": {},  # the default weights
}
_NAMESPACE = uuid.UUID("5d9f1c3e-8a7b-4c2d-9e1f-0a3b5c7d9e21")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=None,
                        help=f"directory of {sqa.FILE} (default: ${sqa.ENV}, else "
                        "../shared/data/situatedqa beside the repository)")
    parser.add_argument("--limit", type=int, default=None,
                        help="only the first N questions (default: all, 1,178)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent searches")


class Loaded:
    """The questions, their segments as items, and which answers each item gives."""

    def __init__(self, questions: dict[str, list[sqa.Row]]) -> None:
        self.questions = questions
        self.answers: dict[str, set[str]] = {}
        self.commands: list[dict[str, Any]] = []
        for qid, rows in questions.items():
            for n, segment in enumerate(sqa.timeline(rows)):
                item = str(uuid.uuid5(_NAMESPACE, f"{qid}/{n}"))
                self.answers[item] = segment.answers
                self.commands.append(_assert(item, rows[0].question, segment))

    def correct(self, item: str | None, gold: frozenset[str]) -> bool:
        return item is not None and bool(self.answers[item] & gold)


def _assert(item: str, question: str, segment: sqa.Segment) -> dict[str, Any]:
    return {"command": "assert_memory", "space_id": SPACE, "item_id": item, "kind": "fact",
            "content": f"{question} — {segment.shown}",
            "valid_from": segment.valid_from.isoformat(),
            "valid_to": segment.valid_to.isoformat() if segment.valid_to else None}


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    data = Loaded(sqa.questions(sqa.data_dir(args.data), args.limit))
    rows = sum(len(r) for r in data.questions.values())
    with Steps(total=3 + len(WEIGHTS)) as steps, \
            private_server({"MEMLEDGER_EMBEDDER": "local"}) as server:
        async with aiohttp.ClientSession(server.url) as http:
            await post(http, "/v1/spaces", {"space_id": SPACE})
            steps.step(f"loading {len(data.commands)} answer segments of "
                       f"{len(data.questions)} questions")
            enriched_s = await _load_embedded(http, server.nats_url, data)
            steps.step("waiting for the vector index, then for the server to go quiet")
            async with http.get("/health") as health:
                await wait_indexed(http, (await health.json())["position"])
            await wait_quiet()
            scores: dict[str, Any] = {}
            for name, extra in WEIGHTS.items():
                steps.step(f"{rows} as-of and {len(data.questions)} current searches, {name}")
                scores[name] = await _score(http, data, extra, args.clients)
    return {"scenario": "retrieval", "dataset": f"SituatedQA temporal dev ({sqa.FILE})",
            "questions": len(data.questions), "rows": rows, "items": len(data.commands),
            "rows_changed": _changed(data), "model": "local (all-MiniLM-L6-v2)", "k": 1,
            "threshold": 0, **{f"{name}_{key}": value for name, found in scores.items()
                               for key, value in found.items()},
            "load_and_embed_s": round(enriched_s, 1), "cpus": os.cpu_count()}


async def _load_embedded(http: aiohttp.ClientSession, nats_url: str, data: Loaded) -> float:
    """Load every segment; seconds until the enricher has embedded them all."""
    started = time.monotonic()
    async with watching(nats_url, SPACE) as embeddings:
        embedded = [embeddings.expect(c["item_id"]) for c in data.commands]
        await load(http, data.commands)
        await asyncio.wait_for(asyncio.gather(*embedded), 1_800)
    return time.monotonic() - started


def _changed(data: Loaded) -> int:
    return sum(1 for rows in data.questions.values() for row in rows
               if not row.answers & sqa.latest(rows).answers)


async def _score(http: aiohttp.ClientSession, data: Loaded, extra: dict[str, Any],
                 clients: int) -> dict[str, float]:
    as_of: list[tuple[bool, bool]] = []  # (correct, answer changed since)
    current: list[bool] = []

    def row_job(row: sqa.Row, now: frozenset[str]) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            top = await _top(http, row.question, extra, row.at.isoformat())
            as_of.append((data.correct(top, row.answers), not row.answers & now))
        return job

    def current_job(rows: list[sqa.Row]) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            top = await _top(http, rows[0].question, extra, None)
            current.append(data.correct(top, sqa.latest(rows).answers))
        return job

    jobs = [row_job(row, sqa.latest(rows).answers)
            for rows in data.questions.values() for row in rows]
    jobs += [current_job(rows) for rows in data.questions.values()]
    await _run(jobs, clients)
    changed = [ok for ok, moved in as_of if moved]
    return {"as_of_accuracy": _share([ok for ok, _ in as_of]),
            "as_of_accuracy_changed": _share(changed), "current_accuracy": _share(current)}


async def _top(http: aiohttp.ClientSession, question: str, extra: dict[str, Any],
               valid_at: str | None) -> str | None:
    body = {"query": question, "spaces": [SPACE], "k": 1, "threshold": 0, **extra}
    if valid_at is not None:
        body["valid_at"] = valid_at
    answer = await post(http, "/v1/search", body)
    return answer["results"][0]["item_id"] if answer["results"] else None


async def _run(jobs: list[Callable[[], Awaitable[None]]], clients: int) -> None:
    queue = iter(jobs)

    async def client() -> None:
        for job in queue:
            await job()

    await asyncio.gather(*(client() for _ in range(clients)))


def _share(values: list[bool]) -> float:
    return round(sum(values) / len(values), 4) if values else float("nan")


SCENARIO = Scenario("retrieval", "as-of and current-answer accuracy on SituatedQA (temporal), "
                    "dense, keyword and hybrid", add_arguments, measured(_measure))
