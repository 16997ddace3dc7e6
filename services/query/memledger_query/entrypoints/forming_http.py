"""HTTP for what memory formed by itself: a subject's profile and a space's themes (plain
reads, with their basis; ``forming_views``)."""

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path
from fastapi.responses import Response

from memledger_platform.clock import Clock
from memledger_query.core.forming_views import members, profile, themes
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import api
from memledger_query.entrypoints.api import (
    AsOf,
    At,
    Caller,
    Problem,
    RecordedAt,
    Travel,
    Wait,
    json_answer,
    read_visible,
)
from memledger_query.entrypoints.reads import known_space
from memledger_schemas.api.forming import ProfileAnswer, ThemeList
from memledger_schemas.api.reads import Basis

Subject = Annotated[str, Path(min_length=1, max_length=512, pattern=r"^[^\x00]*$",
                              description="a triple subject: a person's or agent's name")]


def router(reader: Reader, clock: Clock) -> APIRouter:
    routes = api.router(tags=["memory"])

    @routes.get("/v1/spaces/{space_id}/profiles/{subject}", response_model=ProfileAnswer)
    async def get_profile(space_id: str, subject: Subject, who: Caller, when: Travel,
                          wait: Wait) -> Response:
        """What is believed about ``subject`` (facts and preferences whose triple subject it
        is, with confidence and sources), as of any basis."""
        at = when.at(clock.now())
        return json_answer(await read_visible(reader, wait.needing(at.position), _profile,
                                              who.tenant, space_id, subject, at))

    @routes.get("/v1/spaces/{space_id}/themes", response_model=ThemeList)
    async def list_themes(space_id: str, who: Caller, wait: Wait, as_of_position: AsOf = None,
                          recorded_at: RecordedAt = None) -> Response:
        """The themes the lifecycle scheduler found in the space's memories (a space policy's
        ``theme_cosine`` turns them on), the largest first."""
        at = At(clock.now(), as_of_position, recorded_at)
        return json_answer(await read_visible(reader, wait.needing(as_of_position), _themes,
                                              who.tenant, space_id, at))

    return routes


def _profile(conn: Any, s: str, tenant: str, space: str, subject: str, at: At
             ) -> ProfileAnswer:
    basis = at.basis(conn, s)
    found = profile(conn, s, tenant, space, subject, basis)
    known_space(conn, s, tenant, space, empty=not found)
    return ProfileAnswer(basis=basis, space_id=space, subject=subject, facts=found)


def _themes(conn: Any, s: str, tenant: str, space: str, at: At) -> ThemeList:
    basis = at.basis(conn, s)
    found = themes(conn, s, tenant, space, basis)
    known_space(conn, s, tenant, space, empty=not found)
    return ThemeList(basis=basis, space_id=space, themes=found)


def theme_members(reader: Reader, tenant: str, theme: UUID, at: Basis) -> tuple[str, ...]:
    """The members of ``theme`` at ``at`` (what a search filtered by theme may find); a theme
    unknown then, or dissolved, is a 404 naming ``body.theme``."""
    found = reader.run(members, tenant, str(theme), at)
    if not found:
        raise Problem(404, "not_found", f"theme {theme} has no members at position "
                      f"{at.position}", "body.theme")
    return tuple(found)
