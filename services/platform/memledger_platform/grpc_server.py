"""What every gRPC servicer shares: the server, the caller's tenant, and refusals as status codes.

A refusal is the HTTP answer in gRPC terms: the HTTP status picks the status code
(``STATUS_CODES``), the error message becomes the details, and the HTTP error body
(``{"error": {"status", "code", "message", "fields": [{"path", "reason"}], ...}}``) travels as
UTF-8 JSON in the trailing metadata ``memledger-error-bin``.
"""

import asyncio
import functools
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, NoReturn, Protocol, TypeVar

import grpc
import orjson

from memledger_platform.auth import Denied, Gate, Principal, Role, require
from memledger_platform.http_server import PortBusyError

DEFAULT_GRPC_PORT = 8430
TENANT_METADATA = "x-memledger-tenant"
ERROR_METADATA = "memledger-error-bin"
GRACE_SECONDS = 2.0
"""On shutdown, how long calls in flight may finish (a followed changes feed never does)."""

STATUS_CODES: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED, 422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED, 503: grpc.StatusCode.UNAVAILABLE,
}
_BY_ERROR_CODE = {"refused": grpc.StatusCode.FAILED_PRECONDITION}
"""Error codes whose HTTP status is too coarse (a 400 a retry with other input cannot fix)."""

Who_co = TypeVar("Who_co", covariant=True)


class Resolver(Protocol[Who_co]):
    def __call__(self, authorization: str | None, tenant_header: str | None,
                 client: str | None = None) -> Who_co:
        """The caller of a call from the credential as sent (``Bearer mlk_…``), the tenant the
        caller names and its address (``None``: unknown); raises ``Denied`` (401, 403, 422 or
        429)."""


TenantResolver = Resolver[str]
"""Answers the caller's tenant."""
PrincipalResolver = Resolver[Principal]
"""Answers the whole caller (its role and key, for a servicer that needs them)."""

RpcContext = grpc.aio.ServicerContext[Any, Any]
Register = Callable[[grpc.aio.Server], None]
S = TypeVar("S")
Who = TypeVar("Who")
Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Refusal(Exception):
    """A request refused: its HTTP status and the HTTP error body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body["error"]["message"])
        self.status = status
        self.body = body

    @property
    def code(self) -> grpc.StatusCode:
        return _BY_ERROR_CODE.get(self.body["error"]["code"]) or STATUS_CODES.get(
            self.status, grpc.StatusCode.INTERNAL)


def refusal(status: int, code: str, message: str, path: str | None = None,
            **extra: Any) -> Refusal:
    """A refusal in the HTTP error shape (``path``: the field at fault, if one is)."""
    fields = [{"path": path, "reason": message}] if path else []
    return Refusal(status, {"error": {"status": status, "code": code, "message": message,
                                      "fields": fields, **extra}})


def principal_resolver(gate: Gate, role: Role = "read") -> PrincipalResolver:
    """The caller check of a servicer whose calls need ``role``: the same gate as HTTP (an open
    gate takes the tenant metadata or the default tenant and ignores the credential). Keys
    limited to some spaces are refused: the servicers do not check space grants yet."""
    def resolve(authorization: str | None, tenant_header: str | None,
                client: str | None = None) -> Principal:
        principal = gate.principal(authorization, tenant_header, client)
        require(principal, role)
        if principal.spaces is not None:
            raise Denied(403, "forbidden", "keys limited to some spaces are not accepted over "
                         "gRPC yet: use a key for the whole tenant, or HTTP",
                         "header.Authorization")
        return principal

    return resolve


def tenant_resolver(gate: Gate, role: Role = "read") -> TenantResolver:
    """``principal_resolver``, answering the tenant only."""
    resolve = principal_resolver(gate, role)

    def resolve_tenant(authorization: str | None, tenant_header: str | None,
                       client: str | None = None) -> str:
        return resolve(authorization, tenant_header, client).tenant

    return resolve_tenant


async def caller(context: RpcContext, resolve_tenant: Resolver[Who]) -> Who:
    """The caller of a call (its tenant, or its principal: what ``resolve_tenant`` answers),
    from its ``authorization`` and ``x-memledger-tenant`` metadata and its peer address (the
    check may read a key store: it runs off the event loop)."""
    metadata = {key: value for key, value in context.invocation_metadata() or ()
                if isinstance(value, str)}
    try:
        return await asyncio.to_thread(resolve_tenant, metadata.get("authorization"),
                                       metadata.get(TENANT_METADATA),
                                       client_address(context.peer()))
    except Denied as denied:
        extra = {} if denied.retry_after is None else {"retry_after_seconds": denied.retry_after}
        raise refusal(denied.status, denied.code, denied.message,
                      _metadata_path(denied.path), **extra) from None


def client_address(peer: str) -> str | None:
    """The caller's address in a gRPC peer (``ipv4:10.0.0.1:5555``, ``ipv6:[::1]:5555``),
    without its port; any other kind of peer as it is."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rpartition(":")[0].strip("[]") or None
    return peer or None


