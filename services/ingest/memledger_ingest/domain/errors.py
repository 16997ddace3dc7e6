"""Domain errors, each mapped to one response class by every entrypoint."""


class DomainError(Exception):
    """A command was refused; nothing was written."""


class NotFound(DomainError):
    """Something the command refers to does not exist in this tenant and space (HTTP 404)."""

    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} {ident!r} not found")
        self.what = what
        self.ident = ident


class Conflict(DomainError):
    """The command contradicts the current state of its stream (HTTP 409)."""

    def __init__(self, message: str, current_version: int) -> None:
        super().__init__(message)
        self.current_version = current_version


class Invalid(DomainError):
    """A well-formed command that makes no sense against the current state (HTTP 422)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message
