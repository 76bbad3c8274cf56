"""Training frameworks' launcher messages, from their sources (docs/detection.md, "Training frameworks'
launcher messages, from their sources").

What DeepSpeed's launcher and `deepspeed.comm`, PyTorch Lightning's strategies, launchers and SLURM
environment, and Hugging Face accelerate's launcher print when a job fails to start or a rank dies, and what
they print while the job goes on, were read out of their sources and checked against the catalog. Each case is
the source's format string with its conversions filled in. FAILED_ON_MAIN read wrong before this change:
Lightning's child-process observer (src/lightning/fabric/strategies/launchers/subprocess_script.py) read
healthy for every exit code, and the `deepspeed` runner's `Unable to proceed, no GPU resources available`
(deepspeed/launcher/runner.py) read as the program's exception. ALREADY_READ pins what the catalog read right
before.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

EXTENDED = (
    "elastic_child_failed",
    "elastic_child_crash_signal",
    "launcher_child_segv",
    "sigkill",
    "cuda_devices_unavailable",
)

APP_EXIT = ("python_exception", "application")
CRASH = ("segfault", "system_software")
KILL = ("signal_kill", "unknown")
NODE_SETUP = ("slurm_node_failure", "system_software")
TIMEOUT = ("nccl_timeout", "system_software")
OOM = ("cuda_oom", "application")

TB = 'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    main()\n'


def observer(code: int, pid: int = 2977, rank: int = 1) -> str:
    """Lightning's _ChildProcessObserver line (rank_prefixed_message, logged at INFO)."""
    return (
        f"[rank: {rank}] Child process with PID {pid} terminated with code {code}. Forcefully terminating "
        f"all "
        "other processes to avoid zombies 🧟"
    )


def ds_exit(code: int) -> str:
    """DeepSpeed's per-node launcher (deepspeed/launcher/launch.py, sigkill_handler)."""
    return (
        "[2024-01-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', "
        f"'train.py', '--local_rank=1'] exits with return code = {code}"
    )


# (text, expected category/attribution, deciding entry)
FAILED_ON_MAIN = [
    # src/lightning/fabric/strategies/launchers/subprocess_script.py _ChildProcessObserver: a rank's own exit
    (observer(1), APP_EXIT, "elastic_child_failed"),
    (
        "INFO     lightning.fabric.strategies.launchers.subprocess_script:subprocess_script.py:224 "
        + observer(4),
        APP_EXIT,
        "elastic_child_failed",
    ),
    # ... a SIGTERM from outside the launcher, left to the wrapper as DeepSpeed's and torchelastic's -15
    (observer(-15), APP_EXIT, "elastic_child_failed"),
    # ... ended by a signal (Popen's -<signal>)
    (observer(-9, pid=9487), KILL, "sigkill"),
    (observer(-6, pid=13117, rank=2), CRASH, "elastic_child_crash_signal"),
    (observer(-4), CRASH, "elastic_child_crash_signal"),
    (observer(-11), CRASH, "launcher_child_segv"),
    # deepspeed/launcher/runner.py main: no hostfile and no device counted on the node
    (
        TB + "RuntimeError: Unable to proceed, no GPU resources available",
        NODE_SETUP,
        "cuda_devices_unavailable",
    ),
]

ALREADY_READ = [
    # deepspeed/launcher/launch.py: the launcher's verdict on a rank
    (ds_exit(1), APP_EXIT, "elastic_child_failed"),
    (ds_exit(-9), KILL, "sigkill"),
    (ds_exit(-6), CRASH, "deepspeed_launcher_child_crash_signal"),
    (ds_exit(-11), CRASH, "launcher_child_segv"),
    # deepspeed/launcher/launch.py sigkill_handler, the launcher itself signalled
    (
        "[2024-01-01 10:00:00,000] [INFO] [launch.py:314:sigkill_handler] Main process received SIGINT, "
        "exiting",
        KILL,
        "deepspeed_launcher_sigint",
    ),
    # src/lightning/pytorch/strategies/ddp.py reconciliate_processes: the rank's own trace is embedded
    (
        TB
        + "pytorch_lightning.utilities.exceptions.DeadlockDetectedException: DeadLock detected from rank: 2 "
        "\n"
        " Traceback (most recent call last):\n"
        '  File "/x/pytorch_lightning/trainer/call.py", line 38, in _call_and_handle_interrupt\n'
        "    return trainer_fn(*args, **kwargs)\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 2; 79.15 GiB total "
        "capacity; 75.00 GiB already allocated)",
        OOM,
        "cuda_oom_allocator",
    ),
    # src/lightning/fabric/utilities/distributed.py _sync_ddp: the collective's own error decides
    (
        TB + '  File "/x/lightning/fabric/utilities/distributed.py", line 230, in _sync_ddp\n'
        "    torch.distributed.all_reduce(result, op=op, group=group, async_op=False)\n"
        "torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=100, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800083 "
        "milliseconds before timing out.",
        TIMEOUT,
        "nccl_watchdog_timeout",
    ),
    # accelerate commands/launch.py multi_gpu_launcher re-raises torchelastic's ChildFailedError
    (
        TB + "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2024-01-01_10:00:00\n"
        "  host      : node1\n"
        "  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 4242)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 4242\n"
        "============================================================",
        KILL,
        "sigkill",
    ),
    # accelerate commands/launch.py simple_launcher / deepspeed_launcher: CalledProcessError for the child
    (
        TB
        + "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned non-zero exit "
        "status 1.",
        APP_EXIT,
        "elastic_child_failed",
    ),
    (
        TB + "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' died with "
        "<Signals.SIGKILL: 9>.",
        KILL,
        "sigkill",
    ),
]