def unary(handler: Callable[[S, Req, RpcContext], Awaitable[Resp]]
          ) -> Callable[[S, Req, RpcContext], Awaitable[Resp]]:
    """A unary method whose ``Refusal`` ends the call with its status and error body."""
    @functools.wraps(handler)
    async def answer(self: S, request: Req, context: RpcContext) -> Resp:
        try:
            return await handler(self, request, context)
        except Refusal as refused:
            await abort(context, refused)

    return answer


def streaming(handler: Callable[[S, Req, RpcContext], AsyncIterator[Resp]]
              ) -> Callable[[S, Req, RpcContext], AsyncIterator[Resp]]:
    """A server-streaming method whose ``Refusal`` ends the stream with its status."""
    @functools.wraps(handler)
    async def answer(self: S, request: Req, context: RpcContext) -> AsyncIterator[Resp]:
        try:
            async for message in handler(self, request, context):
                yield message
        except Refusal as refused:
            await abort(context, refused)

    return answer


async def abort(context: RpcContext, refused: Refusal) -> NoReturn:
    await context.abort(refused.code, str(refused),
                        trailing_metadata=((ERROR_METADATA, orjson.dumps(refused.body)),))


def error_body(error: grpc.aio.AioRpcError) -> dict[str, Any] | None:
    """The HTTP error body a refused call carries (clients and tests)."""
    for key, value in error.trailing_metadata() or ():
        if key == ERROR_METADATA and isinstance(value, bytes):
            body: dict[str, Any] = orjson.loads(value)
            return body
    return None


async def start(services: Iterable[Register], host: str, port: int | None, *, fallback: int,
                setting: str) -> tuple[grpc.aio.Server, str]:
    """A started server with ``services`` registered, bound like the HTTP one: ``port``, or
    (unset) ``fallback`` or any free port; a busy ``port`` is a ``PortBusyError`` naming
    ``setting``. Returns the server (``stop(GRACE_SECONDS)`` it) and its ``host:port``."""
    # Without SO_REUSEPORT a busy port is an error rather than a port silently shared.
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    for register in services:
        register(server)
    if port is not None and not _free(host, port):
        raise PortBusyError(f"port {port} on {host} is already in use: set {setting} to "
                            "another port, or unset it to pick a free one")
    if port is None:
        port = fallback if _free(host, fallback) else 0
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    return server, f"{host}:{bound}"


def _free(host: str, port: int) -> bool:
    # Probed first so a busy fallback port costs no error line from the gRPC core.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _metadata_path(path: str) -> str:
    """``header.X-Memledger-Tenant`` (HTTP) is ``metadata.x-memledger-tenant`` here."""
    source, _, name = path.partition(".")
    return f"metadata.{name.lower()}" if source == "header" else path
