"""The settings in the code, the Helm chart and the compose file are the same set of names.

Every field of ``shared.settings.Settings`` must be reachable from the chart's values (the
ConfigMap's ``config`` map, or a Secret reference in ``secretEnv`` for credentials) and be set
in ``deploy/compose.yaml``; the chart's schema must type it like the code; the defaults must
match the code's unless a deviation is listed here with its reason. A field added to Settings
and forgotten in the chart or compose file fails these tests.

The rendered-chart tests run when Helm is built (``make deploy-tools`` or ``make deploy-check``
builds it into ~/.cache/session-core/bin) and fail without it under ``CI``; everything else reads
the files directly.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import AliasChoices

from shared.settings import Settings
from tests.support.helm import CHART, render

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy" / "compose.yaml"
DOCKERFILE = REPO / "deploy" / "Dockerfile"

# settings that carry credentials: Secret references in the chart, never ConfigMap values
SECRET_ENV = frozenset(
    {
        "MONGODB_URI",
        "SESSION_CORE_API_KEYS",
        "SESSION_CORE_KAFKA_SASL_USERNAME",
        "SESSION_CORE_KAFKA_SASL_PASSWORD",
        "SESSION_CORE_SEAL_KEY",
    }
)

# chart defaults that deliberately differ from the code's (the code's suit a laptop)
CHART_DEFAULT_DEVIATIONS: dict[str, str] = {
    "KAFKA_BOOTSTRAP_SERVERS": "a Strimzi bootstrap Service, not 127.0.0.1",
    "SESSION_CORE_TOPIC_REPLICATION_FACTOR": "3 on a real Kafka cluster",
    "SESSION_CORE_CREATE_TOPICS": "the chart's topics Job creates the topics",
    "SESSION_CORE_LOG_FORMAT": "json: pods have no TTY, made explicit",
    "SESSION_CORE_HEALTH_PORT": "the chart gives every service a metrics/health port",
    "SESSION_CORE_HEALTH_HOST": "the kubelet's probes and the scrape come from outside the pod",
}
COMPOSE_DEFAULT_DEVIATIONS: dict[str, str] = {
    "KAFKA_BOOTSTRAP_SERVERS": "the kafka service",
    "MONGODB_URI": "the mongo service with its root user",
    "SESSION_CORE_API_KEYS": "a development key",
    "SESSION_CORE_CREATE_TOPICS": "the topics service creates the topics",
    "SESSION_CORE_LOG_FORMAT": "console for people reading `docker compose logs`",
    "SESSION_CORE_HEALTH_PORT": "every service gets a metrics/health port",
    "SESSION_CORE_HEALTH_HOST": "probes and scrapes come from outside the container",
}
# the compose services that run the session-core image
COMPOSE_CORE_SERVICES = ("topics", "admission", "storage", "dispatcher", "receipts", "runtime")


def env_name(field: str) -> str:
    """The environment variable a Settings field is read from (its first alias, if any)."""
    info = Settings.model_fields[field]
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        first = alias.choices[0]
        assert isinstance(first, str)
        return first
    if isinstance(alias, str):
        return alias
    prefix = Settings.model_config.get("env_prefix", "")
    return f"{prefix}{field}".upper()


FIELDS: dict[str, str] = {env_name(f): f for f in Settings.model_fields}
ENV_NAMES = sorted(FIELDS)
PLAIN_ENV = sorted(set(ENV_NAMES) - SECRET_ENV)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


VALUES: dict[str, Any] = load_yaml(CHART / "values.yaml")
SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
COMPOSE_DOC: dict[str, Any] = load_yaml(COMPOSE)


def test_env_names_follow_the_settings_rules() -> None:
    assert {"KAFKA_BOOTSTRAP_SERVERS", "MONGODB_URI", "SESSION_CORE_HTTP_PORT"} <= set(ENV_NAMES)
    assert SECRET_ENV <= set(ENV_NAMES), "a credential setting was renamed in shared/settings.py"
    others = set(ENV_NAMES) - {"KAFKA_BOOTSTRAP_SERVERS", "MONGODB_URI"}
    assert all(n.startswith("SESSION_CORE_") for n in others)


# --- the chart ---------------------------------------------------------------------------


@pytest.mark.parametrize("env", ENV_NAMES)
def test_every_setting_is_reachable_from_the_chart_values(env: str) -> None:
    if env in SECRET_ENV:
        assert env in VALUES["secretEnv"], f"{env}: add a Secret reference to secretEnv"
        assert env not in VALUES["config"], f"{env} carries credentials: not in the ConfigMap"
        assert set(VALUES["secretEnv"][env]) == {"name", "key"}, "a reference, never a value"
    else:
        assert env in VALUES["config"], f"{env}: add it to config in values.yaml"


def test_chart_values_hold_no_unknown_setting() -> None:
    stale = (set(VALUES["config"]) | set(VALUES["secretEnv"])) - set(ENV_NAMES)
    assert not stale, f"values.yaml names settings the code does not have: {sorted(stale)}"


def test_schema_lists_exactly_the_settings_and_refuses_others() -> None:
    config = SCHEMA["properties"]["config"]
    secret = SCHEMA["properties"]["secretEnv"]
    assert set(config["properties"]) == set(PLAIN_ENV)
    assert set(secret["properties"]) == SECRET_ENV
    assert config["additionalProperties"] is False
    assert secret["additionalProperties"] is False
    ref = SCHEMA["$defs"]["secretRef"]
    assert ref["additionalProperties"] is False and set(ref["properties"]) == {"name", "key"}


def _json_types(node: dict[str, Any]) -> set[str]:
    if "enum" in node:
        names = {bool: "boolean", int: "integer", float: "number", str: "string"}
        return {"null" if v is None else names[type(v)] for v in node["enum"]}
    t = node["type"]
    return set(t) if isinstance(t, list) else {t}


def _python_types(annotation: Any) -> set[str]:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return {names[a] for a in typing.get_args(annotation)}
    if typing.get_origin(annotation) is typing.Literal:
        return {names[type(a)] for a in typing.get_args(annotation)}
    return {names[annotation]}


@pytest.mark.parametrize("env", PLAIN_ENV)
def test_schema_types_each_setting_like_the_code(env: str) -> None:
    node = SCHEMA["properties"]["config"]["properties"][env]
    want = _python_types(Settings.model_fields[FIELDS[env]].annotation)
    got = _json_types(node)
    if "number" in want:  # JSON Schema's number includes integers
        got = {"number" if t == "integer" else t for t in got}
    assert got == want, f"{env}: schema {got}, code {want}"
    annotation = Settings.model_fields[FIELDS[env]].annotation
    if typing.get_origin(annotation) is typing.Literal:  # the same choices, not only types
        assert set(node["enum"]) == set(typing.get_args(annotation)), env


@pytest.mark.parametrize("env", PLAIN_ENV)
def test_chart_defaults_mirror_the_code(env: str) -> None:
    code_default = Settings.model_fields[FIELDS[env]].default
    chart_default = VALUES["config"][env]
    if env in CHART_DEFAULT_DEVIATIONS:
        assert chart_default != code_default, f"{env} no longer deviates: drop the exception"
    else:
        assert chart_default == code_default, (
            f"{env}: chart {chart_default!r}, code {code_default!r}"
        )


def _env_string(value: Any) -> str:
    """What the chart's envValue helper renders: whole numbers as integers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _settings_from_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Settings:
    for name in list(os.environ):
        if name.startswith("SESSION_CORE_") or name in ("KAFKA_BOOTSTRAP_SERVERS", "MONGODB_URI"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


def test_chart_config_values_are_accepted_by_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {k: _env_string(v) for k, v in VALUES["config"].items() if v is not None}
    s = _settings_from_env(monkeypatch, env)
    assert s.http_port == VALUES["config"]["SESSION_CORE_HTTP_PORT"]
    assert s.max_body_bytes == VALUES["config"]["SESSION_CORE_MAX_BODY_BYTES"]
    assert s.create_topics is False


def test_templates_render_config_and_secret_references() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    configmap = (CHART / "templates" / "configmap.yaml").read_text()
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    assert "range $name, $value := .Values.config" in helpers
    assert 'include "session-core.configData"' in configmap
    assert "range $name, $ref := .Values.secretEnv" in helpers and "secretKeyRef" in helpers
    assert "configMapRef" in deployment and 'include "session-core.secretEnv"' in deployment
    assert not list((CHART / "templates").glob("secret*.yaml")), "the chart creates no Secret"


# --- the rendered chart (needs Helm, built by `make deploy-check`) ----------------------


def test_rendered_chart_sets_every_setting() -> None:
    refs = [f"--set=secretEnv.{n}.name=s-{n.lower().replace('_', '-')}" for n in SECRET_ENV]
    docs = render(
        *refs,
        "--set=config.SESSION_CORE_KAFKA_SASL_MECHANISM=PLAIN",
        "--set=config.SESSION_CORE_KAFKA_SSL_CAFILE=/ca.pem",
        "--set=config.SESSION_CORE_KAFKA_SSL_CERTFILE=/client.pem",
        "--set=config.SESSION_CORE_KAFKA_SSL_KEYFILE=/client.key",
        "--set=config.SESSION_CORE_MONGODB_TLS_CA_FILE=/mongo-ca.pem",
        "--set=config.SESSION_CORE_MONGODB_TLS_CERTIFICATE_KEY_FILE=/mongo-client.pem",
    )
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert set(configmap["data"]) == set(PLAIN_ENV)
    assert configmap["data"]["SESSION_CORE_MAX_BODY_BYTES"] == "16777216"  # not 1.6777216e+07
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert len(deployments) == 4
    for dep in deployments:
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert set(env) >= SECRET_ENV
        for name in SECRET_ENV:
            assert "value" not in env[name], f"{name} must come from a Secret"
            assert env[name]["valueFrom"]["secretKeyRef"]["name"].startswith("s-")
        assert container["envFrom"] == [{"configMapRef": {"name": configmap["metadata"]["name"]}}]
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_rendered_default_install_has_no_plain_text_credentials() -> None:
    docs = render()
    text = yaml.safe_dump_all(docs)
    for name in SECRET_ENV:
        assert not re.search(rf"name: {name}\n\s+value:", text), name
    kinds = sorted(d["kind"] for d in docs)
    assert kinds.count("Deployment") == 4 and "Secret" not in kinds


# --- compose -----------------------------------------------------------------------------


@pytest.mark.parametrize("service", COMPOSE_CORE_SERVICES)
def test_compose_sets_every_setting(service: str) -> None:
    env = COMPOSE_DOC["services"][service]["environment"]
    missing = set(ENV_NAMES) - set(env)
    assert not missing, f"compose service {service} lacks {sorted(missing)}"
    stale = {k for k in env if k.startswith("SESSION_CORE_")} - set(ENV_NAMES)
    assert not stale, f"compose service {service} sets unknown settings {sorted(stale)}"


def _interpolate(value: str) -> str:
    """Compose's ${VAR:-default} with an empty shell environment."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}", r"\1", value)


def test_compose_values_are_accepted_by_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = COMPOSE_DOC["services"]["admission"]["environment"]
    env = {k: _interpolate(str(v)) for k, v in raw.items() if v is not None}
    s = _settings_from_env(monkeypatch, env)
    for name, field in FIELDS.items():
        value, default = getattr(s, field), Settings.model_fields[field].default
        if name in COMPOSE_DEFAULT_DEVIATIONS:
            assert value != default, f"{name} no longer deviates: drop the exception"
        else:
            assert value == default, f"{name}: compose {value!r}, code {default!r}"


def test_chart_and_compose_agree_on_ports() -> None:
    env = COMPOSE_DOC["services"]["admission"]["environment"]
    for name in ("SESSION_CORE_HTTP_PORT", "SESSION_CORE_HEALTH_PORT"):
        assert int(env[name]) == VALUES["config"][name] != 0


# --- the image ---------------------------------------------------------------------------


def test_dockerfile_runs_as_the_chart_user_without_build_tools() -> None:
    text = DOCKERFILE.read_text()
    final = text[text.rindex("\nFROM ") :]
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.M)
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", final.strip().splitlines()[0])
    uid = VALUES["podSecurityContext"]["runAsUser"]
    assert f"USER {uid}:{uid}" in final and "--uid 10001" in final and uid == 10001
    assert 'ENTRYPOINT ["session-core"]' in final
    assert "PYTHONDONTWRITEBYTECODE=1" in final
    assert not re.search(r"apt-get|gcc|build-essential|pip install", final)
    dockerignore = (REPO / ".dockerignore").read_text().split()
    assert dockerignore[dockerignore.index("*") + 1 :][:3] == [
        "!pyproject.toml",
        "!shared/",
        "!services/",
    ]


# --- the chart README --------------------------------------------------------------------


def test_chart_readme_lists_every_value() -> None:
    spec = importlib.util.spec_from_file_location("gen_readme", REPO / "deploy/helm/gen_readme.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    readme = (CHART / "README.md").read_text()
    assert gen.render(readme) == readme, "run: python deploy/helm/gen_readme.py"
    for env in ENV_NAMES:
        assert f"`config.{env}`" in readme or f"`secretEnv.{env}.name`" in readme, env