# Raised into the program for its own configuration or launch arguments: the program's
PROGRAM_ERRORS = [
    # src/lightning/fabric/plugins/environments/slurm.py _validate_srun_variables
    TB + "RuntimeError: You set `--ntasks=8` in your SLURM bash script, but this variable is not supported. "
    "HINT: Use `--ntasks-per-node=8` instead.",
    # src/lightning/fabric/utilities/exceptions.py, raised by the accelerator connector
    TB + "lightning.fabric.utilities.exceptions.MisconfigurationException: You requested gpu: [0, 1]\n"
    " But your machine only has: [0]",
    # deepspeed/launcher/runner.py _parse_hostfile / main
    TB + "ValueError: Hostfile contains a bad entry: worker-0 slot=8, unable to proceed with launching",
    TB + "RuntimeError: launcher 'pdsh' not installed.",
    TB
    + "RuntimeError: Using hostfile at /job/hostfile but host=worker-1 was not reachable via ssh. If you are "
    "running with a single node please remove /job/hostfile or setup passwordless ssh.",
    # deepspeed/comm/comm.py init_distributed
    TB + "AssertionError: Distributed backend is not initialized. Please set dist_init_required to True or "
    "initialize before calling deepspeed.initialize()",
    # accelerate utils/launch.py prepare_multi_gpu_env / prepare_deepspeed_cmd_env (multi-node form)
    TB + "ConnectionError: Tried to launch distributed communication on port `29500`, but another process is "
    "utilizing it. Please specify a different port (such as using the `--main_process_port` flag or "
    "specifying "
    "a different `main_process_port` in your config file) and rerun your script. To automatically use the "
    "next "
    "open port (on a single node), you can set this to `0`.",
    # accelerate launchers.py notebook_launcher
    TB + "RuntimeError: CUDA has been initialized before the `notebook_launcher` could create a forked "
    "subprocess. This likely stems from an outside import causing issues once the `notebook_launcher()` is "
    "called. Please review your imports and test them when running the `notebook_launcher()` to identify "
    "which "
    "one is problematic and causing CUDA to be initialized.",
]

