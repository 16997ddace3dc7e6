"""Typed settings from ``MEMLEDGER_*`` variables: safe defaults, errors that name the variable."""

import os

import pytest

from memledger_platform import bus
from memledger_platform.settings import ENV_PREFIX, SettingsError, load_settings

DISTRIBUTED = {
    "MEMLEDGER_MODE": "distributed",
    "MEMLEDGER_POSTGRES_DSN": "postgresql://memledger@db/memledger",
    "MEMLEDGER_NATS_URL": "nats://bus:4222",
}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees only the ``MEMLEDGER_*`` variables it sets itself."""
    for name in list(os.environ):
        if name.upper().startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


def set_env(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_the_defaults_are_embedded_mode_without_endpoints() -> None:
    settings = load_settings()

    assert settings.mode == "embedded"
    assert (settings.postgres_dsn, settings.nats_url) == (None, None)
    assert settings.http_host == "127.0.0.1"
    assert settings.subjects.prefix == "memledger"


def test_a_variable_overrides_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {"MEMLEDGER_HTTP_PORT": "9000", "MEMLEDGER_NATS_PREFIX": "t1"})

    settings = load_settings()

    assert settings.http_port == 9000
    assert settings.subjects.intake("acme", "create_space") == "t1.in.acme.create_space"


def test_a_port_out_of_range_fails_with_a_message_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_HTTP_PORT", "99999")

    with pytest.raises(SettingsError, match="MEMLEDGER_HTTP_PORT"):
        load_settings()


@pytest.mark.parametrize(("variable", "value"), [
    ("MEMLEDGER_MODE", "clustered"),
    ("MEMLEDGER_POSTGRES_POOL_SIZE", "0"),
    ("MEMLEDGER_NATS_PREFIX", "Has.Dots"),
    ("MEMLEDGER_DEFAULT_TENANT", "not a slug"),
    ("MEMLEDGER_LOG_LEVEL", "verbose"),
    ("MEMLEDGER_WRITER_MAX_GROUP_BYTES", "1000"),
    ("MEMLEDGER_WRITER_COMMIT_TIMEOUT_SECONDS", "0"),
    ("MEMLEDGER_RANKING_ASK_WEIGHT", "1.5"),
    ("MEMLEDGER_RANKING_ASK_WEIGHT", "-0.1"),
    ("MEMLEDGER_RANKING_ASK_WEIGHT", "a lot"),
])
def test_a_bad_value_fails_with_a_message_naming_its_variable(
        monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)

    with pytest.raises(SettingsError, match=variable):
        load_settings()


def test_a_commit_timeout_not_below_the_request_timeout_is_refused_naming_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {"MEMLEDGER_WRITER_COMMIT_TIMEOUT_SECONDS": "30",
                          "MEMLEDGER_HTTP_REQUEST_TIMEOUT_SECONDS": "30"})

    with pytest.raises(SettingsError, match="MEMLEDGER_WRITER_COMMIT_TIMEOUT_SECONDS must be "
                       "below MEMLEDGER_HTTP_REQUEST_TIMEOUT_SECONDS"):
        load_settings()


def test_distributed_mode_without_endpoints_names_both_missing_variables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_MODE", "distributed")

    with pytest.raises(SettingsError) as failure:
        load_settings()

    assert "MEMLEDGER_POSTGRES_DSN" in str(failure.value)
    assert "MEMLEDGER_NATS_URL" in str(failure.value)


def test_distributed_mode_with_one_endpoint_names_only_the_missing_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {"MEMLEDGER_MODE": "distributed",
                          "MEMLEDGER_POSTGRES_DSN": DISTRIBUTED["MEMLEDGER_POSTGRES_DSN"]})

    with pytest.raises(SettingsError) as failure:
        load_settings()

    assert "MEMLEDGER_NATS_URL" in str(failure.value)
    assert "MEMLEDGER_POSTGRES_DSN" not in str(failure.value)


def test_the_tenant_fallback_is_default_in_embedded_mode() -> None:
    assert load_settings().tenant_fallback == "default"


def test_there_is_no_tenant_fallback_in_distributed_mode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, DISTRIBUTED)

    settings = load_settings()

    assert settings.mode == "distributed"
    assert settings.tenant_fallback is None


def test_a_configured_default_tenant_is_the_fallback_in_any_mode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, DISTRIBUTED | {"MEMLEDGER_DEFAULT_TENANT": "acme"})

    assert load_settings().tenant_fallback == "acme"


def test_overrides_take_precedence_over_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_HTTP_PORT", "9000")

    assert load_settings(http_port=9001).http_port == 9001


def test_a_cluster_is_named_by_its_nodes_urls_separated_by_commas(
        monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {**DISTRIBUTED, "MEMLEDGER_NATS_URL":
                          "nats://a:4222, nats://u:p@b:4222,tls://c:4222"})

    settings = load_settings()

    assert settings.nats_url == "nats://a:4222,nats://u:p@b:4222,tls://c:4222"
    assert bus.servers(settings.nats_url) == ["nats://a:4222", "nats://u:p@b:4222",
                                              "tls://c:4222"]


@pytest.mark.parametrize("url", ["bus:4222", "nats://a:4222,,nats://b:4222",
                                 "http://bus:4222", "nats://a b:4222"])
def test_a_nats_url_that_is_not_one_is_refused_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    set_env(monkeypatch, {**DISTRIBUTED, "MEMLEDGER_NATS_URL": url})

    with pytest.raises(SettingsError, match="MEMLEDGER_NATS_URL"):
        load_settings()
