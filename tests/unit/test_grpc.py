"""The gRPC plumbing without a network: generated code matches the protos, HTTP statuses map
to status codes, the tenant check behaves like HTTP's."""

from pathlib import Path

import grpc
import pytest

from memledger_platform.auth import Denied, Gate, Principal
from memledger_platform.grpc_server import refusal, tenant_resolver
from memledger_schemas.grpc import codegen


def test_the_installed_grpc_code_is_what_the_protos_generate_now(tmp_path: Path) -> None:
    fresh = codegen.generate(tmp_path)
    installed = codegen.OUTPUT / codegen.PACKAGE / "v1"
    assert [p.name for p in fresh] == sorted(p.name for p in installed.iterdir() if p.is_file())
    stale = [p.name for p in fresh if p.read_bytes() != (installed / p.name).read_bytes()]
    assert not stale, f"run `make install` (or python -m memledger_schemas.grpc.codegen): {stale}"


@pytest.mark.parametrize(("status", "code", "expected"), [
    (422, "invalid_request", grpc.StatusCode.INVALID_ARGUMENT),
    (400, "invalid_cursor", grpc.StatusCode.INVALID_ARGUMENT),
    (400, "refused", grpc.StatusCode.FAILED_PRECONDITION),
    (401, "unauthenticated", grpc.StatusCode.UNAUTHENTICATED),
    (403, "forbidden", grpc.StatusCode.PERMISSION_DENIED),
    (404, "not_found", grpc.StatusCode.NOT_FOUND),
    (409, "conflict", grpc.StatusCode.ABORTED),
    (429, "too_many_requests", grpc.StatusCode.RESOURCE_EXHAUSTED),
    (503, "unavailable", grpc.StatusCode.UNAVAILABLE),
    (500, "internal", grpc.StatusCode.INTERNAL),
])
def test_each_http_status_has_its_status_code(status: int, code: str,
                                              expected: grpc.StatusCode) -> None:
    assert refusal(status, code, "no").code == expected


def test_a_refusal_has_the_http_error_shape() -> None:
    refused = refusal(404, "not_found", "item 'x' not found", current_version=3)
    assert refused.body == {"error": {"status": 404, "code": "not_found",
                                      "message": "item 'x' not found", "fields": [],
                                      "current_version": 3}}


def test_without_keys_the_tenant_is_the_named_one_or_the_default_whatever_the_token() -> None:
    resolve = tenant_resolver(Gate(None, "default"), "write")
    assert resolve("Bearer anything", "acme") == "acme"
    assert resolve(None, None) == "default"
    with pytest.raises(Denied) as refused:
        resolve(None, "not a tenant!")
    assert refused.value.status == 422


class _OneKeyGate(Gate):
    """A gate that knows one key, whatever is sent."""

    def __init__(self, key: Principal) -> None:
        super().__init__(None, None)
        self._key = key

    def principal(self, authorization: str | None, tenant_header: str | None,
                  client: str | None = None) -> Principal:
        return self._key


def test_a_key_without_the_role_a_servicer_needs_is_refused() -> None:
    resolve = tenant_resolver(_OneKeyGate(Principal("acme", "read")), "write")
    assert tenant_resolver(_OneKeyGate(Principal("acme", "read")), "read")(None, None) == "acme"
    with pytest.raises(Denied) as refused:
        resolve("Bearer mlk_x", None)
    assert (refused.value.status, refused.value.code) == (403, "forbidden")


def test_a_key_limited_to_some_spaces_is_refused_until_grants_are_checked_over_grpc() -> None:
    resolve = tenant_resolver(_OneKeyGate(Principal("acme", "admin", frozenset({"hr"}))))
    with pytest.raises(Denied) as refused:
        resolve("Bearer mlk_x", None)
    assert refused.value.status == 403
    assert "limited to some spaces" in refused.value.message