# Warnings, notices and fallbacks the job goes on after
SURVIVED = [
    # deepspeed/launcher/runner.py fetch_hostfile: runs on the local node's devices
    "[2024-01-01 10:00:00,000] [WARNING] [runner.py:202:fetch_hostfile] Unable to find hostfile, will "
    "proceed "
    "with training with local resources only.",
    # deepspeed/comm/comm.py init_distributed / mpi_discovery
    "[2024-01-01 10:00:00,000] [INFO] [comm.py:652:init_distributed] Not using the DeepSpeed or dist "
    "launchers, "
    "attempting to detect MPI environment...\n"
    "[2024-01-01 10:00:00,001] [INFO] [comm.py:702:mpi_discovery] Discovered MPI settings of world_rank=0, "
    "local_rank=0, world_size=8, master_addr=10.0.0.1, master_port=29500\n"
    "[2024-01-01 10:00:00,002] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend in DeepSpeed "
    "with backend nccl",
    # deepspeed/launcher/launch.py: a rank that ended well
    "[2024-01-01 10:00:00,000] [INFO] [launch.py:351:main] Process 4242 exits successfully.",
    # src/lightning/fabric/plugins/environments/slurm.py _validate_srun_used (PossibleUserWarning)
    "/opt/venv/lib/python3.10/site-packages/lightning/fabric/plugins/environments/slurm.py:204: "
    "PossibleUserWarning: The `srun` command is available on your system but is not used. HINT: If your "
    "intention is to run Lightning on SLURM, prepend your python command with `srun` like so: srun python "
    "train.py --devices 4 ...\n  rank_zero_warn(",
    # src/lightning/fabric/utilities/distributed.py _init_dist_connection, and the SLURM signal connector
    "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8\n"
    "----------------------------------------------------------------------------------------------------\n"
    "distributed_backend=nccl\n"
    "All distributed processes registered. Starting with 8 processes\n"
    "----------------------------------------------------------------------------------------------------\n"
    "SLURM auto-requeueing enabled. Setting signal handlers.",
    # accelerate commands/launch.py _validate_launch_command
    "The following values were not passed to `accelerate launch` and had defaults used instead:\n"
    "\t`--num_processes` was set to a value of `4`\n"
    "\t\tMore than one GPU was found, enabling multi-GPU training.\n"
    "\t\tIf this was unintended please pass in `--num_processes=1`.\n"
    "\t`--num_machines` was set to a value of `1`\n"
    "\t`--mixed_precision` was set to a value of `'no'`\n"
    "\t`--dynamo_backend` was set to a value of `'no'`\n"
    "To avoid this warning pass in values for each of the problematic parameters or run `accelerate config`.",
    # accelerate commands/launch.py multi_gpu_launcher: P2P/IB disabled, training goes on
    "[10:00:00] WARNING  Using RTX 4000 series which doesn't support faster communication speedups. Ensuring "
    "P2P and IB communications are disabled.",
    # accelerate utils/other.py check_os_kernel: a risk, not a hang
    "12/01/2024 10:00:00 - WARNING - accelerate.utils.other - Detected kernel version 4.18.0, which is "
    "below the "
    "recommended minimum of 5.5.0; this can cause the process to hang. It is recommended to upgrade the "
    "kernel "
    "to the minimum version or higher.",
    # accelerate utils/launch.py: single node, a busy port replaced by a free one
    "/x/accelerate/utils/launch.py:253: UserWarning: Port `29500` is already in use. Accelerate will "
    "attempt to "
    "launch in a standalone-like mode by finding an open port automatically for this session. If this "
    "current "
    "attempt fails, or for more control in future runs, please specify a different port (e.g., "
    "`--main_process_port <your_chosen_port>`) or use `--main_process_port 0` for automatic selection in "
    "your "
    "launch command or Accelerate config file.\n  warnings.warn(",
    # accelerate state.py PartialState's repr, printed by scripts
    "Distributed environment: MULTI_GPU  Backend: nccl\nNum processes: 8\nProcess index: 0\n"
    "Local process index: 0\nDevice: cuda:0\n\nMixed precision type: bf16",
    # the runner's raise in source, not raised
    '            raise RuntimeError("Unable to proceed, no GPU resources available")',
    # Lightning's observer with an exit code that is not a signal Popen reports
    observer(0),
]


@pytest.mark.parametrize(
    ("text", "expected", "entry"), FAILED_ON_MAIN, ids=[m[0][-50:] for m in FAILED_ON_MAIN]
)
def test_launcher_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "expected", "entry"), ALREADY_READ, ids=[m[0][-50:] for m in ALREADY_READ])
def test_messages_read_before_still_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize("text", PROGRAM_ERRORS, ids=[t[-40:] for t in PROGRAM_ERRORS])
def test_raised_into_the_program_stays_the_program_s(text: str) -> None:
    r = classify_text(text + "\n")
    assert (r.fatal, r.category, r.attribution) == (True, *APP_EXIT), r.pattern_ids


@pytest.mark.parametrize("text", SURVIVED, ids=[t[-40:] for t in SURVIVED])
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text + "\n")


def test_a_rank_s_traceback_before_the_observer_decides() -> None:
    # the observer's line is the launcher's verdict; the rank's own exception, printed before it, decides
    text = TB + "ValueError: shapes (4, 3) and (2, 2) not aligned\n" + observer(1) + "\n"
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *APP_EXIT)
    assert r.pattern_ids[0] != "elastic_child_failed", r.pattern_ids


def test_every_extended_entry_is_exercised_here() -> None:
    assert {m[2] for m in FAILED_ON_MAIN} >= set(EXTENDED)


@pytest.mark.parametrize("sig_id", EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)


@pytest.mark.parametrize(
    ("code", "expected"),
    [(1, APP_EXIT), (-6, CRASH), (-11, CRASH), (-15, APP_EXIT), (-9, KILL)],
)
def test_the_observer_s_own_sigkill_is_its_teardown(code: int, expected: tuple[str, str]) -> None:
    # _ChildProcessObserver._terminate_all SIGKILLs the main process after logging: the shell's `Killed` (or
    # srun's `task 0: Killed`) that follows is the launcher's doing, not a cause of its own
    for killed in ("Killed", "srun: error: node1: task 0: Killed"):
        r = classify_text(observer(code) + "\n" + killed + "\n")
        assert (r.fatal, r.category, r.attribution) == (True, *expected), (code, killed, r.pattern_ids)


def test_a_kill_before_the_observer_still_decides() -> None:
    # a rank SIGKILLed before the launcher noticed (the OOM killer, an operator): not the observer's doing
    text = "srun: error: node1: task 1: Killed\n" + observer(-9) + "\n"
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *KILL), r.pattern_ids
