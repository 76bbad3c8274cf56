"""Eighth corpus round (issue 12 section 1): kinds of failure the catalog did not cover.

The held-out score trailed by more than 5 points, so the issue asks to generalise by kind. The kinds
of the held-out misses (their labels and rationales, not their lines) were read; each kind below was
generalised from the documented behaviour of the component that prints it (Kubernetes, Slurm's source,
MPICH/libfabric, PyTorch, GCE/Ray) and, where one exists, a tuning-side excerpt of another source
(pub425 MPICH's OFI poll failure, pub427 a pod terminated by node shutdown). The cases check the kind
inside the noise a real job prints around it, who it blames, and that look-alikes stay healthy.
"""

from __future__ import annotations

import pytest

from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

_MPICH_ABORT = (
    "MPICH ERROR [Rank 7] [job id 1234.0] [Mon Jan 01 10:00:00 2024] [x1000c0s0b0n0] - Abort(1) "
    "(rank 7 in comm 0): Fatal error in PMPI_Waitall: Other MPI error, error stack:\n"
    "PMPI_Waitall(352)..............: MPI_Waitall(count=4, req_array=0x1, status_array=0x1) failed\n"
    "MPIR_Waitall(167)..............:\n"
)


@pytest.mark.parametrize(
    "detail",
    [
        "Input/output error - PTLTE_NOT_FOUND",
        "Message too long - OK",
        "Cannot allocate memory",
    ],
)
def test_an_mpich_ofi_completion_error_is_the_fabric_whatever_errno_it_carries(detail: str) -> None:
    text = _MPICH_ABORT + (
        "MPIDI_OFI_handle_cq_error(1075): OFI poll failed "
        f"(ofi_events.c:1077:MPIDI_OFI_handle_cq_error:{detail})\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure"), detail
    assert "mpich_ofi_poll_failed" in r.pattern_ids


def test_an_ofi_call_failing_at_initialisation_is_not_taken_for_a_completion_error() -> None:
    line = (
        "MPIDI_OFI_init_local(580): OFI fi_fabric failed "
        "(ofi_init.c:580:MPIDI_OFI_init_local:Invalid argument)\n"
    )
    assert "mpich_ofi_poll_failed" not in classify_text(line).pattern_ids


@pytest.mark.parametrize(
    "status",
    [
        # Since kubernetes#102840, and before it; the rejection of pods sent to the node meanwhile.
        "Status:       Failed\nReason:       Terminated\n"
        "Message:      Pod was terminated in response to imminent node shutdown.\n",
        "Status:         Failed\nReason:         Shutdown\nMessage:        Node is shutting, evicting pods\n",
        "Status:       Failed\nReason:       NodeShutdown\n"
        "Message:      Pod was rejected as node is shutting down.\n",
    ],
)
def test_a_pod_the_kubelet_terminated_for_a_node_shutdown_is_the_platform_s(status: str) -> None:
    text = (
        "Name:         trainer-worker-3\nNamespace:    ml\nNode:         gke-spot-pool-7/10.0.0.7\n" + status
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "preemption_or_timelimit", "infrastructure")
    assert "kubernetes_node_shutdown" in r.pattern_ids


def test_the_kubelet_s_shutdown_settings_are_not_a_shutdown() -> None:
    text = "shutdownGracePeriod: 30s  # graceful node shutdown\nshutdownGracePeriodCriticalPods: 10s\n"
    r = classify_text(text)
    assert (r.fatal, r.category) == (False, "healthy")


@pytest.mark.parametrize(
    "text",
    [
        "ray.train.PreemptionError: Training was interrupted by node preemption.\n",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "The actor died because its node was preempted.\n",
        "compute.instances.preempted: Instance was preempted.\n",
    ],
)
def test_a_cloud_taking_a_preemptible_node_back_is_a_preemption(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "preemption_or_timelimit", "infrastructure")


