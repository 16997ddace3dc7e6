"""``/v1/query/health``: whether the read models, the event store and their lag answer (public:
no key needed)."""

import asyncio
from typing import Any

from fastapi import APIRouter

from memledger_platform.eventstore import EventStore
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import api


def router(reader: Reader, store: EventStore) -> APIRouter:
    routes = api.router()

    @routes.get("/v1/query/health")
    async def health() -> dict[str, Any]:
        return await asyncio.to_thread(reader.health, store)

    return routes
