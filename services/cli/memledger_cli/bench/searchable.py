"""Write acknowledged → found by ``POST /v1/search`` (the ``e2e`` bench's searchable phase).

A write is searchable by meaning once the enricher has embedded it, ingest has recorded the
embedding and the vector projector has indexed it. For every sampled write the bench waits for
its ``memory.embedded`` event on the bus (which tells the position of the embedding), then
searches with that ``min_position``, the written content as the query and dense-only weights
(a keyword match would find the item before it has a vector): searchable is the time from the
write's acknowledgement to that answer holding the item. Should the answer not hold it yet, the
search is repeated every ``POLL_S`` (``searchable_retries`` counts those). Waiting on the bus
rather than polling search keeps the bench from loading the server it measures.
"""

import argparse
import asyncio
import itertools
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import nats
import orjson
from nats.aio.msg import Msg

from memledger_cli.bench import corpus
from memledger_cli.bench.common import percentile
from memledger_cli.bench.load import post
from memledger_cli.bench.settle import wait_quiet
from memledger_schemas.event_types import EventType
from memledger_schemas.subjects import HDR_POSITION, Subjects

POLL_S = 0.05


EMBEDDED = (EventType.MEMORY_EMBEDDED, EventType.MESSAGE_EMBEDDED)
"""The events that say a memory item, or a message, has its embedding."""


class Embeddings:
    """The positions of embedding events, by item or message id, as they are published."""

    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future[int]] = {}

    def expect(self, item_id: str) -> "asyncio.Future[int]":
        """The position of the item's (or message's) embedding (a future made before or
        after it came)."""
        return self._future(item_id)

    async def on_event(self, msg: Msg) -> None:
        payload = orjson.loads(msg.data)["payload"]
        future = self._future(str(payload.get("item_id") or payload["message_id"]))
        if not future.done():
            future.set_result(int((msg.headers or {})[HDR_POSITION]))

    def _future(self, item_id: str) -> "asyncio.Future[int]":
        return self._futures.setdefault(item_id, asyncio.get_running_loop().create_future())


@asynccontextmanager
async def watching(nats_url: str, space: str) -> Any:
    """Embedding events of ``space`` (tenant ``default``) while the block runs."""
    nc = await nats.connect(nats_url)
    embeddings = Embeddings()
    for event_type in EMBEDDED:
        await nc.subscribe(Subjects().event("default", space, event_type),
                           cb=embeddings.on_event)
    try:
        yield embeddings
    finally:
        await nc.close()


def contents() -> Iterator[str]:
    """Distinct, meaningful sentences (each the query that finds it), as many as needed."""
    bases = corpus.base_sentences(10_000, seed=5)
    for i in itertools.count():
        yield f"{bases[i % len(bases)]}, probe {i}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--search-rate", type=float, default=100.0,
                        help="writes per second of the searchable phase (0: skip it)")
    parser.add_argument("--search-seconds", type=float, default=10.0)
    parser.add_argument("--search-sample-every", type=int, default=5)


async def phase(url: str, nats_url: str, space: str, args: argparse.Namespace
                ) -> dict[str, Any]:
    """The searchable phase, after the server has worked off what came before; its fields."""
    if args.search_rate <= 0:
        return {}
    await wait_quiet()
    texts = contents()
    async with aiohttp.ClientSession(url) as http, watching(nats_url, space) as embeddings:
        await steady(http, embeddings, space, texts, args.search_rate, args.warmup,
                     args.search_sample_every)
        result = await steady(http, embeddings, space, texts, args.search_rate,
                              args.search_seconds, args.search_sample_every)
    found = result["found_ms"]
    return {"search_rate_per_s": args.search_rate, "searchable_read_back": len(found),
            "searchable_p50_ms": round(percentile(found, 50), 2),
            "searchable_p99_ms": round(percentile(found, 99), 2),
            "searchable_retries": result["retries"]}


async def steady(http: aiohttp.ClientSession, embeddings: Embeddings, space: str,
                 texts: Iterator[str], rate: float, seconds: float, sample: int
                 ) -> dict[str, Any]:
    """Open loop: a write every 1/rate s; every ``sample``-th is timed until searchable."""
    found: list[float] = []
    retries = 0

    async def one(i: int, content: str) -> None:
        nonlocal retries
        result = await post(http, f"/v1/spaces/{space}/memories",
                            {"kind": "fact", "content": content})
        acked = time.perf_counter()
        if i % sample:
            return
        item = result["ids"]["item_id"]
        position = await asyncio.wait_for(embeddings.expect(item), 120)
        while not await _finds(http, space, content, item, position):
            retries += 1
            await asyncio.sleep(POLL_S)
        found.append((time.perf_counter() - acked) * 1000)

    start = time.perf_counter()
    tasks = []
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one(i, next(texts))))
    await asyncio.gather(*tasks)
    return {"found_ms": found, "retries": retries}


async def _finds(http: aiohttp.ClientSession, space: str, query: str, item: str,
                 position: int) -> bool:
    answer = await post(http, "/v1/search", {
        "query": query, "spaces": [space], "k": 5, "threshold": 0,
        "weights": {"dense": 1, "keyword": 0}, "min_position": position, "wait_ms": 20_000})
    return any(hit["item_id"] == item for hit in answer["results"])
