"""One typed settings object: a YAML file (TRAINGUARD_CONFIG or --config) plus environment variables.

Environment variables override the file: TRAINGUARD_<SECTION>__<KEY>, e.g. TRAINGUARD_AUDIT__URL.
Validated at start; `load_settings` raises SettingsError with every problem listed.
"""

from __future__ import annotations

import ipaddress
import os
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from trainguard.models import Mode
from trainguard.policy.config import PolicyConfig
from trainguard.policy.limits import ClusterLimits

DEFAULT_STATE_DIR = Path(os.environ.get("TRAINGUARD_HOME", "var"))


class SettingsError(ValueError):
    pass


class Section(BaseModel):
    # A typo in a nested key must fail at start, not be silently ignored.
    model_config = ConfigDict(extra="forbid")


class TemporalSettings(Section):
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    control_task_queue: str = "trainguard-control"
    tls: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    api_key: SecretStr | None = None
    # The Temporal UI's base URL (e.g. http://temporal-ui:8080): the console links each workload to its
    # workflow there. Empty: no link.
    ui_url: str = ""
    # host:port where the Temporal SDK's own metrics (workflow task latency, slots, polls, requests) are
    # served for Prometheus; "" disables them.
    metrics_bind: str = ""
    # Workflows a control worker keeps in its sticky cache. One long-lived workflow per monitored job: when
    # they outnumber the cache, every workflow task replays a whole history (the worker reports it).
    max_cached_workflows: int = Field(default=10_000, ge=1)


class SSHSettings(Section):
    host: str = "127.0.0.1"
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    known_hosts: str | None = "~/.ssh/known_hosts"  # None disables host key checking (never in prod)
    pool_size: int = Field(default=4, ge=1, le=64)
    connect_timeout_s: float = 10.0
    slurm_env: dict[str, str] = Field(default_factory=dict)  # e.g. SLURM_CONF on the login node


