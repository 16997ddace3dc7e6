"""Loading a private server with facts through the public HTTP API, fast (batches)."""

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

Fact = Callable[[int], dict[str, Any]]


class Overloaded(RuntimeError):
    """The server answered 503 or 504: busy, or waiting for its read models too long."""


async def post(http: aiohttp.ClientSession, path: str, body: Any,
               params: dict[str, str] | None = None) -> dict[str, Any]:
    async with http.post(path, data=orjson.dumps(body), params=params,
                         headers={"content-type": "application/json"}) as response:
        payload: dict[str, Any] = await response.json(loads=orjson.loads)
        if response.status in (503, 504):
            raise Overloaded(f"POST {path} -> {response.status}: {payload}")
        if response.status >= 300:
            raise RuntimeError(f"POST {path} -> {response.status}: {payload}")
        return payload


async def load(http: aiohttp.ClientSession, commands: list[dict[str, Any]], *,
               batch: int = 500, clients: int = 4,
               progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Commit ``commands`` through /v1/batch; return every result, in order."""
    chunks = [commands[i:i + batch] for i in range(0, len(commands), batch)]
    results: list[list[dict[str, Any]]] = [[] for _ in chunks]
    queue = iter(range(len(chunks)))
    done = 0

    async def client() -> None:
        nonlocal done
        for index in queue:
            answer = await post(http, "/v1/batch", {"commands": chunks[index]})
            results[index] = answer["results"]
            done += len(chunks[index])
            if progress is not None:
                progress(done)

    await asyncio.gather(*(client() for _ in range(clients)))
    return [r for chunk in results for r in chunk]
