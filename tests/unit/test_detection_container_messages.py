"""Container runtime messages, derived from their sources (issue 12 section 1, "generalise, don't memorise").

What the container stacks that run training jobs on Slurm and Kubernetes print when a job's container never
starts was read out of their source and mapped to TrainGuard's categories (docs/detection.md, "Container
runtime messages, from their sources"):

- runc (opencontainers/runc 76d9cf5d: libcontainer/standard_init_linux.go, container_linux.go,
  configs/config.go, internal/linux/linux.go, create.go, run.go; before 1.1 libcontainer/generic_error.go at
  the parent of e918d021), crun (containers/crun src/libcrun/container.c),
- moby (moby/moby daemon/errors.go, daemon/runtime_unix.go, distribution/errors.go), containerd's pull and
  the CDI library (cncf-tags/container-device-interface pkg/cdi/cache.go),
- NVIDIA's container toolkit (NVIDIA/nvidia-container-toolkit cmd/nvidia-container-runtime-hook/main.go;
  libnvidia-container's `nvidia-container-cli: <kind> error:` was read before and is pinned here),
- Apptainer (apptainer/apptainer 917d6657: internal/app/starter/master_linux.go, cmd/internal/cli/actions.go,
  cmd/internal/cli/pull.go, internal/pkg/runtime/launch/launcher_linux.go,
  internal/pkg/runtime/engine/apptainer/process_linux.go and container_linux.go,
  internal/pkg/util/shell/interpreter/interpreter.go, pkg/sylog/sylog.go),
- pyxis (NVIDIA/pyxis 1075199: pyxis_slurmstepd.c, args.c, enroot.c, importer.c, common.c) and enroot
  (NVIDIA/enroot 8ea147d: src/common.sh, src/docker.sh).

The node's runtime, driver hook or configuration: slurm_node_failure / system_software (as the catalog's
container entries already read them). The user's image reference, credentials or --container-* argument:
slurm_node_failure / application (the corpus's label for a pyxis import refused for the user's reference).
The user's command inside the image: python_exception / application, as slurmstepd's `execve()` failure.
Each positive case in MESSAGES is a source's format string with its conversions filled in; each read healthy
on the code before this change. ALREADY_READ pins what the catalog read before. The look-alikes are messages a
job survives (warnings, probes, epilogs).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

# Entries added from the printers' sources, and the entry this change extended (each comment names the file).
ADDED = (
    "container_command_not_found",
    "container_image_reference_refused",
    "container_runtime_start_failed",
    "oci_runtime_create_failed",
    "pyxis_image_import_failed",
)
EXTENDED = ("container_step_start_failed",)

NODE = ("slurm_node_failure", "system_software")
USER_REF = ("slurm_node_failure", "application")
USER_CMD = ("python_exception", "application")

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # runc: Go's exec.LookPath error, wrapped by runc, containerd and Docker (new and pre-1.1 forms)
    (
        "docker: Error response from daemon: failed to create task for container: failed to create shim "
        "task: "
        'OCI runtime create failed: runc create failed: unable to start container process: exec: "python": '
        "executable file not found in $PATH: unknown.",
        USER_CMD,
        "container_command_not_found",
    ),
    (
        "docker: Error response from daemon: OCI runtime create failed: container_linux.go:349: starting "
        'container process caused "exec: \\"python\\": executable file not found in $PATH": unknown.',
        USER_CMD,
        "container_command_not_found",
    ),
    (
        "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: "
        "runc "
        'create failed: unable to start container process: exec: "/workspace/run.sh": stat '
        "/workspace/run.sh: "
        "no such file or directory: unknown",
        USER_CMD,
        "container_command_not_found",
    ),
    # runc's init exec (internal/linux/linux.go; standard_init_linux.go before 1.1)
    ("exec /usr/local/bin/torchrun: exec format error", USER_CMD, "container_command_not_found"),
    (
        "standard_init_linux.go:228: exec user process caused: exec format error",
        USER_CMD,
        "container_command_not_found",
    ),
    # crun src/libcrun/container.c, as podman reports it
    (
        "Error: crun: executable file `python` not found in $PATH: No such file or directory: OCI runtime "
        "attempted to invoke a command that was not found",
        USER_CMD,
        "container_command_not_found",
    ),
    (
        "Error: crun: exec container process (missing dynamic library?) `/opt/conda/bin/python`: No such "
        "file or directory: OCI runtime attempted to invoke a command that was not found",
        USER_CMD,
        "container_command_not_found",
    ),
    # Apptainer: the action script's exec, getExecError
    ('FATAL:   "torchrun": executable file not found in $PATH', USER_CMD, "container_command_not_found"),
    (
        "FATAL:   exec /opt/conda/bin/python failed: a shared library is likely missing in the image",
        USER_CMD,
        "container_command_not_found",
    ),
    ("FATAL:   image targets 'arm64', cannot run on 'amd64'", USER_CMD, "container_command_not_found"),
    # moby distribution/errors.go, the reference parser, daemon/errors.go's bind-mount hint
    (
        "docker: Error response from daemon: pull access denied for mypytorch, repository does not exist "
        "or may "
        "require 'docker login': denied: requested access to the resource is denied.",
        USER_REF,
        "container_image_reference_refused",
    ),
    (
        "docker: Error response from daemon: manifest for nvcr.io/nvidia/pytorch:25.13-py3 not found: "
        "manifest "
        "unknown: manifest unknown.",
        USER_REF,
        "container_image_reference_refused",
    ),
    (
        "docker: invalid reference format: repository name must be lowercase.",
        USER_REF,
        "container_image_reference_refused",
    ),
    (
        "docker: Error response from daemon: failed to create task for container: failed to create shim "
        "task: OCI "
        "runtime create failed: runc create failed: unable to start container process: error during "
        "container "
        'init: error mounting "/data/cfg.yaml" to rootfs at "/cfg": not a directory: unknown: Are you '
        "trying to "
        "mount a directory onto a file (or vice-versa)? Check if the specified host path exists and is the "
        "expected type.",
        USER_REF,
        "container_image_reference_refused",
    ),
    # containerd's pull, as the kubelet relays it
    (
        'Failed to pull image "ghcr.io/acme/trainer:v9": rpc error: code = NotFound desc = failed to pull '
        "and "
        'unpack image "ghcr.io/acme/trainer:v9": failed to resolve reference "ghcr.io/acme/trainer:v9": '
        "ghcr.io/acme/trainer:v9: not found",
        USER_REF,
        "container_image_reference_refused",
    ),
    # enroot src/docker.sh / src/common.sh (common::err), bare and relayed by pyxis
    (
        "[ERROR] Invalid image reference: nvcr.io/nvidia/pytorch:24.01-py3",
        USER_REF,
        "container_image_reference_refused",
    ),
    (
        "[ERROR] URL https://nvcr.io/v2/nvidia/pytorch/manifests/25.13-py3 returned error code: 404 Not "
        "Found",
        USER_REF,
        "container_image_reference_refused",
    ),
    # Apptainer: the registry refusing the name; a SIF path or a bind source the user gave
    (
        "FATAL:   Unable to handle docker://nvcr.io/nvidia/pytorch:25.13-py3 uri: failed to get checksum for "
        "docker://nvcr.io/nvidia/pytorch:25.13-py3: reading manifest 25.13-py3 in nvcr.io/nvidia/pytorch: "
        "manifest unknown",
        USER_REF,
        "container_image_reference_refused",
    ),
    (
        "FATAL:   could not open image /scratch/alice/pytorch.sif: failed to retrieve path for "
        "/scratch/alice/pytorch.sif: lstat /scratch/alice/pytorch.sif: no such file or directory",
        USER_REF,
        "container_image_reference_refused",
    ),
    (
        "FATAL:   container creation failed: mount hook function failure: mount /lustre/alice/data->/data "
        "error: "
        "while mounting /lustre/alice/data: mount source /lustre/alice/data doesn't exist",
        USER_REF,
        "container_image_reference_refused",
    ),
    # pyxis args.c / pyxis_slurmstepd.c: the user's --container-* arguments
    (
        "slurmstepd: error: pyxis: --container-mounts: source path does not exist: /lustre/alice/data",
        USER_REF,
        "container_image_reference_refused",
    ),
    (
        'slurmstepd: error: pyxis: error: a container with name "train" does not exist, and '
        "--container-image is "
        "not set",
        USER_REF,
        "container_image_reference_refused",
    ),
    (
        "srun: error: pyxis: both --container-writable and --container-readonly were specified",
        USER_REF,
        "container_image_reference_refused",
    ),
    # moby daemon/errors.go, daemon/runtime_unix.go; the CDI library
    (
        'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
        NODE,
        "container_runtime_start_failed",
    ),
    (
        "docker: Error response from daemon: unknown or invalid runtime name: nvidia.",
        NODE,
        "container_runtime_start_failed",
    ),
    (
        "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all",
        NODE,
        "container_runtime_start_failed",
    ),
    # runc libcontainer/configs/config.go (Hooks.Run); the NVIDIA hook
    (
        "docker: Error response from daemon: failed to create task for container: failed to create shim "
        "task: OCI "
        "runtime create failed: runc create failed: unable to start container process: error during "
        "container "
        "init: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected mode as "
        "legacy: "
        "unknown.",
        NODE,
        "container_runtime_start_failed",
    ),
    (
        'couldn\'t find binary nvidia-container-cli in PATH: exec: "nvidia-container-cli": executable file '
        "not "
        "found in $PATH",
        NODE,
        "container_runtime_start_failed",
    ),
    # Apptainer internal/app/starter/master_linux.go; a registry the node cannot reach
    (
        "FATAL:   container creation failed: mount /proc/self/fd/3->/var/apptainer/mnt/session/rootfs "
        "error: while "
        "mounting image /proc/self/fd/3: failed to find loop device: could not attach image file to loop "
        "device: "
        "no loop devices available",
        NODE,
        "container_runtime_start_failed",
    ),
    (
        "FATAL:   While making image from oci registry: error fetching image to cache: failed to get "
        "checksum for "
        'docker://pytorch/pytorch:latest: pinging container registry registry-1.docker.io: Get "https://'
        'registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host',
        NODE,
        "container_runtime_start_failed",
    ),
    # runc create.go / run.go as containerd and Docker wrap them, with a reason no entry reads
    (
        "ERRO[0000] runc run failed: unable to start container process: error during container init: error "
        "setting cgroup config for procHooks process: unable to freeze: unknown",
        NODE,
        "oci_runtime_create_failed",
    ),
    # pyxis pyxis_slurmstepd.c / importer.c / enroot.c: the node's container set-up
    (
        "slurmstepd: error: pyxis: container start error: No such file or directory",
        NODE,
        "container_step_start_failed",
    ),
    (
        "slurmstepd: error: pyxis: importer /usr/share/pyxis/importer.sh failed with exit code 1",
        NODE,
        "container_step_start_failed",
    ),
    (
        "slurmstepd: error: pyxis: couldn't join mount namespace: Operation not permitted",
        NODE,
        "container_step_start_failed",
    ),
    (
        "slurmstepd: error: pyxis: a previous task terminated unexpectedly during container setup",
        NODE,
        "container_step_start_failed",
    ),
    ("slurmstepd: error: pyxis: child 4242 failed with error code: 1", NODE, "container_step_start_failed"),
]

# Read before this change (kept as they were): libnvidia-container's `nvidia-container-cli: <kind> error:`
# (src/cli/configure.c), pyxis' start failures, enroot's relayed [ERROR] lines and hooks, SPANK.
ALREADY_READ = [
    (
        "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown",
        "container_step_start_failed",
    ),
    (
        "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open "
        "shared "
        "object file: no such file or directory: unknown",
        "container_step_start_failed",
    ),
    (
        "nvidia-container-cli: mount error: file creation failed: "
        "/var/lib/docker/overlay2/x/merged/usr/bin/nvidia-smi: file exists",
        "container_step_start_failed",
    ),
    ("nvidia-container-cli: device error: 4: unknown device: unknown", "container_step_start_failed"),
    # the image asks for a newer CUDA than the node's driver offers: the node's driver (see the docs section)
    (
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.1, please update your "
        "driver to "
        "a newer version, or use an earlier cuda container: unknown",
        "container_step_start_failed",
    ),
    ("slurmstepd: error: pyxis: container start failed with error code: 1", "container_step_start_failed"),
    (
        "slurmstepd: error: pyxis: failed to create container filesystem for image: "
        "nvcr.io#nvidia/pytorch:24.01-py3",
        "container_step_start_failed",
    ),
    (
        "slurmstepd: error: pyxis:     [ERROR] Command not found: nvidia-container-cli",
        "container_step_start_failed",
    ),
    ("[ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1", "container_step_start_failed"),
    (
        "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
        "container_step_start_failed",
    ),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_container_failure_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "entry"), ALREADY_READ, ids=[m[0][:60] for m in ALREADY_READ])
def test_container_messages_read_before_still_read(text: str, entry: str) -> None:
    assert_read_as(text + "\n", NODE, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED + EXTENDED) - {"pyxis_image_import_failed"}


PYXIS_IMPORT = (
    "slurmstepd: error: pyxis: failed to import docker image: nvidia/pytorch:24.01-py3\n"
    "slurmstepd: error: pyxis: printing enroot log file:\n"
    "slurmstepd: error: pyxis:     [INFO] Querying registry for permission grant\n"
    "slurmstepd: error: pyxis:     [INFO] Fetching image manifest list\n"
    "slurmstepd: error: pyxis:     [ERROR] URL "
    "https://registry-1.docker.io/v2/nvidia/pytorch/manifests/24.01-py3 "
    "returned error code: {code}\n"
    "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1\n"
    "slurmstepd: error: Failed to invoke spank plugin stack\n"
)


def test_pyxis_import_failure_is_decided_by_enroot_s_reason() -> None:
    # the user's reference or credentials: the registry answered 401/403/404
    assert_read_as(
        PYXIS_IMPORT.format(code="401 Unauthorized"), USER_REF, "container_image_reference_refused"
    )
    assert_read_as(PYXIS_IMPORT.format(code="404 Not Found"), USER_REF, "container_image_reference_refused")
    # the registry's own trouble (rate limit, 5xx): the site's, as before
    assert_read_as(PYXIS_IMPORT.format(code="429 Too Many Requests"), NODE, "container_step_start_failed")
    assert_read_as(PYXIS_IMPORT.format(code="503 Service Unavailable"), NODE, "container_step_start_failed")


def test_pyxis_import_summary_alone_still_reads_as_the_container_stack_s() -> None:
    text = "slurmstepd: error: pyxis: failed to import docker image: nvcr.io#nvidia/pytorch:24.01-py3\n"
    assert_read_as(text, NODE, "pyxis_image_import_failed")
    sig = load_catalog().get("pyxis_image_import_failed")
    assert sig is not None and sig.cascade


def test_a_user_argument_error_decides_before_the_spank_failure_it_causes() -> None:
    text = (
        "slurmstepd: error: pyxis: --container-mounts: source path does not exist: /lustre/alice/data\n"
        "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1\n"
        "slurmstepd: error: Failed to invoke spank plugin stack\n"
    )
    assert_read_as(text, USER_REF, "container_image_reference_refused")


def test_runc_oom_kill_on_a_wrapped_line_stays_an_oom_kill() -> None:
    # the generic OCI wrapper comes after the specific entries in file order
    r = classify_text(
        "docker: Error response from daemon: failed to create task for container: failed to create shim "
        "task: OCI "
        "runtime create failed: runc create failed: unable to start container process: container init was "
        "OOM-killed (memory limit too low?): unknown.\n"
    )
    assert (r.fatal, r.category) == (True, "killed_oom_host"), r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        # a probe exec'ing into a running container (runc exec through kubelet): the job's container runs on
        "Warning  Unhealthy  12s  kubelet  Readiness probe errored: rpc error: code = Unknown desc = "
        "failed to exec "
        "in container: OCI runtime exec failed: exec failed: unable to start container process: exec: "
        '"curl": '
        "executable file not found in $PATH: unknown\n",
        # another Go program's missing helper
        'wandb: WARNING exec: "git": executable file not found in $PATH\n',
        # docker's notice before it pulls; enroot's informational and warning lines
        "Unable to find image 'nvcr.io/nvidia/pytorch:24.01-py3' locally\n24.01-py3: Pulling from "
        "nvidia/pytorch\n",
        "[INFO] Querying registry for permission grant\n[INFO] Authenticating with user: <anonymous>\n",
        "[WARN] Image architecture doesn't match the requested one: arm64 != amd64\n[INFO] Creating "
        "squashfs filesystem...\n",
        # Apptainer's warnings and information (pkg/sylog: WARNING:/INFO:), the job goes on
        "WARNING: Skipping mount /etc/localtime [binds]: /etc/localtime doesn't exist in container\n",
        "INFO:    Converting SIF file to temporary sandbox...\nWARNING: underlay of /usr/bin/nvidia-smi "
        "required more "
        "than 50 (520) bind mounts\n",
        # pyxis: informational lines, an option it ignores, its epilog after the job
        "slurmstepd: pyxis: importing docker image: nvcr.io#nvidia/pytorch:24.01-py3\n"
        "slurmstepd: pyxis: imported docker image: nvcr.io#nvidia/pytorch:24.01-py3\n",
        "slurmstepd: error: pyxis: ignoring --container-mounts because neither --container-image nor "
        "--container-name is set\n",
        "slurmd: error: pyxis: epilog: failed to parse configuration\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)