class SlurmrestdSettings(Section):
    """slurmrestd with JWT auth (cluster.access: slurmrestd). The token is never logged."""

    url: str = ""  # e.g. https://slurmrestd.example:6820
    user: str = ""  # sent as X-SLURM-USER-NAME; the token must be valid for this user
    token: SecretStr | None = None  # X-SLURM-USER-TOKEN; or:
    token_file: str | None = None  # re-read whenever it changes (rotated tokens); `SLURM_JWT=` prefix ok
    tls_verify: bool = True
    ca_file: str | None = None  # a CA bundle for slurmrestd's certificate (implies tls_verify)
    timeout_s: float = Field(default=30.0, gt=0)
    api_version: str | None = None  # pin e.g. "v0.0.40"; default: the newest served that TrainGuard knows

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not (value.startswith("http://") or value.startswith("https://")):
            raise ValueError("slurmrestd url must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("api_version")
    @classmethod
    def _known_version(cls, value: str | None) -> str | None:
        from trainguard.slurm.restd_api import VERSIONS

        if value is not None and value not in VERSIONS:
            raise ValueError(f"api_version must be one of {', '.join(VERSIONS)}")
        return value


class ClusterSettings(Section):
    name: str = "lab"
    mode: Mode = Mode.OBSERVE
    acknowledge_scheduler_actions: bool = False
    # How Slurm is reached: its commands (through `runner`: this host, or a login node over SSH), or
    # slurmrestd. `runner` also reads job output files when logs.backend is "files".
    access: Literal["cli", "slurmrestd"] = "cli"
    runner: Literal["local", "ssh"] = "local"
    ssh: SSHSettings = SSHSettings()
    slurmrestd: SlurmrestdSettings = SlurmrestdSettings()
    slurm_env: dict[str, str] = Field(default_factory=dict)  # extra env for local commands (SLURM_CONF)
    snapshot_interval_s: float = Field(default=2.0, gt=0)
    environment_pattern: str = ".*"  # only jobs whose opt-in environment matches are watched

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not value or not all(c.isalnum() or c in "-_." for c in value):
            raise ValueError("cluster name must be letters, digits, '-', '_' or '.'")
        return value

    @model_validator(mode="after")
    def _access_complete(self) -> ClusterSettings:
        if self.access != "slurmrestd":
            return self
        rest = self.slurmrestd
        missing = [k for k in ("url", "user") if not getattr(rest, k)]
        if missing:
            raise ValueError(f"cluster.access slurmrestd needs cluster.slurmrestd.{' and .'.join(missing)}")
        if (rest.token is None) == (rest.token_file is None):
            raise ValueError("cluster.access slurmrestd needs exactly one of slurmrestd.token or .token_file")
        return self

    @property
    def task_queue(self) -> str:
        return f"trainguard-cluster-{self.name}"


class AuditSettings(Section):
    url: str = f"sqlite:///{DEFAULT_STATE_DIR / 'audit.db'}"
    # Delete audit rows older than this many days (0 keeps everything); enforced by the control worker
    # every prune_interval_s and by `trainguard audit prune`.
    retention_days: float = Field(default=0.0, ge=0)
    prune_interval_s: float = Field(default=3600.0, gt=0)


class WatchSettings(Section):
    poll_interval_s: float = Field(default=1.0, gt=0)
    # An idle watch activity returns after this long (one activity start per slice per workload).
    slice_s: float = Field(default=1800.0, gt=0)
    max_read_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    # How long a crashed worker's watches wait before another worker takes them over; heartbeats are
    # billed Temporal actions, sent at most every 0.8 x this. A graceful shutdown hands them over at once.
    heartbeat_timeout_s: float = Field(default=300.0, gt=0)
    # A cluster worker whose presence polls stopped this long ago is gone: a surviving worker takes over
    # its watches at once instead of after heartbeat_timeout_s (workers/presence.py). 0 turns it off.
    presence_timeout_s: float = Field(default=15.0, ge=0)
    # Activity slots of a cluster worker: one per watched workload (plus short action steps). Past it new
    # watches wait on the server unserved: reported (trainguard_watch_slots_used) and alerted.
    max_watches: int = Field(default=5000, ge=1)
    # Hang: no progress line for hang_factor x the job's own interval, within [floor, ceiling].
    hang_factor: float = Field(default=2.0, gt=1)
    hang_floor_s: float = Field(default=60.0, gt=0)
    hang_ceiling_s: float = Field(default=3600.0, gt=0)
    progress_patterns: list[str] = Field(default_factory=list)  # extra regexes for progress lines
    # Evidence that does not yet show the job failing waits this long (from the first signal) for
    # Slurm's verdict before it is decided: a lost-peer cascade only (gloo "Connection closed by peer",
    # NCCL remote error) says a peer died, not why, and srun reports a rank's death while the job is
    # still RUNNING (a running job is only touched on evidence that it fails). Slurm ending the job or
    # marking its node down ends the wait at once.
    slurm_verdict_wait_s: float = Field(default=45.0, ge=0)
    # Checkpoint progress from the filesystem (trainguard/checkpoint_dir.py): a job's opt-in
    # "checkpoint_dir", else this pattern ({job_id}, {user}, {work_dir}; "" = none), read every
    # checkpoint_scan_interval_s and before a decision. Only directories under the job's work dir or
    # under one of checkpoint_roots are read.
    checkpoint_dir_pattern: str = ""
    checkpoint_roots: list[str] = Field(default_factory=list)
    checkpoint_scan_interval_s: float = Field(default=60.0, gt=0)


class WatchdogSettings(Section):
    enabled: bool = True
    decision_timeout_s: float = Field(default=120.0, gt=0)
    mode: Mode = Mode.ACTION  # the watchdog may release a held job even when the cluster observes
    acknowledge_scheduler_actions: bool = True
    environment_pattern: str = ".*"  # jobs whose opt-in environment matches are guarded by the watchdog


class PolicySettings(PolicyConfig):
    """The policy's own knobs (trainguard.policy.PolicyConfig, documented in docs/policy.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class LimitsSettings(ClusterLimits):
    """Cluster-wide safety limits (trainguard.policy.limits.ClusterLimits, documented in docs/policy.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class AttributionSettings(Section):
    external_url: str | None = None
    external_timeout_s: float = Field(default=5.0, gt=0)
    external_token: SecretStr | None = None


class LogSettings(Section):
    backend: Literal["files", "loki", "victorialogs"] = "files"
    url: str | None = None
    tenant: str | None = None
    username: str | None = None
    password: SecretStr | None = None
    bearer_token: SecretStr | None = None
    tls_verify: bool = True
    query_prefix: str = ""
    labels: dict[str, str] = Field(default_factory=lambda: {"job_id": "job_id", "filename": "filename"})
    # Per-node kernel/syslog (trainguard/logsources/nodelogs.py): with backend "files" a path with a
    # {node} placeholder (e.g. /var/log/nodes/{node}/kern.log); with a backend the label naming the
    # host (Loki {host="node2"}). "" = off.
    node_log_path: str = ""
    node_log_label: str = ""


class MetricsSettings(Section):
    prometheus_url: str | None = None
    node_label: str = "Hostname"
    node_map: dict[str, str] = Field(default_factory=dict)  # metric label value -> Slurm node name
    metric_names: dict[str, str] = Field(default_factory=dict)  # overrides of DCGM defaults
    timeout_s: float = Field(default=5.0, gt=0)


class Role(StrEnum):
    """What a credential may do, each role including the ones before it."""

    VIEWER = "viewer"  # reads
    OPERATOR = "operator"  # + a workload's mode and pause, agree/disagree with advice, reports
    ADMIN = "admin"  # + a whole cluster's mode

    @property
    def rank(self) -> int:
        return list(Role).index(self)


OPERATOR_NAME = r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$"


class OperatorToken(Section):
    """A named person's (or tool's) bearer token: the audit records `name` as who acted."""

    name: str = Field(pattern=OPERATOR_NAME)
    role: Role
    token: SecretStr = Field(min_length=16)


class TrustedHeaderSettings(Section):
    """An authenticating proxy in front of the API names the user in a header. Off unless `header` is
    set; honoured only on connections from `trusted_proxies` (anyone else could send the header)."""

    header: str = ""  # e.g. X-Forwarded-User (oauth2-proxy), X-Remote-User
    trusted_proxies: list[str] = Field(default_factory=list)  # addresses or CIDRs of the proxy
    roles: dict[str, Role] = Field(default_factory=dict)  # user name -> role
    default_role: Role | None = None  # for users not in `roles`; None: they are refused

    @model_validator(mode="after")
    def _proxies_required(self) -> TrustedHeaderSettings:
        if self.header and not self.trusted_proxies:
            raise ValueError("trusted_header.header needs trusted_proxies (the proxy's addresses)")
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(f"trusted_proxies: {proxy!r} is not an address or CIDR") from None
        return self


class APISettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8088, ge=1, le=65535)
    metrics_port: int = Field(default=0, ge=0, le=65535)  # >0: /metrics there only, not on `port`
    operators: list[OperatorToken] = Field(default_factory=list)
    trusted_header: TrustedHeaderSettings = TrustedHeaderSettings()
    token: SecretStr | None = None  # one shared token (older setups): acts as admin "api-token"
    read_requires_token: bool = False  # reads need a credential too (the chart turns this on)
    docs: Literal["offline", "off"] = "offline"  # interactive API docs served by the app, or none

    @model_validator(mode="after")
    def _unique_names(self) -> APISettings:
        names = [o.name for o in self.operators]
        if len(names) != len(set(names)):
            raise ValueError("api.operators: each name once")
        tokens = [o.token.get_secret_value() for o in self.operators]
        if len(tokens) != len(set(tokens)):
            raise ValueError("api.operators: two operators share a token")
        return self


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
# Libraries that log every connection or request at INFO: thousands of lines an hour in SSH mode.
QUIET_LOGGERS: dict[str, LogLevel] = {"asyncssh": "WARNING", "httpx": "WARNING", "httpcore": "WARNING"}


class LoggingSettings(Section):
    level: LogLevel = "INFO"  # TrainGuard's own messages and everything not listed in `loggers`
    # Per-logger levels; merged over QUIET_LOGGERS (set "asyncssh: INFO" to see SSH connections again).
    loggers: dict[str, LogLevel] = Field(default_factory=dict)

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    def levels(self) -> dict[str, LogLevel]:
        return {**QUIET_LOGGERS, **self.loggers}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINGUARD_", env_nested_delimiter="__", extra="forbid")

    state_dir: str = str(DEFAULT_STATE_DIR)
    temporal: TemporalSettings = TemporalSettings()
    cluster: ClusterSettings = ClusterSettings()
    audit: AuditSettings = AuditSettings()
    watch: WatchSettings = WatchSettings()
    watchdog: WatchdogSettings = WatchdogSettings()
    policy: PolicySettings = PolicySettings()
    limits: LimitsSettings = LimitsSettings()
    attribution: AttributionSettings = AttributionSettings()
    logs: LogSettings = LogSettings()
    metrics: MetricsSettings = MetricsSettings()
    api: APISettings = APISettings()
    logging: LoggingSettings = LoggingSettings()

    @model_validator(mode="after")
    def _audit_in_state_dir(self) -> Settings:
        # state_dir is where local state lives: the default SQLite audit store follows it.
        if "url" not in self.audit.model_fields_set:
            default = f"sqlite:///{Path(self.state_dir) / 'audit.db'}"
            self.audit = self.audit.model_copy(update={"url": default})
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init (the file's contents) is weaker than the environment.
        return (env_settings, init_settings)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as err:
        raise SettingsError(f"cannot read config file {path}: {err.strerror}") from None
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise SettingsError(f"config file {path} is not valid YAML: {err}") from None
    if not isinstance(doc, dict):
        raise SettingsError(f"config file {path} must hold a mapping at the top level")
    return doc


def load_settings(path: str | Path | None = None) -> Settings:
    """Load and validate; every problem is reported at once with its dotted key."""
    path = path or os.environ.get("TRAINGUARD_CONFIG")
    doc = _read_file(Path(path)) if path else {}
    try:
        return Settings(**doc)
    except ValidationError as err:
        lines = [f"  {'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in err.errors()]
        where = f" in {path}" if path else ""
        raise SettingsError(f"invalid settings{where}:\n" + "\n".join(lines)) from None
