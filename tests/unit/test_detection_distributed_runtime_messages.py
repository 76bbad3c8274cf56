"""Distributed runtimes beyond PyTorch: messages derived from their sources (issue 12 section 1,
"generalise, don't memorise").

Instead of fitting excerpt lines, the messages that JAX/XLA, TensorFlow's multi-worker runtime, Horovod and
Gloo print when a distributed job fails for good were read out of their source and mapped to TrainGuard's
categories (docs/detection.md, "Distributed runtime messages, from their sources"): XLA/TSL's coordination
service and client (openxla/xla a4771e3c xla/tsl/distributed_runtime/coordination/coordination_service.cc,
3677f887 coordination_service_agent.cc, 611900e5 and 001918b7 xla/pjrt/distributed/client.cc, 5d8f791c
client.h, 2e7f7485 xla/tsl/distributed_runtime/preemption/preemption_notifier.cc; ROCm/xla 37fe764f
preemption_sync_manager.cc), TensorFlow (tensorflow/tensorflow c117e91a
tensorflow/core/common_runtime/base_collective_executor.cc, 732e2b91 tensorflow/core/nccl/nccl_manager.cc,
c8e5f669 tensorflow/core/framework/op_kernel.cc), Horovod (horovod/horovod 2626dc87
horovod/common/stall_inspector.cc, horovod/runner/gloo_run.py) and Gloo (facebookincubator/gloo cc441984
gloo/transport/tcp/pair.cc, tcp/helpers.h, tcp/error.cc, uv/unbound_buffer.cc, and pair.cc before 31b1f02).
Each positive case in MESSAGES is the source's format string with its conversions filled in; each read
healthy or as the program's generic exception on the code before this change. ALREADY_READ pins what the
catalog read before. The look-alikes are messages a job survives (warnings, retries, information, a bare
reset).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

ADDED = (
    "xla_coordination_task_failed",
    "tsl_preemption_notice",
    "tf_collective_timeout",
    "tf_collective_peer_unavailable",
    "gloo_connect_failed",
    "horovod_stall_shutdown",
)
EXTENDED = (
    "xla_coordination_service_timeout",
    "nccl_internal_error",
    "nccl_invalid_usage",
    "cuda_oom_allocator",
    "gloo_timeout",
    "launcher_nonzero_exit_detected",
)

TIMEOUT = ("nccl_timeout", "system_software")
PEER_LOST = ("nccl_error", "infrastructure")
NCCL_SW = ("nccl_error", "system_software")
NCCL_APP = ("nccl_error", "application")
OOM = ("cuda_oom", "application")
PREEMPTED = ("preemption_or_timelimit", "infrastructure")
APP_EXIT = ("python_exception", "application")

TB = 'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    main()\n'
GLOO = "[../third_party/gloo/gloo/transport"

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # xla/pjrt/distributed/client.h: the default missed_heartbeat_callback, LOG(QFATAL)
    (
        "F0926 17:26:32.075587  157988 client.h:77] Terminating process because the JAX distributed "
        "service detected fatal errors. This most likely indicates that another task died; see the other "
        "task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the "
        "previous output. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending "
        "heartbeats):\n/job:jax_worker/replica:0/task:3\nThe tasks have crashed. Check the task logs for "
        "an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    # xla/pjrt/distributed/client.h 5d8f791c, older releases
    (
        "F0412 23:39:41.657000 1234 client.h:77] Terminating process because the coordinator detected "
        "missing heartbeats. This most likely indicates that another task died; see the other task logs "
        "for more details. Status: UNAVAILABLE: Task /job:jax_worker/replica:0/task:3 heartbeat timeout.",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    (
        "F0412 23:39:41.657000 1234 client.h:90] Terminating process because of missing heartbeat response "
        "from the coordinator. This most likely indicates that the coordinator task died; see the "
        "coordinator's task logs for more details. Status: DEADLINE_EXCEEDED: Deadline Exceeded",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    # xla/pjrt/distributed/client.cc 001918b7, error_fn
    (
        "E0412 23:39:41.656900 1234 client.cc:96] Coordination service agent in error status: UNAVAILABLE: "
        "Task /job:jax_worker/replica:0/task:3 heartbeat timeout. This indicates that the remote task has "
        "failed, got preempted, or crashed unexpectedly. Check the task logs for an earlier error or "
        "scheduler events (e.g. preemption, eviction) to debug further.",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    # coordination_service_agent.cc, StartPollingForError
    (
        "E0926 17:26:32.075402  157988 coordination_service_agent.cc:332] Polled an error from "
        "coordination service (this can be an error from this or another task).",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    # coordination_service_agent.cc SetError (some releases);
    # tensorflow/core/distributed_runtime/session_mgr.h
    (
        "E0412 23:39:41.656900 1234 coordination_service_agent.cc:700] Coordination agent is set to ERROR: "
        "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    (
        "E1201 12:00:00.000000 140 session_mgr.cc:100] Coordination agent is set to error: UNAVAILABLE: "
        "Task /job:worker/replica:0/task:1 heartbeat timeout.",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    # coordination_service.cc, SendErrorPollingResponseOrFailAllTasks and CompleteShutdownAfterBarrier
    (
        "E1201 12:00:00.000000 140 coordination_service.cc:1200] Use error polling to propagate the "
        "following error to all tasks: UNAVAILABLE: The following tasks are unhealthy (stopped sending "
        "heartbeats):",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    (
        "E1201 12:00:00.000000 140 coordination_service.cc:1141] Shutdown barrier in coordination service "
        "has failed:\nDEADLINE_EXCEEDED: Barrier timed out. Id: Shutdown::123.",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    (
        TB + "jax.errors.JaxRuntimeError: INTERNAL: Shutdown barrier has failed.",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    # coordination_service.cc TaskState::RecordHeartbeat; coordination_service_agent.cc StartSendingHeartbeats
    (
        "E1201 12:00:00.000000 140 client.cc:96] Coordination service agent in error status: ABORTED: "
        "/job:jax_worker/replica:0/task:2 Heartbeat: Incarnation ID mismatch: expecting 123 but got 456. "
        "The task has restarted and likely crashed earlier",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    (
        "ABORTED: Leader incarnation ID mismatch: the coordination  leader (usually slice 0 task 0) has "
        "restarted. Check for earlier errors or any scheduler events (e.g. preemption, eviction) to debug "
        "further.",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    # xla/pjrt/distributed/client.cc 611900e5, Connect()
    (
        "E0412 23:39:41.000000 1234 client.cc:105] Failed to connect to distributed JAX controller: waited "
        "too long for some tasks to show up. This may be due to 1) some tasks crashed earlier before "
        "connecting, 2) some tasks were never scheduled, or 3) scheduling delays.",
        TIMEOUT,
        "xla_coordination_service_timeout",
    ),
    # xla/tsl/distributed_runtime/preemption/preemption_notifier.cc, preemption_sync_manager.cc
    (
        "W1201 12:00:00.000000 140 preemption_notifier.cc:89] SIGTERM caught at "
        "2026-12-01T12:00:00.000000+00:00",
        PREEMPTED,
        "tsl_preemption_notice",
    ),
    (
        "I1201 12:00:00.000000 140 preemption_sync_manager.cc:142] Notified coordination service that this "
        "task will be preempted at 2026-12-01T12:00:00+00:00. absl::Status: OK",
        PREEMPTED,
        "tsl_preemption_notice",
    ),
    (
        "I1201 12:00:01.000000 141 preemption_sync_manager.cc:170] Received preemption notice with "
        "death_time 2026-12-01T12:00:00+00:00",
        PREEMPTED,
        "tsl_preemption_notice",
    ),
    # tensorflow/core/common_runtime/base_collective_executor.cc: ExecuteAsync, CompleteParamsAsync
    (
        TB + "tensorflow.python.framework.errors_impl.DeadlineExceededError: Collective ops is aborted by: "
        "Collective has timed out during execution.\nThe error could be from a previous operation. Restart "
        "your program to reset. [Op:CollectiveReduceV2]",
        TIMEOUT,
        "tf_collective_timeout",
    ),
    (
        "E1201 12:00:00.000000 140 base_collective_executor.cc:249] BaseCollectiveExecutor::StartAbort "
        "DEADLINE_EXCEEDED: Collective has timed out waiting for other workers.",
        TIMEOUT,
        "tf_collective_timeout",
    ),
    (
        TB + "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: "
        "failed to connect to all addresses\nThe error could be from a previous operation. Restart your "
        "program to reset. [Op:CollectiveReduceV2]",
        PEER_LOST,
        "tf_collective_peer_unavailable",
    ),
    (
        "E1201 12:00:00.000000 140 base_collective_executor.cc:249] BaseCollectiveExecutor::StartAbort "
        "UNAVAILABLE: Socket closed",
        PEER_LOST,
        "tf_collective_peer_unavailable",
    ),
    # tensorflow/core/nccl/nccl_manager.cc, `Error invoking NCCL: ` + ncclGetErrorString
    (
        TB + "tensorflow.python.framework.errors_impl.UnknownError: Collective ops is aborted by: Error "
        "invoking NCCL: internal error\nThe error could be from a previous operation. Restart your program "
        "to reset.",
        NCCL_SW,
        "nccl_internal_error",
    ),
    (
        "E1201 12:00:00.000000 140 base_collective_executor.cc:249] BaseCollectiveExecutor::StartAbort "
        "UNKNOWN: Error invoking NCCL: invalid usage",
        NCCL_APP,
        "nccl_invalid_usage",
    ),
    # tensorflow/core/framework/op_kernel.cc; xla/stream_executor/device_memory_allocator.cc
    (
        TB + "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor "
        "with shape[1024,1024,64] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by "
        "allocator GPU_0_bfc",
        OOM,
        "cuda_oom_allocator",
    ),
    (
        TB + "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for "
        "2.00GiB (2147483648B) on device ordinal 0",
        OOM,
        "cuda_oom_allocator",
    ),
    # horovod/common/stall_inspector.cc with HOROVOD_STALL_SHUTDOWN_TIME_SECONDS
    (
        "[2026-12-01 12:00:00.000000: E /tmp/pip-req-build/horovod/common/stall_inspector.cc:105] One or "
        "more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
        "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks "
        "are trying to submit different tensors or that only subset of ranks is submitting tensors, which "
        "will cause deadlock. \nMissing ranks:\n1!: [allreduce.grad_0, allreduce.grad_1]\n"
        'One or more rank (marked by "!") is stalled for longer than 300 seconds. Will shutdown.',
        TIMEOUT,
        "horovod_stall_shutdown",
    ),
    # horovod/runner/gloo_run.py, _exec_command (non-elastic)
    (
        "Process 3 exit with status code 1.\nTerminating remaining workers after failure of Process 3.",
        APP_EXIT,
        "launcher_nonzero_exit_detected",
    ),
    # gloo/transport/tcp/pair.cc connectCallback with tcp/helpers.h; pair.cc before 31b1f02
    (
        TB + f"RuntimeError: {GLOO}/tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection refused, "
        "remote=[10.0.0.2]:34567",
        TIMEOUT,
        "gloo_connect_failed",
    ),
    (
        TB + "RuntimeError: "
        "[/opt/conda/conda-bld/pytorch_1587428398394/work/third_party/gloo/gloo/transport/tcp/pair.cc:799] "
        "connect [127.0.1.1]:4546: Connection refused",
        TIMEOUT,
        "gloo_connect_failed",
    ),
    # gloo/transport/uv/unbound_buffer.cc; gloo/transport/tcp/pair.cc sync mode
    (
        TB + f"RuntimeError: {GLOO}/uv/unbound_buffer.cc:67] Timed out waiting 1800000ms for recv operation "
        "to complete",
        TIMEOUT,
        "gloo_timeout",
    ),
    (TB + f"RuntimeError: {GLOO}/tcp/pair.cc:520] Read timeout [10.0.0.2]:34567", TIMEOUT, "gloo_timeout"),
    (TB + f"RuntimeError: {GLOO}/tcp/pair.cc:314] Write timeout [10.0.0.2]:34567", TIMEOUT, "gloo_timeout"),
]

# Read before this change (kept as they were).
ALREADY_READ = [
    (
        "2024-04-12 23:39:41.656900: E external/xla/xla/pjrt/distributed/client.cc:96] Coordination "
        "service agent in error status: DEADLINE_EXCEEDED: Deadline Exceeded",
        TIMEOUT,
        "xla_coordination_service_timeout",
    ),
    (
        "E1201 12:00:00.000000 140 coordination_service.cc:900] Stopping coordination service as cluster "
        "registration failed. This may be due to 1) some tasks crashed earlier before connecting",
        TIMEOUT,
        "xla_coordination_service_timeout",
    ),
    (
        TB + "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
        "allocate 17179869184 bytes.",
        OOM,
        "cuda_oom_allocator",
    ),
    (
        TB + "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: "
        "external/xla/xla/service/gpu/nccl_utils.cc:305: NCCL operation ncclCommInitRank(&comm, nranks, "
        "id, rank) failed: internal error - please report this issue to the NCCL developers.",
        NCCL_SW,
        "nccl_internal_error",
    ),
    (
        "[1,3]<stderr>:Horovod has been shut down. This was caused by an exception on one of the ranks or "
        "an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished "
        "execution.",
        APP_EXIT,
        "horovod_shutdown",
    ),
    (
        "RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus "
        "causing the job to be terminated. The first process to do so was:",
        APP_EXIT,
        "launcher_nonzero_exit_detected",
    ),
    (
        "ERROR:root:failure count == 3 -> stop running",
        APP_EXIT,
        "horovod_elastic_stopped",
    ),
    (
        TB + f"RuntimeError: {GLOO}/tcp/pair.cc:544] Connection closed by peer [10.0.0.2]:34567",
        PEER_LOST,
        "gloo_peer_lost",
    ),
    (
        TB + f"RuntimeError: {GLOO}/tcp/pair.cc:535] Read error [10.0.0.2]:34567: Connection reset by peer",
        PEER_LOST,
        "gloo_peer_lost",
    ),
    (
        TB + f"RuntimeError: {GLOO}/tcp/unbound_buffer.cc:78] Timed out waiting 60000ms for recv operation "
        "to complete",
        TIMEOUT,
        "gloo_timeout",
    ),
]

# Read as the program's exception before and after (usage and mismatch errors; a barrier raised into the
# program, as tuning pub498 is labelled).
PROGRAM_ERRORS = [
    # horovod/common/controller.cc, ConstructResponse
    TB + "tensorflow.python.framework.errors_impl.FailedPreconditionError: Mismatched ALLREDUCE tensor "
    "shapes: One rank sent a tensor of rank 2, but another rank sent a tensor of rank 3.",
    TB + "RuntimeError: Mismatched operations: One rank did an ALLREDUCE, but another rank did an ALLGATHER.",
    TB + "RuntimeError: Mismatched data types: One rank had type float32, but another rank had type float16.",
    # gloo/common/logging.h GLOO_ENFORCE
    TB + "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
    "op.preamble.length <= op.nbytes. 8773 vs 8192",
    # coordination_service.cc CheckBarrierTimeout, raised from client.connect()
    TB + "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: "
    "PjRT_Client_Connect. Timed out task names:",
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_runtime_failure_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "expected", "entry"), ALREADY_READ, ids=[m[0][-60:] for m in ALREADY_READ])
def test_messages_read_before_still_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize("text", PROGRAM_ERRORS, ids=[t[-50:] for t in PROGRAM_ERRORS])
def test_usage_and_mismatch_errors_stay_the_program_s(text: str) -> None:
    r = classify_text(text + "\n")
    assert (r.fatal, r.category, r.attribution) == (True, *APP_EXIT), r.pattern_ids


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED + EXTENDED)


def test_the_lost_task_s_own_error_decides_over_the_survivors_view() -> None:
    text = (
        TB + "ValueError: bad batch shape (3, 224, 224)\nF0926 17:26:32.075587  157988 client.h:77] "
        "Terminating process because the JAX distributed service detected fatal errors. This most likely "
        "indicates that another task died; see the other task logs for more details. absl::Status: "
        "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *APP_EXIT), r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        # Horovod's stall warning, no stall shutdown time set (stall_inspector.cc, LOG(WARNING))
        "[2026-12-01 12:00:00.000000: W /tmp/pip-req-build/horovod/common/stall_inspector.cc:107] One or "
        "more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
        "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks "
        "are trying to submit different tensors or that only subset of ranks is submitting tensors, which "
        "will cause deadlock. \nMissing ranks:\n1: [allreduce.grad_0]\n",
        # stall_inspector.cc: a shutdown time below the warning time disables the shutdown
        "[2026-12-01 12:00:00.000000: W /tmp/pip-req-build/horovod/common/stall_inspector.cc:37] "
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is less than HOROVOD_STALL_CHECK_TIME_SECONDS, will not "
        "shutdown.\n",
        # horovodrun in elastic mode: a worker's exit, the host blacklisted, the job goes on
        "Process 3 exit with status code 1.\n",
        "INFO:root:blacklist failing host: worker-3\n",
        "DEBUG:root:host worker-3 has been blacklisted, ignoring exit from local_rank=0\n",
        "WARNING:root:host registers state SUCCESS but is already blacklisted, ignoring: worker-3\n",
        # a bare reset outside Gloo's prefix (elastic Horovod survives a removed worker's reset)
        "[1]<stderr>:WARNING: worker 2: recv failed: Connection reset by peer; removing worker and "
        "resetting\n",
        # XLA/TSL's information and the end of a healthy run
        "I1201 12:00:00.000000 140 coordination_service_agent.cc:369] Coordination agent has successfully "
        "connected.\n",
        "I1201 12:00:00.000000 140 client.cc:120] Connected to distributed JAX controller\n",
        "I1201 12:00:00.000000 140 coordination_service.cc:1134] Shutdown barrier in coordination service "
        "has passed.\n",
        "I1201 12:00:00.000000 140 coordination_service_agent.cc:411] Cancelling error polling because the "
        "service or the agent is shutting down.\n",
        "I1201 12:00:00.000000 140 client.cc:130] Distributed task shutdown result: OK\n",
        "I1201 12:00:00.000000 140 coordination_service.cc:600] Waiting for 1/8 tasks to connect.\n",
        "I1201 12:00:00.000000 140 preemption_sync_manager.cc:120] Preemption sync protocol cancelled by "
        "notifier: CANCELLED: Preemption notifier is being deleted.. This is expected during program "
        "shutdown.\n",
        "I1201 12:00:00.000000 140 preemption_sync_manager.cc:200] Cancelled call to retrieve preemption "
        "notice. This is expected upon program shutdown.\n",
        # XLA's older client retrying its first connection (client.cc 001918b7, LOG(INFO) every 10 attempts)
        "I1201 12:00:00.000000 140 client.cc:150] Connect failed() with status: UNAVAILABLE: failed to "
        "connect to all addresses\n",
        # TensorFlow's allocator warning it recovers from, and the OOM hint text on its own
        "W1201 12:00:00.000000 140 bfc_allocator.cc:290] Allocator (GPU_0_bfc) ran out of memory trying to "
        "allocate 2.25GiB with freed_by_count=0. The caller indicates that this is not a failure, but this "
        "may mean that there could be performance gains if more memory were available.\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)
