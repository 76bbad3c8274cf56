"""The Helm chart in deploy/helm/trainguard, checked by the real `helm` (scripts/bootstrap.sh puts it in
.tools/helm/helm): `helm lint --strict` and `helm template` with the values files in the chart's ci/,
every rendered manifest validated against the Kubernetes 1.33 JSON schemas (kubernetes-validate, strict:
unknown fields fail), the PrometheusRule's groups checked by promtool.

The chart's MySQL subchart comes from an OCI registry that cannot be reached here. The tests render a
copy of the chart whose charts/ holds a stand-in `mysql` chart (Chart.yaml only, no templates): helm
then accepts the declared dependency, and `helm dependency list` checks the stanza against it (name,
version range). Nothing of MySQL itself is rendered, so the production-like values disable it, as a
production install with an external database does.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from trainguard.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "trainguard"
VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
KUBERNETES = "1.33.0"  # the kubectl that comes with helm here; kubernetes-validate ships its schemas
OPERATOR_API = "monitoring.coreos.com/v1"  # Prometheus Operator CRDs: not in Kubernetes' schemas


def helm_bin() -> str:
    local = ROOT / ".tools" / "helm" / "helm"
    path = str(local) if local.exists() else shutil.which("helm")
    assert path, "helm not found: run scripts/bootstrap.sh (it unpacks helm into .tools/helm/helm)"
    return path


def _stub_mysql(chart: Path, version: str) -> None:
    stub = chart / "charts" / "mysql"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "Chart.yaml").write_text(
        f"apiVersion: v2\nname: mysql\nversion: {version}\ndescription: stand-in for the OCI subchart\n"
    )


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of deploy/ (files/alerts.yaml links to ../../../prometheus/alerts.yaml) with the stand-in."""
    root = tmp_path_factory.mktemp("deploy")
    shutil.copytree(ROOT / "deploy" / "helm", root / "helm", symlinks=True)
    shutil.copytree(ROOT / "deploy" / "prometheus", root / "prometheus")
    copy = root / "helm" / "trainguard"
    shutil.rmtree(copy / "charts", ignore_errors=True)
    _stub_mysql(copy, "11.4.0")
    return copy


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([helm_bin(), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def render(chart: Path, *values: Path, sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = ["template", "tg", str(chart), "--namespace", "trainguard"]
    for v in values:
        args += ["-f", str(v)]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def objects(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def container(objs: dict[tuple[str, str], dict[str, Any]], name: str) -> dict[str, Any]:
    c: dict[str, Any] = objs[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0]
    return c


def values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.name)
def test_helm_lint_strict(chart: Path, values: Path) -> None:
    out = helm("lint", "--strict", str(chart), "-f", str(values))
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.name)
def test_rendered_manifests_validate_against_kubernetes_schemas(chart: Path, values: Path) -> None:
    docs = render(chart, values)
    core = [d for d in docs if d["apiVersion"] != OPERATOR_API]
    assert len(core) >= 5
    for doc in core:
        try:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} ({values.name}): {err.message}")


def test_the_schema_validation_catches_a_wrong_manifest(chart: Path) -> None:
    deployment = objects(render(chart, CHART / "ci" / "default-values.yaml"))[
        ("Deployment", "tg-trainguard-api")
    ]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = [1]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)


def test_default_render_has_the_expected_objects(chart: Path) -> None:
    objs = objects(render(chart, CHART / "ci" / "default-values.yaml"))
    assert set(objs) == {
        ("ConfigMap", "tg-trainguard-config"),
        ("Secret", "tg-trainguard-secrets"),
        ("Secret", "tg-trainguard-ssh"),
        ("Deployment", "tg-trainguard-control-worker"),
        ("Deployment", "tg-trainguard-cluster-worker"),
        ("Deployment", "tg-trainguard-api"),
        ("Service", "tg-trainguard-api"),
    }
    control = container(objs, "tg-trainguard-control-worker")
    assert control["args"][:3] == ["worker", "--queues", "control"]
    cluster = objs[("Deployment", "tg-trainguard-cluster-worker")]["spec"]["template"]["spec"]
    assert cluster["containers"][0]["args"][:3] == ["worker", "--queues", "cluster"]
    assert {"name": "TRAINGUARD_CLUSTER__RUNNER", "value": "ssh"} in cluster["containers"][0]["env"]
    assert cluster["volumes"][1]["secret"]["secretName"] == "tg-trainguard-ssh"
    api = container(objs, "tg-trainguard-api")
    assert api["args"][0] == "api" and api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["image"] == "ghcr.io/trainguard/trainguard:0.1.0"
    secret = objs[("Secret", "tg-trainguard-secrets")]["stringData"]
    assert secret["TRAINGUARD_AUDIT__URL"] == "mysql+pymysql://trainguard:change-me@tg-mysql:3306/trainguard"
    assert "TRAINGUARD_TEMPORAL__API_KEY" not in secret  # empty values are not rendered as empty keys


