"""``/console``: the operator console's page and assets.

The page holds no data: it asks the API for everything with the key the operator types in,
so the console can do exactly what that key may (the same roles and space grants). Assets are
served from the package, never from a path the request names.
"""

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from memledger_query.entrypoints import api
from memledger_query.entrypoints.api import Problem

PREFIX = "/console"
_ASSETS = {"": ("index.html", "text/html; charset=utf-8"),
           "console.js": ("console.js", "text/javascript; charset=utf-8"),
           "console.css": ("console.css", "text/css; charset=utf-8")}
_HEADERS = {
    # Only this origin's own script and style, no inline script: content shown in the page
    # is untrusted text, and this makes an escaping mistake harmless.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def router() -> APIRouter:
    routes = api.router(include_in_schema=False)

    @routes.get(PREFIX)
    @routes.get(PREFIX + "/")
    async def page() -> Response:
        return _asset("")

    @routes.get(PREFIX + "/{name}")
    async def asset(name: str) -> Response:
        return _asset(name)

    return routes


def _asset(name: str) -> Response:
    found = _ASSETS.get(name)
    if found is None:
        raise Problem(404, "not_found", f"no console asset {name!r}")
    file, media = found
    body = resources.files("memledger_query.entrypoints.console").joinpath(file).read_bytes()
    return Response(body, media_type=media, headers=_HEADERS)
