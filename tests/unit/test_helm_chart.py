"""The Helm chart in deploy/helm/trainguard, checked without a `helm` binary (none is available here).

Two checks instead of `helm template` + `helm lint`:
1. values.yaml (and the overrides below) validate against values.schema.json with `jsonschema`,
   and bad values are refused, as helm does before rendering.
2. The templates are rendered by `render`, a deliberately tiny interpreter of the Go-template subset
   the chart restricts itself to: `{{ .Values.a.b }}`, `.Release.Name/.Namespace`, `.Chart.*`, the
   pipes `quote` and `toJson`, `{{ if X }}` / `{{ if not X }}` / `{{ else }}` / `{{ end }}` and the
   `{{-` / `-}}` whitespace trimming. Anything else raises, so a template that strays outside the
   subset fails here rather than rendering wrongly. Each rendered manifest must be valid YAML with
   the expected kinds, and the settings file in the ConfigMap must load into TrainGuard's Settings.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from trainguard.settings import Settings

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "trainguard"
_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


class UnsupportedTemplate(ValueError):
    pass


def _lookup(path: str, ctx: dict[str, Any]) -> Any:
    if not path.startswith("."):
        raise UnsupportedTemplate(f"unsupported expression {path!r}")
    value: Any = ctx
    for part in path[1:].split("."):
        if not isinstance(value, dict):
            raise UnsupportedTemplate(f"{path}: {part!r} looked up on a non-map")
        value = value.get(part)  # helm renders a missing key as empty, so do we
    return value


def _go_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _truthy(value: Any) -> bool:
    return bool(value)  # Go templates: false, 0, nil, "" and empty collections are false


def _evaluate(expr: str, ctx: dict[str, Any]) -> str:
    head, *pipes = [p.strip() for p in expr.split("|")]
    value = _lookup(head, ctx)
    rendered: str | None = None
    for pipe in pipes:
        if pipe == "quote":
            rendered = json.dumps(_go_string(value) if rendered is None else rendered)
        elif pipe == "toJson":
            rendered = json.dumps(value, separators=(",", ":"))
        else:
            raise UnsupportedTemplate(f"unsupported pipe {pipe!r}")
    return _go_string(value) if rendered is None else rendered


def render(text: str, ctx: dict[str, Any]) -> str:
    # Whitespace trimming first, as Go does: `{{-` eats whitespace before, `-}}` after.
    text = re.sub(r"\s*\{\{-", "{{-", text)
    text = re.sub(r"-\}\}\s*", "-}}", text)
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch active, any branch taken)
    pos = 0
    for match in _ACTION.finditer(text):
        active = all(frame[0] for frame in stack)
        if active:
            out.append(text[pos : match.start()])
        pos = match.end()
        body = match.group(2)
        if body.startswith("/*"):
            continue
        words = body.split()
        if words[0] == "if":
            negate = len(words) == 3 and words[1] == "not"
            if len(words) != (3 if negate else 2):
                raise UnsupportedTemplate(f"unsupported condition {body!r}")
            cond = _truthy(_lookup(words[-1], ctx)) != negate
            stack.append((cond, cond))
        elif words == ["else"]:
            if not stack:
                raise UnsupportedTemplate("else without if")
            _, taken = stack.pop()
            stack.append((not taken, True))
        elif words == ["end"]:
            if not stack:
                raise UnsupportedTemplate("end without if")
            stack.pop()
        elif active:
            out.append(_evaluate(body, ctx))
    if stack:
        raise UnsupportedTemplate("unterminated if")
    out.append(text[pos:])
    return "".join(out)


def _values(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
        for key, value in extra.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                merge(base[key], value)
            else:
                base[key] = value

    merge(values, copy.deepcopy(overrides or {}))
    return values


def _schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def render_chart(values: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    ctx = {
        "Values": values,
        "Release": {"Name": "tg", "Namespace": "trainguard"},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]},
    }
    rendered: dict[str, list[dict[str, Any]]] = {}
    for template in sorted((CHART / "templates").glob("*.yaml")):
        text = render(template.read_text(), ctx)
        docs = [d for d in yaml.safe_load_all(text) if d]
        rendered[template.name] = docs
    return rendered


def _kinds(rendered: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for docs in rendered.values() for d in docs}


def test_chart_declares_the_mysql_subchart_for_trials() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    mysql = [d for d in chart["dependencies"] if d["name"] == "mysql"]
    assert mysql and mysql[0]["condition"] == "mysql.enabled"


def test_default_values_validate_and_carry_the_required_keys() -> None:
    values = _values()
    jsonschema.validate(values, _schema())
    assert values["mode"] == "observe"
    for section, key in [
        ("controller", "environment"),
        ("controller", "acknowledgeSchedulerActions"),
        ("watchdog", "enabled"),
        ("watchdog", "mode"),
        ("watchdog", "acknowledgeSchedulerActions"),
        ("watchdog", "environmentPattern"),
    ]:
        assert key in values[section]


@pytest.mark.parametrize(
    "bad",
    [
        {"mode": "yolo"},
        {"watchdog": {"mode": "sometimes"}},
        {"controller": {"acknowledgeSchedulerActions": "yes"}},
        {"cluster": {"name": "lab; rm -rf /"}},
        {"temporal": {"address": "no-port"}},
        {"unknownKey": 1},
        {"clusterWorker": {"replicas": 3}},
    ],
)
def test_schema_refuses_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_values(bad), _schema())


def test_default_render_has_the_expected_objects() -> None:
    objects = _kinds(render_chart(_values()))
    expected = {
        ("ConfigMap", "tg-trainguard-config"),
        ("Secret", "tg-trainguard-secrets"),
        ("Secret", "tg-trainguard-ssh"),
        ("Deployment", "tg-trainguard-control-worker"),
        ("Deployment", "tg-trainguard-cluster-worker"),
        ("Deployment", "tg-trainguard-api"),
        ("Service", "tg-trainguard-api"),
    }
    assert set(objects) == expected
    control = objects[("Deployment", "tg-trainguard-control-worker")]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert control["args"][:3] == ["worker", "--queues", "control"]
    cluster = objects[("Deployment", "tg-trainguard-cluster-worker")]["spec"]["template"]["spec"]
    assert cluster["containers"][0]["args"] == ["worker", "--queues", "cluster"]
    assert {"name": "TRAINGUARD_CLUSTER__RUNNER", "value": "ssh"} in cluster["containers"][0]["env"]
    assert cluster["volumes"][1]["secret"]["secretName"] == "tg-trainguard-ssh"
    api = objects[("Deployment", "tg-trainguard-api")]["spec"]["template"]["spec"]["containers"][0]
    assert api["args"][0] == "api" and api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    secret = objects[("Secret", "tg-trainguard-secrets")]["stringData"]
    assert secret["TRAINGUARD_AUDIT__URL"] == "mysql+pymysql://trainguard:change-me@tg-mysql:3306/trainguard"
    assert "TRAINGUARD_TEMPORAL__API_KEY" not in secret  # empty values are not rendered as empty keys


def test_configmap_settings_load_into_trainguard_settings() -> None:
    values = _values(
        {
            "mode": "action",
            "controller": {"environment": "^prod$", "acknowledgeSchedulerActions": True},
            "watchdog": {
                "mode": "observe",
                "acknowledgeSchedulerActions": False,
                "environmentPattern": "^prod",
            },
            "temporal": {"tls": {"enabled": True, "existingSecret": "temporal-mtls"}, "apiKey": "k"},
            "logs": {
                "backend": "loki",
                "url": "https://loki:3100",
                "tenant": "ml",
                "jobIdLabel": "slurm_job_id",
            },
        }
    )
    jsonschema.validate(values, _schema())
    objects = _kinds(render_chart(values))
    doc = yaml.safe_load(objects[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    settings = Settings.model_validate(doc)
    assert settings.cluster.mode == "action" and settings.cluster.acknowledge_scheduler_actions is True
    assert settings.cluster.environment_pattern == "^prod$"
    assert settings.watchdog.mode == "observe" and settings.watchdog.acknowledge_scheduler_actions is False
    assert settings.watchdog.environment_pattern == "^prod"
    assert (
        settings.temporal.tls is True and settings.temporal.tls_cert == "/etc/trainguard/temporal-tls/tls.crt"
    )
    assert settings.logs.labels["job_id"] == "slurm_job_id" and settings.logs.tenant == "ml"
    assert objects[("Secret", "tg-trainguard-secrets")]["stringData"]["TRAINGUARD_TEMPORAL__API_KEY"] == "k"
    control = objects[("Deployment", "tg-trainguard-control-worker")]["spec"]["template"]["spec"]
    assert any(v["name"] == "temporal-tls" for v in control["volumes"])


def test_production_values_use_external_db_and_existing_secrets() -> None:
    values = _values(
        {
            "mysql": {"enabled": False},
            "audit": {"url": "mysql+pymysql://tg:pw@db.internal:3306/tg"},
            "api": {"enabled": False},
            "clusterWorker": {"ssh": {"existingSecret": "slurm-login-key"}},
        }
    )
    jsonschema.validate(values, _schema())
    objects = _kinds(render_chart(values))
    assert ("Deployment", "tg-trainguard-api") not in objects and (
        "Secret",
        "tg-trainguard-ssh",
    ) not in objects
    secret = objects[("Secret", "tg-trainguard-secrets")]["stringData"]
    assert secret["TRAINGUARD_AUDIT__URL"] == "mysql+pymysql://tg:pw@db.internal:3306/tg"
    cluster = objects[("Deployment", "tg-trainguard-cluster-worker")]["spec"]["template"]["spec"]
    assert cluster["volumes"][1]["secret"]["secretName"] == "slurm-login-key"


def test_hostile_values_stay_inside_their_yaml_strings() -> None:
    values = _values({"controller": {"environment": 'x"\n  injected: true'}})
    objects = _kinds(render_chart(values))
    doc = yaml.safe_load(objects[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    assert doc["cluster"]["environment_pattern"] == 'x"\n  injected: true'
    assert "injected" not in doc["cluster"]


def test_renderer_refuses_syntax_outside_the_subset() -> None:
    with pytest.raises(UnsupportedTemplate):
        render('{{ include "x" . }}', {"Values": {}})
    with pytest.raises(UnsupportedTemplate):
        render("{{ .Values.a | b64enc }}", {"Values": {"a": "x"}})
    assert render("a{{- if .Values.on }} b{{- else }} c{{- end }}", {"Values": {"on": False}}) == "a c"


def test_slurmrestd_mode_mounts_the_token_and_drops_ssh() -> None:
    values = _values(
        {
            "clusterWorker": {
                "slurmrestd": {
                    "enabled": True,
                    "url": "http://slurm-restapi.slurm.svc:6820",
                    "user": "trainguard",
                    "apiVersion": "v0.0.42",
                    "token": "eyJ.secret.jwt",
                }
            },
            "logs": {"backend": "loki", "url": "http://loki:3100"},
        }
    )
    jsonschema.validate(values, _schema())
    objects = _kinds(render_chart(values))
    doc = yaml.safe_load(objects[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    assert "eyJ.secret.jwt" not in str(doc)  # the token lives in the Secret only
    settings = Settings.model_validate(doc)
    rest = settings.cluster.slurmrestd
    assert settings.cluster.access == "slurmrestd" and rest.url == "http://slurm-restapi.slurm.svc:6820"
    assert rest.token_file == "/etc/trainguard/slurmrestd/token" and rest.api_version == "v0.0.42"
    assert objects[("Secret", "tg-trainguard-slurmrestd")]["stringData"]["token"] == "eyJ.secret.jwt"
    assert ("Secret", "tg-trainguard-ssh") not in objects
    worker = objects[("Deployment", "tg-trainguard-cluster-worker")]["spec"]["template"]["spec"]
    env = worker["containers"][0]["env"]
    assert not [e for e in env if e["name"] == "TRAINGUARD_CLUSTER__RUNNER"]
    mounts = {m["name"]: m["mountPath"] for m in worker["containers"][0]["volumeMounts"]}
    assert mounts.get("slurmrestd") == "/etc/trainguard/slurmrestd" and "ssh" not in mounts
    secret = next(v for v in worker["volumes"] if v["name"] == "slurmrestd")
    assert secret["secret"]["secretName"] == "tg-trainguard-slurmrestd"

    rotated = _values(
        {"clusterWorker": {"slurmrestd": {"enabled": True, "url": "https://r", "existingSecret": "jwt"}}}
    )
    objects = _kinds(render_chart(rotated))
    assert ("Secret", "tg-trainguard-slurmrestd") not in objects
    worker = objects[("Deployment", "tg-trainguard-cluster-worker")]["spec"]["template"]["spec"]
    assert next(v for v in worker["volumes"] if v["name"] == "slurmrestd")["secret"]["secretName"] == "jwt"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_values({"clusterWorker": {"slurmrestd": {"url": "slurm:6820"}}}), _schema())
