"""Kubernetes and training-operator messages, derived from their sources (issue 12 section 1, "generalise,
don't memorise").

What Kubernetes and the operators that run distributed training on it print when a training pod or job
fails for good was read out of their source and mapped to TrainGuard's categories (docs/detection.md,
"Kubernetes and training-operator messages, from their sources"):

- the kubelet (kubernetes/kubernetes, read through the code index): pkg/kubelet/eviction/helpers.go (008b3652:
  nodeLowMessageFmt, nodeConditionMessageFmt, containerMessageFmt, containerEphemeralStorageMessageFmt,
  podEphemeralStorageMessageFmt, emptyDirMessageFmt) and eviction_manager.go (0239cd73: localStorageEviction,
  evictPod), pkg/kubelet/preemption/preemption.go (01fe4466), pkg/kubelet/nodeshutdown/nodeshutdown_manager.go
  (09469950), pkg/kubelet/kuberuntime/kuberuntime_manager.go (doBackOff);
- the control plane: pkg/controller/job/job_controller.go (6ae037f1, syncJob) and pod_failure_policy.go
  (2b02db1b), pkg/scheduler/framework/preemption/preemption.go, pkg/util/node/node.go
  (NodeUnreachablePodMessage), pkg/controller/util/node/controller_utils.go (DeletePods),
  pkg/controller/tainteviction/taint_eviction.go, pkg/controller/podgc/gc_controller.go;
- the Kubeflow training operator (kubeflow/training-operator dfa5eadd:
  pkg/controller.v1/pytorch/pytorchjob_controller.go; pkg/controller.v1/common/job.go), JobSet
  (kubernetes-sigs/jobset 01a6277b: pkg/constants/constants.go) and Kueue (kubernetes-sigs/kueue
  pkg/scheduler/preemption/preemption.go).

A node that ran short of disk: storage_io / infrastructure (a full disk); a pod over a local-storage limit its
own spec set: storage_io / application; a pod preempted by the kubelet, the scheduler or Kueue, and a Job past
its deadline: preemption_or_timelimit / infrastructure; a node lost (NodeLost, taint-manager deletion, PodGC):
slurm_node_failure / hardware (the category is the scheduler's node failure, whichever scheduler). The
verdicts on failures reported elsewhere (BackoffLimitExceeded, FailJob rules on exit codes, the operator's `N
Worker replica(s) failed`, JobSet's failure, CrashLoopBackOff) are cascades of priority 1: the container's own
error decides; alone they read python_exception / application, as torchrun's ChildFailedError. Each positive
case in MESSAGES is a source's format string with its conversions filled in; each read healthy on the code
before this change. ALREADY_READ pins what the catalog read before. The look-alikes are messages a job
survives.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

# Entries added from the printers' sources, and the entry this change extended (each comment names the file).
ADDED = (
    "kubernetes_pod_preempted",
    "kueue_workload_preempted",
    "kubernetes_node_lost",
    "kubernetes_job_deadline_exceeded",
    "kubernetes_disk_pressure_eviction",
    "kubernetes_local_storage_limit_eviction",
    "kubernetes_job_failed",
    "kubernetes_job_failed_on_disruption",
    "training_operator_replicas_failed",
    "jobset_failed",
    "kubelet_crash_loop_backoff",
)
EXTENDED = ("kubernetes_node_shutdown",)
CASCADES = (
    "kubernetes_job_failed",
    "kubernetes_job_failed_on_disruption",
    "training_operator_replicas_failed",
    "jobset_failed",
    "kubelet_crash_loop_backoff",
)

DISK = ("storage_io", "infrastructure")
DISK_LIMIT = ("storage_io", "application")
PREEMPT = ("preemption_or_timelimit", "infrastructure")
NODE = ("slurm_node_failure", "hardware")
APP = ("python_exception", "application")
OOM = ("killed_oom_host", "application")

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # pkg/kubelet/eviction/helpers.go evictionMessage: nodeLowMessageFmt + thresholdMetMessageFmt +
    # containerMessageFmt
    (
        "Message:          The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, "
        "available: "
        "4Gi. Container trainer was using 120Gi, request is 0, has larger consumption of ephemeral-storage. ",
        DISK,
        "kubernetes_disk_pressure_eviction",
    ),
    (
        "  Warning  Evicted    3m    kubelet  The node was low on resource: inodes. ",
        DISK,
        "kubernetes_disk_pressure_eviction",
    ),
    (
        "Status:  Failed\nReason:  Evicted\nMessage:  The node was low on resource: nodefs.",
        DISK,
        "kubernetes_disk_pressure_eviction",
    ),
    # nodeConditionMessageFmt (admission on a node under DiskPressure)
    (
        "  Warning  Evicted  2m  kubelet  The node had condition: [DiskPressure]. ",
        DISK,
        "kubernetes_disk_pressure_eviction",
    ),
    # eviction_manager.go localStorageEviction with helpers.go's formats
    (
        "  Warning  Evicted  2m  kubelet  Container trainer exceeded its local ephemeral storage limit "
        '"50Gi". ',
        DISK_LIMIT,
        "kubernetes_local_storage_limit_eviction",
    ),
    (
        "  Warning  Evicted  2m  kubelet  Pod ephemeral local storage usage exceeds the total limit of "
        "containers 100Gi. ",
        DISK_LIMIT,
        "kubernetes_local_storage_limit_eviction",
    ),
    (
        'Message:          Usage of EmptyDir volume "scratch" exceeds the limit "200Gi". ',
        DISK_LIMIT,
        "kubernetes_local_storage_limit_eviction",
    ),
    # pkg/kubelet/preemption/preemption.go
    (
        "  Warning  Preempting  2m    kubelet  Preempted in order to admit critical pod",
        PREEMPT,
        "kubernetes_pod_preempted",
    ),
    (
        "Status:   Failed\nReason:   Preempting\nMessage:  Preempted in order to admit critical pod",
        PREEMPT,
        "kubernetes_pod_preempted",
    ),
    # pkg/scheduler/framework/preemption/preemption.go: DisruptionTarget message and the victim's event
    (
        '    message: "default-scheduler: preempting to accommodate a higher priority pod"',
        PREEMPT,
        "kubernetes_pod_preempted",
    ),
    (
        "  Normal   Preempted  45s   default-scheduler  Preempted by pod "
        "9f3c0c1e-5a57-4c1b-9d55-2b6a1f0e7c11 on node "
        "gpu-node-3",
        PREEMPT,
        "kubernetes_pod_preempted",
    ),
    # kueue pkg/scheduler/preemption/preemption.go preemptionMessage
    (
        "    Message:  Preempted to accommodate a workload (UID: d34468c2-1ce5-47cd-a61d-689be78b6121, "
        "JobUID: "
        "a20d0a6a-64a3-46ce-9b95-8cfb3bf6e675) due to prioritization in the ClusterQueue",
        PREEMPT,
        "kueue_workload_preempted",
    ),
    # pkg/kubelet/nodeshutdown/nodeshutdown_manager.go nodeShutdownNotAdmittedMessage (current wording)
    ("Message:      Pod was rejected as the node is shutting down.", PREEMPT, "kubernetes_node_shutdown"),
    # pkg/util/node/node.go NodeUnreachablePodMessage; controller_utils.go DeletePods; taint_eviction.go;
    # podgc
    (
        "Status:  Failed\nReason:  NodeLost\nMessage:  Node gpu-node-7 which was running pod "
        "trainer-worker-3 is "
        "unresponsive",
        NODE,
        "kubernetes_node_lost",
    ),
    (
        "  Normal  NodeControllerEviction  5m  node-controller  Marking for deletion Pod trainer-worker-3 "
        "from Node "
        "gpu-node-7",
        NODE,
        "kubernetes_node_lost",
    ),
    (
        "  Normal  TaintManagerEviction  2m  taint-eviction-controller  Marking for deletion Pod "
        "default/trainer-worker-3",
        NODE,
        "kubernetes_node_lost",
    ),
    ('    message: "Taint manager: deleting due to NoExecute taint"', NODE, "kubernetes_node_lost"),
    ('    message: "PodGC: node no longer exists"', NODE, "kubernetes_node_lost"),
    # pkg/controller/job/job_controller.go syncJob; training-operator pkg/controller.v1/common/job.go
    (
        "  Warning  DeadlineExceeded  1m  job-controller  Job was active longer than specified deadline",
        PREEMPT,
        "kubernetes_job_deadline_exceeded",
    ),
    (
        "    message: Job llama-sft has failed because it was active longer than specified deadline",
        PREEMPT,
        "kubernetes_job_deadline_exceeded",
    ),
    (
        "  Warning  BackoffLimitExceeded  1m  job-controller  Job has reached the specified backoff limit",
        APP,
        "kubernetes_job_failed",
    ),
    (
        "    message: Job has exceeded the specified maximal number of failed indexes",
        APP,
        "kubernetes_job_failed",
    ),
    ("  Warning  FailedIndexes  1m  job-controller  Job has failed indexes", APP, "kubernetes_job_failed"),
    (
        "    message: Job mnist-ddp has failed because it has reached the specified backoff limit",
        APP,
        "kubernetes_job_failed",
    ),
    # pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy (FailJob)
    (
        "    message: Container trainer for pod default/train-0-abcde failed with exit code 42 matching "
        "FailJob rule "
        "at index 0",
        APP,
        "kubernetes_job_failed",
    ),
    (
        "    message: Pod default/train-0-abcde has condition DisruptionTarget matching FailJob rule at "
        "index 1",
        PREEMPT,
        "kubernetes_job_failed_on_disruption",
    ),
    # training-operator pytorchjob_controller.go UpdateJobStatus (and the TFJob controller's wording)
    (
        "  Normal  PyTorchJobFailed  30s  pytorchjob-controller  PyTorchJob llama-ft is failed because 1 "
        "Worker "
        "replica(s) failed.",
        APP,
        "training_operator_replicas_failed",
    ),
    (
        "    Message:  TFJob default/mnist has failed because 2 Worker replica(s) failed.",
        APP,
        "training_operator_replicas_failed",
    ),
    # jobset pkg/constants/constants.go
    (
        "    Message:  jobset failed due to one or more job failures (first failed job: trainjob-node-0)",
        APP,
        "jobset_failed",
    ),
    ("    message: jobset failed due to reaching max number of restarts", APP, "jobset_failed"),
    (
        "  Warning  FailJobSetFailurePolicyAction  1m  jobset  applying FailJobSet failure policy action",
        APP,
        "jobset_failed",
    ),
    # pkg/kubelet/kuberuntime/kuberuntime_manager.go doBackOff (event, error, ErrCrashLoopBackOff)
    (
        "  Warning  BackOff    2m (x5 over 4m)  kubelet  Back-off restarting failed container trainer in pod "
        "trainer-0_default(5c1e2f0a-0000-4000-8000-000000000000)",
        APP,
        "kubelet_crash_loop_backoff",
    ),
    (
        "NAME        READY   STATUS             RESTARTS      AGE\ntrainer-0   0/1     CrashLoopBackOff   "
        "5 (30s ago)   6m",
        APP,
        "kubelet_crash_loop_backoff",
    ),
    ("    State:          Waiting\n      Reason:       CrashLoopBackOff", APP, "kubelet_crash_loop_backoff"),
]

# Read before this change (kept as they were): the kubelet's memory eviction, OOMKilled when true, graceful
# node shutdown.
ALREADY_READ = [
    (
        "Message:          The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        "Container trainer was using 60Gi, request is 16Gi, has larger consumption of memory. ",
        OOM,
        "kubernetes_memory_eviction",
    ),
    (
        "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137",
        OOM,
        "host_oom_killer",
    ),
    ("trainer-0   0/1     OOMKilled          2 (30s ago)   6m", OOM, "host_oom_killer"),
    (
        "Message:      Pod was terminated in response to imminent node shutdown.",
        PREEMPT,
        "kubernetes_node_shutdown",
    ),
    ("Message:      Pod was rejected as node is shutting down.", PREEMPT, "kubernetes_node_shutdown"),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_kubernetes_failure_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "expected", "entry"), ALREADY_READ, ids=[m[0][:60] for m in ALREADY_READ])
def test_kubernetes_messages_read_before_still_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED + EXTENDED)


@pytest.mark.parametrize("sig_id", CASCADES)
def test_job_verdicts_are_generic_cascades(sig_id: str) -> None:
    sig = load_catalog().get(sig_id)
    assert sig is not None and sig.cascade and sig.priority == 1


def test_the_container_s_oom_kill_decides_over_crash_loop_and_backoff_limit() -> None:
    text = (
        "    State:          Waiting\n      Reason:       CrashLoopBackOff\n"
        "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n"
        "  Warning  BackoffLimitExceeded  1m  job-controller  Job has reached the specified backoff limit\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *OOM), r.pattern_ids


def test_the_container_s_traceback_decides_over_the_operator_s_verdict() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 42, in <module>\n'
        "    main()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "  Normal  PyTorchJobFailed  30s  pytorchjob-controller  PyTorchJob llama-ft is failed because 1 "
        "Worker "
        "replica(s) failed.\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category) == (True, "cuda_oom"), r.pattern_ids


def test_a_memory_eviction_decides_over_the_failjob_disruption_rule() -> None:
    text = (
        "Message:  The node was low on resource: memory. Container trainer was using 60Gi, request is "
        "16Gi, has "
        "larger consumption of memory. \n"
        "    message: Pod default/train-0-abcde has condition DisruptionTarget matching FailJob rule at "
        "index 1\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *OOM), r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        # the scheduler cannot place a pending pod (no running job failed); its preemption note
        "  Warning  FailedScheduling  10s  default-scheduler  0/4 nodes are available: 4 Insufficient "
        "nvidia.com/gpu. preemption: 0/4 nodes are available: 4 No preemption victims found for incoming "
        "pod.",
        "trainer-0   0/1     Pending            0          2m",
        # image pulls the kubelet retries (the container never ran)
        "  Warning  Failed     2m   kubelet  Error: ImagePullBackOff",
        '  Normal   BackOff    2m   kubelet  Back-off pulling image "nvcr.io/nvidia/pytorch:24.01-py3"',
        # probes: the kubelet restarts the container (a restart that fails is read through its own error)
        "  Warning  Unhealthy  12s  kubelet  Liveness probe failed: HTTP probe failed with statuscode: 500",
        '  Warning  Unhealthy  12s  kubelet  Readiness probe failed: Get "http://10.0.0.1:8080/healthz": '
        "dial tcp "
        "10.0.0.1:8080: connect: connection refused",
        "  Normal   Killing    12s  kubelet  Container trainer failed liveness probe, will be restarted",
        # a node that may come back, a deletion the taint manager cancels
        "  Warning  NodeNotReady  3m  node-controller  Node is not ready",
        "  Normal  TaintManagerEviction  1m  taint-eviction-controller  Cancelling deletion of Pod "
        "default/trainer-0",
        # the kubelet reclaiming disk before it evicts anything; a PID-pressure eviction (no category)
        "  Warning  EvictionThresholdMet  5m  kubelet  Attempting to reclaim ephemeral-storage",
        "  Warning  Evicted    3m    kubelet  The node was low on resource: pids. ",
        # restarts the operators survive
        "  Warning  PyTorchJobRestarting  30s  pytorchjob-controller  PyTorchJob llama-ft is restarting "
        "because 1 "
        "Worker replica(s) failed.",
        "  Warning  Restarting  1m  jobset  restarting jobset, attempt 1",
        "  Warning  RestartJobSetFailurePolicyAction  1m  jobset  applying RestartJobSet failure policy "
        "action",
        # Kueue: the preemptor waiting for its quota; a pod failure policy on another condition
        "    Message:  couldn't assign flavors to pod set worker: insufficient unused quota for "
        "nvidia.com/gpu in "
        "flavor h100, 8 more needed. Pending the preemption of 1 workload(s)",
        "    message: Pod default/train-0-abcde has condition ConfigIssue matching FailJob rule at index 0",
        # events at Normal type of a healthy run, and configuration
        "  Normal  Scheduled  1m  default-scheduler  Successfully assigned default/trainer-0 to gpu-node-3",
        "  Normal  PyTorchJobSucceeded  1s  pytorchjob-controller  PyTorchJob llama-ft is successfully "
        "completed.",
        "backoffLimit: 4",
        "activeDeadlineSeconds: 86400",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text + "\n")


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)
