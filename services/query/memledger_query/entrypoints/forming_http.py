"""HTTP for what memory formed by itself: a subject's profile and a space's themes (plain
reads, with their basis; ``forming_views``)."""

from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import FastAPI, Path

from memledger_query.core import views
from memledger_query.core.forming_views import members, profile, themes
from memledger_query.core.reader import Reader
from memledger_query.entrypoints.http import (
    AsOf,
    MinPosition,
    Problem,
    RecordedAt,
    Tenant,
    ValidAt,
    WaitMs,
    _json,
    known_space,
    read_visible,
)
from memledger_query.entrypoints.http import principal as _principal
from memledger_schemas.api.forming import ProfileAnswer, ThemeList
from memledger_schemas.api.reads import Basis

Subject = Annotated[str, Path(min_length=1, max_length=512, pattern=r"^[^\x00]*$",
                              description="a triple subject: a person's or agent's name")]


def add_routes(app: FastAPI, reader: Reader) -> None:
    @app.get("/v1/spaces/{space_id}/profiles/{subject}", response_model=ProfileAnswer,
             tags=["memory"])
    async def get_profile(space_id: str, subject: Subject, x_tenant: Tenant = None,
                          valid_at: ValidAt = None, as_of_position: AsOf = None,
                          recorded_at: RecordedAt = None, min_position: MinPosition = None,
                          wait_ms: WaitMs = 2_000) -> Any:
        """What is believed about ``subject`` (facts and preferences whose triple subject it
        is, with confidence and sources), as of any basis."""
        return _json(await read_visible(
            reader, _wanted(min_position, as_of_position), wait_ms, _profile,
            _principal().tenant, space_id, subject,
            (valid_at or datetime.now(UTC), as_of_position, recorded_at)))

    @app.get("/v1/spaces/{space_id}/themes", response_model=ThemeList, tags=["memory"])
    async def list_themes(space_id: str, x_tenant: Tenant = None, as_of_position: AsOf = None,
                          recorded_at: RecordedAt = None, min_position: MinPosition = None,
                          wait_ms: WaitMs = 2_000) -> Any:
        """The themes the lifecycle scheduler found in the space's memories (a space policy's
        ``theme_cosine`` turns them on), the largest first."""
        return _json(await read_visible(
            reader, _wanted(min_position, as_of_position), wait_ms, _themes,
            _principal().tenant, space_id, (datetime.now(UTC), as_of_position, recorded_at)))


When = tuple[datetime, int | None, datetime | None]


def _wanted(min_position: int | None, as_of_position: int | None) -> int | None:
    return max([p for p in (min_position, as_of_position) if p is not None], default=None)


def _profile(conn: Any, s: str, tenant: str, space: str, subject: str, when: When
             ) -> ProfileAnswer:
    at = views.basis(conn, s, *when)
    found = profile(conn, s, tenant, space, subject, at)
    known_space(conn, s, tenant, space, empty=not found)
    return ProfileAnswer(basis=at, space_id=space, subject=subject, facts=found)


def _themes(conn: Any, s: str, tenant: str, space: str, when: When) -> ThemeList:
    at = views.basis(conn, s, *when)
    found = themes(conn, s, tenant, space, at)
    known_space(conn, s, tenant, space, empty=not found)
    return ThemeList(basis=at, space_id=space, themes=found)


def theme_members(reader: Reader, tenant: str, theme: UUID, at: Basis) -> tuple[str, ...]:
    """The members of ``theme`` at ``at`` (what a search filtered by theme may find); a theme
    unknown then, or dissolved, is a 404 naming ``body.theme``."""
    found = reader.run(members, tenant, str(theme), at)
    if not found:
        raise Problem(404, "not_found", f"theme {theme} has no members at position "
                      f"{at.position}", "body.theme")
    return tuple(found)
