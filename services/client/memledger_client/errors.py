"""What a refusal looks like to a client: one exception class per kind of answer, each carrying
the ``{"error": {"status", "code", "message", "fields", ...}}`` body memledger sent.

    MemledgerError
    ├── InvalidRequest   400 / 422 (fields name the paths at fault: ``commands.3.content``)
    ├── Unauthorized     401 (no API key, or an unknown or revoked one)
    ├── Forbidden        403 (the key's role or spaces do not cover the request)
    ├── NotFound         404 (unknown space, item, session or entity, or another tenant's)
    ├── Conflict         409 (``current_version`` of the stream)
    ├── RateLimited      429 (``retry_after`` seconds, when the server said)
    └── Unavailable      502 / 503 / 504, or no answer at all (``Unreachable``)
        ├── NotYetVisible  503 ``not_yet_visible``: committed, not projected within ``wait_ms``
        └── CircuitOpen    not sent: this endpoint group failed too often lately
"""

from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from pydantic import ValidationError


@dataclass(frozen=True)
class FieldError:
    path: str
    reason: str


class MemledgerError(Exception):
    """A request memledger refused or could not answer. ``status`` is None when no HTTP answer
    came (or the request was refused before it was sent)."""

    def __init__(self, status: int | None, code: str, message: str,
                 fields: tuple[FieldError, ...] = (), body: dict[str, Any] | None = None
                 ) -> None:
        super().__init__(f"{status or '-'} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.fields = fields
        self.body: dict[str, Any] = body or {}


class InvalidRequest(MemledgerError):
    """The request is malformed or makes no sense against the current state."""


class Unauthorized(MemledgerError):
    """The request carries no valid API key (``api_key=`` on the client)."""


class Forbidden(MemledgerError):
    """The API key may not do this (its role, or the spaces it is limited to)."""


class NotFound(MemledgerError):
    """What the request names does not exist (in this tenant and space)."""


class Conflict(MemledgerError):
    """``expected_version`` or the state of the target refuses the command."""

    @property
    def current_version(self) -> int | None:
        value = self.body.get("current_version")
        return value if isinstance(value, int) else None


class RateLimited(MemledgerError):
    """Too many requests; ``retry_after`` is the server's hint in seconds."""

    @property
    def retry_after(self) -> float | None:
        value = self.body.get("retry_after")
        return float(value) if isinstance(value, int | float) else None


class Unavailable(MemledgerError):
    """memledger (or what is in front of it) cannot answer now; worth retrying later."""


class NotYetVisible(Unavailable):
    """A read waited ``wait_ms`` for ``min_position`` and the read model did not reach it."""

    @property
    def projected_position(self) -> int | None:
        value = self.body.get("projected_position")
        return value if isinstance(value, int) else None


class Unreachable(Unavailable):
    """No HTTP answer at all (connection refused, timeout), after every retry."""


class CircuitOpen(Unavailable):
    """Not sent: the calls of its endpoint group failed too often in a row, and the breaker's
    recovery time has not passed (``retry_after`` seconds until a probe is let through)."""

    @property
    def retry_after(self) -> float | None:
        value = self.body.get("retry_after")
        return float(value) if isinstance(value, int | float) else None


_BY_STATUS: dict[int, type[MemledgerError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    422: InvalidRequest, 429: RateLimited, 502: Unavailable, 503: Unavailable,
    504: Unavailable,
}


def from_response(response: httpx.Response, retry_after: float | None = None
                  ) -> MemledgerError:
    """The exception for an error response (memledger's error body, or any other body)."""
    body = _error_body(response)
    code = str(body.get("code") or f"http_{response.status_code}")
    message = str(body.get("message") or response.reason_phrase or "no message")
    fields = tuple(FieldError(str(f.get("path", "")), str(f.get("reason", "")))
                   for f in body.get("fields") or () if isinstance(f, dict))
    if retry_after is not None:
        body = {**body, "retry_after": retry_after}
    cls = NotYetVisible if code == "not_yet_visible" else _BY_STATUS.get(
        response.status_code, Unavailable if response.status_code >= 500 else MemledgerError)
    return cls(response.status_code, code, message, fields, body)


def from_validation(error: ValidationError) -> InvalidRequest:
    """A request the client refused to send, in the shape the server would have answered."""
    fields = tuple(FieldError(".".join(str(p) for p in e["loc"]), e["msg"])
                   for e in error.errors(include_url=False))
    message = "; ".join(f"{f.path or 'body'}: {f.reason}" for f in fields[:5])
    return InvalidRequest(None, "invalid_request", message, fields)


def _error_body(response: httpx.Response) -> dict[str, Any]:
    try:
        document = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return {"message": response.text[:500].strip() or None}
    error = document.get("error") if isinstance(document, dict) else None
    return error if isinstance(error, dict) else {}
