"""Ray and training frameworks' own failure messages, derived from their sources (issue 12 section 1).

Instead of fitting excerpt lines, the messages that Ray (Core, Train) and the training frameworks' runtimes
print when a distributed run fails for good were read out of their source and mapped to TrainGuard's
categories (docs/detection.md, "Ray and training frameworks' messages, from their sources"):
- ray-project/ray: python/ray/exceptions.py (3c6f7df5c02ea13ed318b8979feb912c80ec9b1b, 007329712e97d47f),
  src/ray/raylet/node_manager.cc (a3d430a66d7b75bd1433f41f47b07715e7d3fb83),
  src/ray/gcs/gcs_server/gcs_node_manager.cc (59ec1d2ebe3096b71f7ea7a0943e2b2dcc47d33d),
  src/ray/core_worker/transport/normal_task_submitter.cc (7d3d1cac2854a1da79be4ec925b5496e09df6f97),
  src/ray/core_worker/task_manager.cc (eb096f7a2f1e6ddaf930e64d760db26d424971e0),
  python/ray/train/base_trainer.py (dfb0711e7eb3c4180a3e6456404aeec8e84b5008),
  python/ray/train/v2/api/exceptions.py (53290b4efa51eec923fd5422419c61f8cf3ab994);
- pytorch/pytorch: torch/multiprocessing/spawn.py (04dd8db73072a2b109700cf97f10958c9b7ec9ee);
- Lightning-AI/pytorch-lightning: src/lightning/pytorch/trainer/connectors/signal_connector.py
  (03d34b2c970a7be3e577e09913d7deb1a2f9ba9a), src/lightning/pytorch/utilities/exceptions.py
  (0b20ea9bfab7d9477914621ee377ae7f44f5f865), src/lightning/fabric/utilities/exceptions.py
  (2acfd5279d0944eb459e2960a5c93ec54515a0a6);
- huggingface/accelerate: src/accelerate/utils/operations.py (01a1ffcd38fbdc065db5f23008c315498d149854).
Each positive case in MESSAGES is the source's format string with its fields filled in; each read healthy or
through another entry (the program's exception, a preemption) on the code before this change. ALREADY_READ
pins the messages the catalog read right before. The look-alikes are messages a job survives.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

ADDED = (
    "ray_node_marked_dead",
    "ray_node_died_error",
    "ray_worker_crashed_error",
    "ray_train_failed_wrapper",
    "torch_spawn_crash_signal",
    "torch_spawn_terminated",
    "torch_spawn_other_signal",
    "torch_spawn_exit_code",
    "lightning_sigterm_exception",
)
RECORDED = ("ray_node_died_causes_hint",)  # fatal: false
EXTENDED = ("ray_worker_died_unknown",)

NODE = ("slurm_node_failure", "hardware")
KILL = ("signal_kill", "unknown")
CRASH = ("segfault", "system_software")
APP = ("python_exception", "application")
TERM = ("preemption_or_timelimit", "infrastructure")

TB = 'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    main()\n'
NODE_ID = "2c82620270df6b9dd7ae2791ef51ee4b5a9d5df9f795986c10dd219c"
OBJ = "00ffffffffffffffffffffffffffffffffffffff0100000001000000"
MARKED_DEAD = (
    f"2023-03-03 05:15:30,774 WARNING worker.py:1866 -- The node with node id: {NODE_ID} and "
    "address: 10.130.0.113 and node name: 10.130.0.113 has been marked dead because the detector "
    "has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes "
    "unexpectedly (OOM, preempted node, etc.) \n"
    "\t(2) raylet has lagging heartbeats due to slow network or busy workload.\n"
)
MARKED_DEAD_OLD = (
    f"The node with node id {NODE_ID} has been marked dead because the detector has missed too "
    "many heartbeats from it.\n"
)
NODE_DIED = (
    "ray.exceptions.NodeDiedError: Task failed due to the node (where this task was running)  was "
    f"dead or unavailable.\n\nThe node IP: 10.0.0.7, node ID: {NODE_ID}\n\n"
    "This can happen if the instance where the node was running failed, the node was preempted, or "
    "raylet crashed unexpectedly (e.g., due to OOM) etc.\n\n"
    f'To see node death information, use `ray list nodes --filter "node_id={NODE_ID}"`'
)
NODE_DIED_OLD = (
    "ray.exceptions.NodeDiedError: Task failed due to the node dying.\n\n"
    f"The node (IP: 10.0.0.7, node ID: {NODE_ID}) where this task was running crashed unexpectedly. "
    "This can happen if: (1) the instance where the node was running failed, (2) raylet crashes "
    "unexpectedly (OOM, preempted node, etc)."
)
WORKER_CRASHED = (
    "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. "
    "Check python-core-worker-*.log files for more information."
)
RAYLET_DIED = (
    "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more "
    "information."
)
RAYLET_WORKER_DIED = (
    "(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
    "troubleshoot the problem, check the logs for the dead worker. RayTask ID: "
    "ffffffffffffffff7ab5e339a44fee5d8162b4ce02000000 Worker ID: "
    f"88aeec634aec99cb478d00f526ed293ace80d0f8ce0aaf0a193a8566 Node ID: {NODE_ID} "
    "Worker IP address: 10.0.10.143 Worker port: 10002 Worker PID: 2147 Worker exit type: "
    "SYSTEM_ERROR Worker exit detail: "
)
LEASED = (
    "The leased worker has unrecoverable failure. Worker is requested to be destroyed when it is returned."
)
CONNECTION = (
    "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential "
    "root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray "
    "stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected "
    "errors."
)
TRAIN_V1 = (
    "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the "
    "previous error messages for a cause. After fixing the issue (assuming that the error is not "
    "caused by your own application logic, but rather an error such as OOM), you can restart the run "
    "from scratch or continue this run."
)
TRAIN_V2 = "ray.train.WorkerGroupError: Training failed due to worker errors:\n[Rank 1 Error Snippet]:"
TRAIN_V2_EARLY = (
    "ray.train.v2.api.exceptions.TrainingFailedError: Training failed due to worker errors. Please "
    "inspect the error logs above, or access the latest worker failures in this exception's "
    "`worker_failures` attribute."
)
SPAWN = "torch.multiprocessing.spawn.ProcessExitedException: process {i} terminated with {how}"
LIGHTNING_TB = (
    'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    trainer.fit(model)\n'
    '  File "/opt/venv/lib/python3.11/site-packages/lightning/pytorch/loops/fit_loop.py", line 460, in '
    "on_advance_end\n    raise SIGTERMException\n"
)
ACTOR_DIED = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # src/ray/gcs/gcs_server/gcs_node_manager.cc, as the driver prints it, then the driver's traceback
    (MARKED_DEAD + TB + ACTOR_DIED, NODE, "ray_node_marked_dead"),
    (MARKED_DEAD_OLD + TB + TRAIN_V1, NODE, "ray_node_marked_dead"),
    # src/ray/core_worker/transport/normal_task_submitter.cc (NODE_DIED), raised as NodeDiedError
    (TB + NODE_DIED, NODE, "ray_node_died_error"),
    (TB + NODE_DIED_OLD, NODE, "ray_node_died_error"),
    # python/ray/exceptions.py, WorkerCrashedError.__str__ and LocalRayletDiedError.__str__
    (TB + WORKER_CRASHED, KILL, "ray_worker_crashed_error"),
    (TB + RAYLET_DIED, KILL, "ray_worker_crashed_error"),
    # src/ray/raylet/node_manager.cc, HandleReturnWorker's exit detail in the raylet's report
    (RAYLET_WORKER_DIED + LEASED, KILL, "ray_worker_died_unknown"),
    # torch/multiprocessing/spawn.py, ProcessContext.join
    (TB + SPAWN.format(i=2, how="signal SIGFPE"), CRASH, "torch_spawn_crash_signal"),
    (TB + SPAWN.format(i=0, how="signal SIGILL"), CRASH, "torch_spawn_crash_signal"),
    (TB + SPAWN.format(i=1, how="signal SIGTERM"), KILL, "torch_spawn_terminated"),
    (TB + SPAWN.format(i=3, how="signal SIGHUP"), KILL, "torch_spawn_other_signal"),
    (TB + SPAWN.format(i=3, how="signal SIGINT"), KILL, "torch_spawn_other_signal"),
    (TB + SPAWN.format(i=0, how="signal <Unknown signal 77>"), KILL, "torch_spawn_other_signal"),
    # src/lightning/pytorch/utilities/exceptions.py, raised by the loops after signal_connector.py's handler
    (
        "[rank: 0] Received SIGTERM: 15\n"
        + LIGHTNING_TB
        + "lightning.pytorch.utilities.exceptions.SIGTERMException",
        TERM,
        "lightning_sigterm_exception",
    ),
    (
        LIGHTNING_TB + "pytorch_lightning.utilities.exceptions.SIGTERMException",
        TERM,
        "lightning_sigterm_exception",
    ),
]

# Wrappers whose verdict was already the program's: now a cascade, and alone still the program's failure.
WRAPPERS = [
    # python/ray/train/base_trainer.py, TrainingFailedError._RESTORE_MSG
    (TB + TRAIN_V1, "ray_train_failed_wrapper"),
    # python/ray/train/v2/api/exceptions.py, WorkerGroupError / TrainingFailedError
    (TB + TRAIN_V2, "ray_train_failed_wrapper"),
    (TB + TRAIN_V2_EARLY, "ray_train_failed_wrapper"),
    # torch/multiprocessing/spawn.py, a process that exited non-zero without an error file
    (TB + SPAWN.format(i=3, how="exit code 1"), "torch_spawn_exit_code"),
]

# Read right before this change (kept as they were).
ALREADY_READ = [
    # python/ray/exceptions.py RayActorError, with the raylet's exit detail (src/ray/raylet/node_manager.cc)
    (
        TB + ACTOR_DIED + "\n\tclass_name: RayTrainWorker\n\tactor_id: 5fe1e3b2b1e1e7d2a54c0d3101000000\n"
        "\tpid: 4242\n\tip: 10.0.0.7\nThe actor is dead because its worker process has died. Worker exit "
        "type: SYSTEM_ERROR Worker exit detail: " + CONNECTION,
        KILL,
        "ray_worker_died_unknown",
    ),
    (RAYLET_WORKER_DIED + CONNECTION, KILL, "ray_worker_died_unknown"),
    (
        TB + "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
        KILL,
        "ray_actor_died_wrapper",
    ),
    # an actor whose constructor raised: the program's own error
    (
        TB + "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation "
        "task, ray::RayTrainWorker.__init__() (pid=4242, ip=10.0.0.7, actor_id=5fe1, "
        'repr=<RayTrainWorker>)\n  File "train.py", line 3, in __init__\nValueError: bad config',
        APP,
        "python_exception_line",
    ),
    # Ray's memory monitor (python/ray/exceptions.py OutOfMemoryError with the raylet's text)
    (
        TB + "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        f"Memory on the node (IP: 10.0.0.7, ID: {NODE_ID}) where the task (task ID: "
        "43534ce9375fa8e4cd0d0ec285d9974a6a95897401000000, name=allocate_memory, pid=11362, memory "
        "used=1.25GB) was running was 7.79GB / 7.80GB (0.998957), which exceeds the memory usage "
        "threshold of 0.95.",
        ("killed_oom_host", "application"),
        "host_oom_other_reports",
    ),
    # python/ray/exceptions.py ObjectLostError: `lost due to node failure`
    (
        TB + f"ray.exceptions.ObjectLostError: Failed to retrieve object {OBJ}. To see information "
        "about where this ObjectRef was created in Python, set the environment variable "
        "RAY_record_ref_creation_sites=1 during `ray start` and `ray.init()`.\n\n"
        f"All copies of {OBJ} have been lost due to node failure. Check cluster logs "
        "(`/tmp/ray/session_latest/logs`) for more information about the failure.",
        NODE,
        "slurm_node_failure",
    ),
    # the program's own errors and framework misuse
    (
        TB + "ray.exceptions.RayTaskError(ZeroDivisionError): ray::train_step() (pid=4242, ip=10.0.0.7)",
        APP,
        "python_exception_line",
    ),
    (
        TB + "lightning.fabric.utilities.exceptions.MisconfigurationException: No `training_step()` "
        "method defined.",
        APP,
        "python_exception_line",
    ),
    (
        TB + "accelerate.utils.operations.DistributedOperationException: Cannot apply desired "
        "operation due to shape mismatches. All shapes across devices must be valid.\n\n"
        "Operation: `accelerate.utils.operations.gather`\nInput shapes:\n  - Process 0: [1, 5]\n"
        "  - Process 1: [1, 2, 5]",
        APP,
        "python_exception_line",
    ),
    (
        TB + "torch.multiprocessing.spawn.ProcessRaisedException: \n\n-- Process 0 terminated with the "
        "following error:\nTraceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 90, in '
        '_wrap\n    fn(i, *args)\n  File "train.py", line 10, in run\n'
        "    x = d['k']\nKeyError: 'k'",
        APP,
        "python_exception_line",
    ),
    # torch/multiprocessing/spawn.py with the signals other entries read
    (TB + SPAWN.format(i=1, how="signal SIGKILL"), KILL, "sigkill"),
    (TB + SPAWN.format(i=0, how="signal SIGSEGV"), CRASH, "segfault"),
    (TB + SPAWN.format(i=0, how="signal SIGABRT"), CRASH, "core_dumped_abort"),
    # Lightning's SIGTERM notice (signal_connector.py `_sigterm_notifier_fn`, rank_prefixed_message)
    ("[rank: 0] Received SIGTERM: 15", TERM, "sigterm_received"),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_framework_failure_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "entry"), WRAPPERS, ids=[m[0][-60:] for m in WRAPPERS])
def test_wrapper_alone_is_the_program_s_failure(text: str, entry: str) -> None:
    assert_read_as(text + "\n", APP, entry)


@pytest.mark.parametrize(("text", "expected", "entry"), ALREADY_READ, ids=[m[0][-60:] for m in ALREADY_READ])
def test_messages_read_before_still_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


def test_train_wrapper_gives_way_to_the_worker_s_error() -> None:
    text = (
        TB + TRAIN_V2 + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 "
        "has a total capacity of 79.10 GiB of which 1.06 GiB is free.\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category) == (True, "cuda_oom"), r.pattern_ids


def test_worker_crash_wrapper_gives_way_to_the_node_s_death() -> None:
    assert_read_as(MARKED_DEAD + TB + WORKER_CRASHED + "\n", NODE, "ray_node_marked_dead")


def test_spawn_sigterm_gives_way_to_the_rank_s_own_error() -> None:
    text = (
        TB
        + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        + TB
        + SPAWN.format(i=1, how="signal SIGTERM")
        + "\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category) == (True, "cuda_illegal_access"), r.pattern_ids


def test_node_died_error_is_not_read_as_a_preemption() -> None:
    r = classify_text(TB + NODE_DIED + "\n")
    assert "cloud_node_preempted" not in r.pattern_ids, r.pattern_ids
    assert r.category == "slurm_node_failure", r.pattern_ids


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} | {w[1] for w in WRAPPERS} >= set(ADDED + EXTENDED)


@pytest.mark.parametrize(
    "text",
    [
        # the GCS's node death alone (printed as a WARNING; Ray Train's FailureConfig may restart the group)
        MARKED_DEAD,
        MARKED_DEAD + "(RayTrainWorker pid=4242) epoch 3 step 100 loss 1.25\n",
        # an actor that exits on purpose (src/ray/raylet/node_manager.cc exit type INTENDED_USER_EXIT)
        "The actor is dead because its worker process has died. Worker exit type: INTENDED_USER_EXIT "
        "Worker exit detail: Worker exits by an user request. exit_actor() is called.\n",
        # Lightning's Slurm auto-requeue (signal_connector.py `_slurm_sigusr_handler_fn`): the job is requeued
        "Handling auto-requeue signal: 10\nrequeing job 4242...\nRequeued SLURM job: 4242\n"
        "Bypassing SIGTERM: 15\n",
        # torch.multiprocessing.spawn's own teardown of the other processes (spawn.py, log.warning)
        "WARNING:torch.multiprocessing.spawn:Terminating process 4242 via signal SIGTERM\n",
        # the NodeDiedError's list of possible causes, alone (no exception line): fatal before this change
        "This can happen if the instance where the node was running failed, the node was preempted, or "
        "raylet crashed unexpectedly (e.g., due to OOM) etc.\n",
        # a task error Ray retries, and the memory monitor's summary that counts no OOM kill
        "(raylet) The worker died unexpectedly while executing this task; retrying (attempt 2 of 4).\n",
        "(raylet) node_manager.cc:3040: 0 Workers (tasks / actors) killed due to memory pressure (OOM), "
        f"2 Workers crashed due to other reasons at node (ID: {NODE_ID}, IP: 172.31.183.172) over the "
        "last time period.\n",
        # source and configuration mentioning the names
        "from lightning.pytorch.utilities.exceptions import SIGTERMException\n",
        "failure_config=FailureConfig(max_failures=3)  # retry on worker failure\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + RECORDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)