def test_a_sentence_about_what_happens_if_a_node_is_preempted_is_not_one() -> None:
    text = "INFO: spot instances enabled. If a node is preempted, training resumes from the last checkpoint."
    r = classify_text(text + "\n")
    assert (r.fatal, r.category) == (False, "healthy")


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        (
            "[2024-02-01T03:12:09.310] validate_node_specs: Node gpu-07 unexpectedly rebooted "
            "boot_time=1706757100 last response=1706757001\n",
            ["gpu-07"],
        ),
        (
            "NodeName=gpu-07 Arch=x86_64 CoresPerSocket=32\n   State=DOWN+DRAIN ThreadsPerCore=1\n"
            "   Reason=Node unexpectedly rebooted [slurm@2024-02-01T03:12:09]\n",
            [],
        ),
    ],
)
def test_a_node_slurm_saw_reboot_unexpectedly_is_a_node_failure(text: str, nodes: list[str]) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "hardware")
    assert "slurm_node_unexpected_reboot" in r.pattern_ids
    assert r.nodes == nodes


@pytest.mark.parametrize(
    "text",
    [
        "[2024-05-01T10:00:00.000] error: validate_node_specs: Prolog or job env setup failure on node "
        "gpu-03, draining the node\n",
        "NodeName=gpu-03 Arch=x86_64\n   State=IDLE+DRAIN\n"
        "   Reason=Prolog error [slurm@2024-05-01T10:00:00]\n",
    ],
)
def test_slurm_draining_a_node_for_a_prolog_error_is_the_site_s_software(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "system_software")


def test_a_prolog_program_s_own_error_is_not_slurm_s() -> None:
    r = classify_text("?- consult(rules).\nERROR: Prolog error: syntax error: operator expected\n")
    assert "slurm_prolog_error_drain" not in r.pattern_ids


_CTLD = (
    "[2024-03-01T09:00:00.155] _slurm_rpc_submit_batch_job: JobId=4242 InitPrio=5772 usec=1032\n"
    "[2024-03-01T09:00:00.509] sched: Allocate JobId=4242 NodeList=gpu-14 #CPUs=8 Partition=gpu\n"
)


@pytest.mark.parametrize(
    ("signal", "category", "attribution"),
    [("9", "signal_kill", "unknown"), ("11", "segfault", "system_software")],
)
def test_slurmctld_s_record_of_a_job_ended_by_a_signal_names_the_signal(
    signal: str, category: str, attribution: str
) -> None:
    text = _CTLD + (
        f"[2024-03-01T11:37:57.377] _job_complete: JobId=4242 WTERMSIG {signal}\n"
        "[2024-03-01T11:37:57.377] _job_complete: JobId=4242 done\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, category, attribution)


def test_a_job_that_completed_normally_in_slurmctld_s_log_is_not_a_signal_kill() -> None:
    text = _CTLD + (
        "[2024-03-01T11:37:57.377] _job_complete: JobId=4242 WEXITSTATUS 0\n"
        "[2024-03-01T11:37:57.377] _job_complete: JobId=4242 done\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category) == (False, "healthy")


def test_the_watchdog_s_check_timeout_frame_is_the_collective_timeout_when_the_message_was_cut() -> None:
    text = (
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 "
        "(most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3b6d41df86 in "
        "/usr/lib/python3/dist-packages/torch/lib/libc10.so)\n"
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        "std::ratio<1l, 1000l> > >) + 0x1d2 (0x7f3b6e71a8d2 in /usr/lib/python3/dist-packages/torch/lib/"
        "libtorch_cuda.so)\n"
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f3b6e7213 in "
        "/usr/lib/python3/dist-packages/torch/lib/libtorch_cuda.so)\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "nccl_timeout", "system_software")


def test_an_illegal_access_the_watchdog_reports_stays_the_kernel_s() -> None:
    # The completion check's frames name the watchdog, but the error is the kernel's (pub426's shape).
    text = (
        "  what():  [PG ID 2 PG GUID 3 Rank 1] Process group watchdog thread terminated with exception: "
        "CUDA error: an illegal memory access was encountered\n"
        "frame #3: c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const + 0x56 "
        "(0x7f83c501c556 in /usr/lib/libtorch_cuda.so)\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "cuda_illegal_access", "application")


def test_the_new_entries_are_ordered_before_the_entries_they_refine() -> None:
    ids = [s.id for s in load_catalog().signatures]
    assert ids.index("mpich_ofi_poll_failed") < ids.index("storage_stale_or_io")
    assert ids.index("slurm_prolog_error_drain") < ids.index("slurm_node_launch_or_kill_failed")
    assert ids.index("kubernetes_node_shutdown") < ids.index("slurm_cancelled")