def test_configmap_settings_load_into_trainguard_settings(chart: Path, tmp_path: Path) -> None:
    overrides = {
        "mode": "action",
        "controller": {"environment": "^prod$", "acknowledgeSchedulerActions": True},
        "watchdog": {"mode": "observe", "acknowledgeSchedulerActions": False, "environmentPattern": "^prod"},
        "temporal": {"tls": {"enabled": True, "existingSecret": "temporal-mtls"}, "apiKey": "k"},
        "logs": {"backend": "loki", "url": "https://loki:3100", "tenant": "ml", "jobIdLabel": "slurm_job_id"},
    }
    objs = objects(render(chart, values_file(tmp_path, overrides)))
    doc = yaml.safe_load(objs[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    settings = Settings.model_validate(doc)
    assert settings.cluster.mode == "action" and settings.cluster.acknowledge_scheduler_actions is True
    assert settings.cluster.environment_pattern == "^prod$"
    assert settings.watchdog.mode == "observe" and settings.watchdog.acknowledge_scheduler_actions is False
    assert settings.watchdog.environment_pattern == "^prod"
    assert settings.temporal.tls is True
    assert settings.temporal.tls_cert == "/etc/trainguard/temporal-tls/tls.crt"
    assert settings.logs.labels["job_id"] == "slurm_job_id" and settings.logs.tenant == "ml"
    assert objs[("Secret", "tg-trainguard-secrets")]["stringData"]["TRAINGUARD_TEMPORAL__API_KEY"] == "k"
    control = objs[("Deployment", "tg-trainguard-control-worker")]["spec"]["template"]["spec"]
    assert any(v["name"] == "temporal-tls" for v in control["volumes"])


def test_limits_and_the_node_log_source_reach_the_settings(chart: Path, tmp_path: Path) -> None:
    """The cluster-wide safety limits and the per-node kernel-log source are set from the chart too (a
    Helm-only site could not tighten the exclusion budget or follow Xids in its nodes' Loki streams)."""
    defaults = Settings.model_validate(
        yaml.safe_load(
            objects(render(chart))[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"]
        )
    )
    assert defaults.limits == Settings().limits  # the chart's defaults are the code's
    assert (defaults.logs.node_log_label, defaults.logs.node_log_path) == ("", "")
    overrides = {
        "limits": {
            "exclusionsPerHour": 3,
            "stormAction": "wait",
            "stormSettleSeconds": 2.5,
            "enabled": False,
        },
        "logs": {"backend": "loki", "url": "https://loki:3100", "nodeLogLabel": "host"},
    }
    objs = objects(render(chart, values_file(tmp_path, overrides)))
    settings = Settings.model_validate(
        yaml.safe_load(objs[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    )
    assert settings.limits.exclusions_per_hour == 3 and settings.limits.storm_action == "wait"
    assert settings.limits.storm_settle_s == 2.5 and settings.limits.enabled is False
    assert settings.limits.requeues_per_hour == 60  # an unset key keeps its default
    assert settings.logs.node_log_label == "host"


def test_production_values_use_external_db_and_existing_secrets(chart: Path) -> None:
    objs = objects(render(chart, CHART / "ci" / "production-values.yaml"))
    assert not [key for key in objs if key[0] == "Secret"]  # all secrets come from outside the chart
    for name in ("tg-trainguard-control-worker", "tg-trainguard-cluster-worker", "tg-trainguard-api"):
        spec = objs[("Deployment", name)]["spec"]["template"]["spec"]
        assert spec["containers"][0]["envFrom"] == [{"secretRef": {"name": "trainguard-secrets"}}]
    cluster = objs[("Deployment", "tg-trainguard-cluster-worker")]["spec"]["template"]["spec"]
    ssh = next(v for v in cluster["volumes"] if v["name"] == "ssh")
    assert ssh["secret"]["secretName"] == "trainguard-slurm-ssh"
    doc = yaml.safe_load(objs[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    settings = Settings.model_validate(doc)
    assert settings.cluster.mode == "action" and settings.cluster.environment_pattern == "^prod$"
    assert settings.temporal.control_task_queue == "trainguard-control"
    assert settings.temporal.ui_url == "https://temporal-ui.example.org"  # the console's workflow links


def test_a_canary_release_gets_its_own_queues(chart: Path, tmp_path: Path) -> None:
    """Two releases in one Temporal namespace: different cluster names (ClusterWatch, cluster queue)
    and control queues, so neither runs the other's workflows; environments split the jobs."""
    canary = {
        "cluster": {"name": "a100-east-canary"},
        "temporal": {"controlTaskQueue": "trainguard-control-canary"},
        "controller": {"environment": "^canary$", "acknowledgeSchedulerActions": True},
        "mode": "action",
    }
    objs = objects(render(chart, values_file(tmp_path, canary)))
    doc = yaml.safe_load(objs[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    settings = Settings.model_validate(doc)
    assert settings.temporal.control_task_queue == "trainguard-control-canary"
    assert settings.cluster.name == "a100-east-canary" and settings.cluster.environment_pattern == "^canary$"
    assert "mysql" not in str(objs[("ConfigMap", "tg-trainguard-config")])  # the URL lives in the Secret


def test_monitoring_values_ship_the_alerts_and_scrape_every_pod(chart: Path, tmp_path: Path) -> None:
    objs = objects(render(chart, CHART / "ci" / "monitoring-values.yaml"))
    rule = objs[("PrometheusRule", "tg-trainguard")]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == shipped["groups"]
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package"
    check = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    monitor = objs[("PodMonitor", "tg-trainguard")]["spec"]
    assert [e["port"] for e in monitor["podMetricsEndpoints"]] == ["metrics"]
    for name in ("tg-trainguard-control-worker", "tg-trainguard-cluster-worker"):
        c = container(objs, name)
        assert c["args"][3:] == ["--metrics-port", "9100", "--metrics-host", "0.0.0.0"]
        assert c["ports"] == [{"name": "metrics", "containerPort": 9100}]
    api = container(objs, "tg-trainguard-api")
    assert {"name": "metrics", "containerPort": 9102} in api["ports"]
    doc = yaml.safe_load(objs[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    assert Settings.model_validate(doc).api.metrics_port == 9102


def test_without_monitoring_no_operator_objects(chart: Path, tmp_path: Path) -> None:
    objs = objects(render(chart, values_file(tmp_path, {"workers": {"metricsPort": 0}})))
    assert not [k for k in objs if k[0] in ("PrometheusRule", "PodMonitor")]
    assert container(objs, "tg-trainguard-control-worker")["args"] == ["worker", "--queues", "control"]


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
        {"workers": {"metricsPort": 70000}},
        {"podMonitor": {"interval": "often"}},
        {"temporal": {"controlTaskQueue": "two words"}},
        {"limits": {"stormAction": "panic"}},
        {"limits": {"exclusionsPerHour": -1}},
        {"limits": {"requeuePerHour": 5}},
    ],
)
def test_helm_refuses_values_outside_the_schema(chart: Path, tmp_path: Path, bad: dict[str, Any]) -> None:
    out = helm("lint", "--strict", str(chart), "-f", str(values_file(tmp_path, bad)), check=False)
    assert out.returncode != 0
    assert "values don't meet the specifications of the schema" in out.stdout + out.stderr


def test_hostile_values_stay_inside_their_yaml_strings(chart: Path, tmp_path: Path) -> None:
    hostile = {"controller": {"environment": 'x"\n  injected: true'}}
    objs = objects(render(chart, values_file(tmp_path, hostile)))
    doc = yaml.safe_load(objs[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    assert doc["cluster"]["environment_pattern"] == 'x"\n  injected: true'
    assert "injected" not in doc["cluster"]


def test_the_mysql_dependency_stanza_is_valid(chart: Path, tmp_path: Path) -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    (mysql,) = [d for d in meta["dependencies"] if d["name"] == "mysql"]
    assert mysql["repository"].startswith("oci://") and mysql["condition"] == "mysql.enabled"
    assert yaml.safe_load((CHART / "values.yaml").read_text())["mysql"]["enabled"] is True

    def status(stub_version: str) -> str:
        copy = tmp_path / stub_version / "trainguard"
        shutil.copytree(chart, copy)  # the alerts link resolved: this copy has no ../prometheus
        shutil.rmtree(copy / "charts")
        _stub_mysql(copy, stub_version)
        rows = helm("dependency", "list", str(copy)).stdout.splitlines()
        (row,) = [r.split("\t") for r in rows if r.startswith("mysql")]
        return row[-1].strip()

    # helm matches the declared range (11.x.x) against a chart that carries a version, as it would the
    # fetched subchart: an 11.y release satisfies it, a 12.0 release does not.
    assert status("11.4.0") == "unpacked"
    assert status("12.0.0") == "wrong version"


def test_named_credentials_and_read_protection(
    chart: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = {
        "api": {
            "operators": [
                {"name": "ana", "role": "operator", "token": "ana-token-0123456789"},
                {"name": "root-ops", "role": "admin", "token": "admin-token-0123456789"},
            ],
            "trustedHeader": {
                "header": "X-Forwarded-User",
                "trustedProxies": ["10.0.0.0/8"],
                "roles": {"grace": "admin"},
                "defaultRole": "viewer",
            },
        }
    }
    objs = objects(render(chart, values_file(tmp_path, overrides)))
    env = objs[("Secret", "tg-trainguard-secrets")]["stringData"]
    doc = yaml.safe_load(objs[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    assert "0123456789" not in str(doc)  # tokens only in the Secret
    monkeypatch.setenv("TRAINGUARD_API__OPERATORS", env["TRAINGUARD_API__OPERATORS"])
    settings = Settings(**doc)  # the environment (from the Secret) wins over the file, as in the pod
    assert [(o.name, o.role.value) for o in settings.api.operators] == [
        ("ana", "operator"),
        ("root-ops", "admin"),
    ]
    assert settings.api.operators[0].token.get_secret_value() == "ana-token-0123456789"
    assert settings.api.read_requires_token is True and settings.api.docs == "offline"
    assert settings.api.trusted_header.roles == {"grace": "admin"}
    assert settings.api.trusted_header.trusted_proxies == ["10.0.0.0/8"]
    # Defaults: reads need a credential, no header trust.
    default = objects(render(chart, CHART / "ci" / "default-values.yaml"))
    doc = yaml.safe_load(default[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    assert Settings.model_validate(doc).api.read_requires_token is True
    assert "trusted_header" not in doc["api"]
    short = {"api": {"operators": [{"name": "x", "role": "operator", "token": "short"}]}}
    assert helm(
        "lint", "--strict", str(chart), "-f", str(values_file(tmp_path, short)), check=False
    ).returncode


def test_slurmrestd_mode_mounts_the_token_and_drops_ssh(chart: Path, tmp_path: Path) -> None:
    overrides = {
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
    docs = render(chart, values_file(tmp_path, overrides))
    core = [d for d in docs if d["apiVersion"] != OPERATOR_API]
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    objs = objects(docs)
    config = yaml.safe_load(objs[("ConfigMap", "tg-trainguard-config")]["data"]["trainguard.yaml"])
    assert "eyJ.secret.jwt" not in str(config)  # the token lives in the Secret only
    settings = Settings.model_validate(config)
    rest = settings.cluster.slurmrestd
    assert settings.cluster.access == "slurmrestd" and rest.url == "http://slurm-restapi.slurm.svc:6820"
    assert rest.token_file == "/etc/trainguard/slurmrestd/token" and rest.api_version == "v0.0.42"
    assert objs[("Secret", "tg-trainguard-slurmrestd")]["stringData"]["token"] == "eyJ.secret.jwt"
    assert ("Secret", "tg-trainguard-ssh") not in objs
    worker = container(objs, "tg-trainguard-cluster-worker")
    assert not [e for e in worker["env"] if e["name"] == "TRAINGUARD_CLUSTER__RUNNER"]
    mounts = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
    assert mounts.get("slurmrestd") == "/etc/trainguard/slurmrestd" and "ssh" not in mounts
    spec = objs[("Deployment", "tg-trainguard-cluster-worker")]["spec"]["template"]["spec"]
    assert next(v for v in spec["volumes"] if v["name"] == "slurmrestd")["secret"]["secretName"] == (
        "tg-trainguard-slurmrestd"
    )

    rotated = {
        "clusterWorker": {"slurmrestd": {"enabled": True, "url": "https://r", "existingSecret": "jwt"}}
    }
    objs = objects(render(chart, values_file(tmp_path, rotated)))
    assert ("Secret", "tg-trainguard-slurmrestd") not in objs
    spec = objs[("Deployment", "tg-trainguard-cluster-worker")]["spec"]["template"]["spec"]
    assert next(v for v in spec["volumes"] if v["name"] == "slurmrestd")["secret"]["secretName"] == "jwt"
    bad = values_file(tmp_path, {"clusterWorker": {"slurmrestd": {"url": "slurm:6820"}}})
    assert helm("template", "tg", str(chart), "-f", str(bad), check=False).returncode != 0
