"""What evidence may do to a job (safety contract clauses 2 and 5): retried or caught errors are not
failures, a RUNNING job is only touched by evidence that it is failing, foreign hosts never count, a
signal kill is not an OOM, and a low-confidence verdict excludes no node."""

from __future__ import annotations

import pytest

from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.classify import classify_text
from trainguard.detection.scheduler import scheduler_findings
from trainguard.detection.severity import benign_occurrence, shows_running_job_failing
from trainguard.models import (
    ActionKind,
    Attribution,
    Category,
    Finding,
    FindingSource,
    JobSnapshot,
    Mode,
    Verdict,
)
from trainguard.policy import DecisionContext, PolicyConfig, PolicyState, decide

RUNNING = JobSnapshot(job_id="7", state="RUNNING", nodes=("node1", "node4"))
FAILED = RUNNING.model_copy(update={"state": "FAILED", "exit_code": 1})
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."


def findings(text: str) -> list[Finding]:
    a = LogAnalyzer()
    return a.feed(text.encode(), now=1.0) + a.flush(now=2.0)


@pytest.mark.parametrize(
    "line",
    [
        "[rank1]: ConnectionError: connection reset by peer, retrying (1/5)",
        "RuntimeError: NCCL WARN NET/Socket : connect failed, retrying in 5s",
        "WARNING:root:caught RuntimeError: transient, continuing",
        "urllib3.exceptions.ProtocolError: Connection aborted; will retry",
        "OSError: [Errno 5] Input/output error, retrying (2/10)",
        "UserWarning: ValueError: ignored bad sample 17",
    ],
)
def test_retried_caught_and_warned_errors_are_not_failures(line: str) -> None:
    assert [f for f in findings(line + "\n") if f.fatal] == []
    r = classify_text(line + "\n")
    assert not r.fatal and r.category == "healthy"


@pytest.mark.parametrize(
    "line",
    [
        "ConnectionError: connection reset by peer, retrying (5/5)",  # the last attempt failed
        "ConnectionError: connection reset by peer; giving up after 5 retries",
        "OSError: [Errno 28] No space left on device",
    ],
)
def test_final_or_unqualified_errors_stay_failures(line: str) -> None:
    assert any(f.fatal for f in findings("Traceback (most recent call last):\n" + line + "\n"))


def test_platform_verdicts_are_never_benign() -> None:
    assert not benign_occurrence(f"{XID79} retrying (1/5)", Category.GPU_HARDWARE, 3)


def _running_verdict(text: str, job: JobSnapshot = RUNNING) -> Verdict:
    return attribute(findings(text), job)


def test_a_running_job_with_only_application_errors_is_recorded_and_watched() -> None:
    text = 'Traceback (most recent call last):\n  File "x.py", line 3\nValueError: bad batch\n'
    verdict = _running_verdict(text)
    assert not verdict.fatal and verdict.attribution == Attribution.NONE
    assert "recorded and watched" in verdict.summary and verdict.evidence
    # the same lines once Slurm says the job stopped: a failure
    stopped = attribute(findings(text), FAILED)
    assert stopped.fatal and stopped.category == Category.PYTHON_EXCEPTION


@pytest.mark.parametrize(
    "line",
    [
        f"Nov 30 12:00:00 node3 kernel: {XID79}",
        f"node3: [Mon Nov 30 12:00:00 2026] {XID79}",
        f"2026-11-30T12:00:00+0000 node3.cluster.local kernel: {XID79}",
        "node3:123:456 [0] NCCL WARN NET/IB : Got completion from peer node9 with error 12",
    ],
)
def test_evidence_naming_only_a_host_outside_the_job_never_touches_it(line: str) -> None:
    running = _running_verdict(line + "\n")
    assert not running.fatal and running.nodes == ()
    stopped = attribute(findings(line + "\n"), FAILED)
    assert "node3" not in stopped.nodes and "node3.cluster.local" not in stopped.nodes


@pytest.mark.parametrize(
    ("line", "node"),
    [
        (f"node4: [Mon Nov 30 12:00:00 2026] {XID79}", "node4"),
        (f"Nov 30 12:00:00 node4.cluster.local kernel: {XID79}", "node4"),
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", None),  # the job's own process
        ("srun: error: Node failure on node1", "node1"),
    ],
)
def test_hardware_grade_evidence_on_its_own_node_touches_a_running_job(line: str, node: str | None) -> None:
    verdict = _running_verdict(line + "\n")
    assert verdict.fatal and verdict.category in (Category.GPU_HARDWARE, Category.SLURM_NODE_FAILURE)
    assert verdict.nodes == ((node,) if node else ())


def test_a_hang_or_slurm_saying_the_node_died_touches_a_running_job() -> None:
    hang = Finding(
        source=FindingSource.PROGRESS,
        pattern_id="progress_hang",
        category=Category.HANG,
        attribution=Attribution.APPLICATION,
    )
    assert shows_running_job_failing(hang, RUNNING)
    assert attribute([hang], RUNNING).fatal
    app = findings("Traceback (most recent call last):\nKeyError: 'x'\n")
    assert attribute([*app, hang], RUNNING).fatal
    nodes = {"node4": __import__("trainguard.models").models.NodeSnapshot(name="node4", state="down")}
    down = [f for f in scheduler_findings(RUNNING, nodes) if f.fatal]
    assert down and attribute(down, RUNNING).nodes == ("node4",)


@pytest.mark.parametrize(
    "line",
    [
        "NCCL WARN NET/IB : Got completion from peer node4 with error 12",
        "RuntimeError: CUDA error: out of memory",
        "slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-11-30T12:00:00 ***",
        "[E ProcessGroupNCCL.cpp:821] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(x)",
        "Training appears to be hanging at iteration 1200",
    ],
)
def test_other_evidence_on_a_running_job_is_only_watched(line: str) -> None:
    assert not _running_verdict(line + "\n").fatal


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: node4: task 2: Killed",
        "srun: error: node1: tasks 0-1: Exited with exit code 1",
        "srun: error: node4: task 3: Segmentation fault (core dumped)",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "mpirun noticed that process rank 3 with PID 4242 on node node4 exited on signal 9 (Killed).",
    ],
)
def test_a_launchers_verdict_that_a_rank_died_touches_a_running_job(line: str) -> None:
    """srun, torchrun's agent and mpirun report a rank dead only when its process is gone: the job is
    failing even before srun tears the step down and Slurm ends the job."""
    assert _running_verdict(line + "\n").fatal


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: node9: task 2: Killed",  # a host outside the job
        "srun: error: node4: task 3: Terminated",  # srun's own teardown of the survivors
        "srun: error: node4: task 3: Exited with exit code 0",
        "Killed",  # a shell's report: who killed what is not said
        "subprocess.CalledProcessError: Command 'x' returned non-zero exit status 1.",
        "echo srun error: node4: task 2: Killed",
    ],
)
def test_lines_that_are_not_a_launchers_verdict_on_its_ranks_are_only_watched(line: str) -> None:
    assert not _running_verdict(line + "\n").fatal


def test_policy_records_and_watches_a_watched_verdict() -> None:
    verdict = _running_verdict("Traceback (most recent call last):\nValueError: x\n")
    ctx = DecisionContext(workload_key="lab/7/1", mode=Mode.ACTION, acknowledged=True, now=1.0, job=RUNNING)
    advice, state = decide(PolicyState(), verdict, ctx, PolicyConfig())
    assert advice.action == ActionKind.NONE and advice.reason.startswith("Record and watch")
    assert state.budget_spent == 0 and state.history == ()


# -- clause 5: a signal kill is not an OOM ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "srun: error: node2: task 2: Killed\n",
        "/var/spool/slurmd/job9/slurm_script: line 20: 4242 Killed   python train.py\n",
        "  exitcode  : -9 (pid: 14750)\n  traceback : Signal 9 (SIGKILL) received by PID 14750\n",
        "subprocess.CalledProcessError: Command '[...]' died with <Signals.SIGKILL: 9>.\n",
    ],
)
def test_a_sigkill_without_oom_evidence_is_a_signal_kill(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "signal_kill", "unknown")
    assert r.nodes == []  # who sent the signal is not known: no node is blamed


@pytest.mark.parametrize(
    "oom",
    [
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=9.0. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.",
        "[12345.678] Out of memory: Killed process 4242 (python) total-vm:1234kB",
    ],
)
def test_oom_evidence_from_slurm_or_the_kernel_makes_it_an_oom(oom: str) -> None:
    r = classify_text(f"{oom}\nsrun: error: node2: task 2: Killed\n")
    assert (r.category, r.attribution) == ("killed_oom_host", "application")


def test_slurm_exit_signal_nine_is_a_signal_kill_and_out_of_memory_is_an_oom() -> None:
    killed = JobSnapshot(job_id="9", state="FAILED", exit_code=0, exit_signal=9, nodes=("node2",))
    verdict = attribute(scheduler_findings(killed, {}), killed)
    assert (verdict.category, verdict.attribution) == (Category.SIGNAL_KILL, Attribution.UNKNOWN)
    assert "no OOM evidence" in verdict.summary and verdict.confidence < 0.7
    oom = killed.model_copy(update={"state": "OUT_OF_MEMORY"})
    assert attribute(scheduler_findings(oom, {}), oom).category == Category.KILLED_OOM_HOST


# -- confidence ----------------------------------------------------------------------------------------------


def test_a_low_confidence_hardware_verdict_gives_advice_without_exclusion() -> None:
    job = FAILED
    ctx = DecisionContext(workload_key="lab/7/1", mode=Mode.ACTION, acknowledged=True, now=1.0, job=job)
    sure = Verdict(
        category=Category.GPU_HARDWARE,
        attribution=Attribution.HARDWARE,
        fatal=True,
        confidence=0.9,
        nodes=("node4",),
    )
    unsure = sure.model_copy(update={"confidence": 0.45})
    a_sure, s_sure = decide(PolicyState(), sure, ctx, PolicyConfig())
    a_unsure, s_unsure = decide(PolicyState(), unsure, ctx, PolicyConfig())
    assert a_sure.exclude_nodes == ("node4",) and s_sure.excluded_nodes == ("node4",)
    assert a_unsure.action == ActionKind.REQUEUE and a_unsure.exclude_nodes == ()
    assert s_unsure.excluded_nodes == () and "confidence 0.45" in a_unsure.reason


def test_a_nccl_watchdog_timeout_alone_has_low_confidence_and_excludes_nothing() -> None:
    text = (
        "node4:1:2 [0] NCCL INFO comm 0x1 rank 3 nranks 8\n"
        "[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=10, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600003 milliseconds "
        "before timing out.\n"
    )
    r = classify_text(text)
    assert r.category == "nccl_timeout" and r.confidence < PolicyConfig().exclude_min_confidence


def test_different_collectives_across_ranks_of_one_group_are_the_programs() -> None:
    text = "".join(
        f"[rank{r}]:[E ProcessGroupNCCL.cpp:607] [PG 0 Rank {r}] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, Timeout(ms)=600000) "
        "ran for 600003 milliseconds before timing out.\n"
        for r, seq, op in ((0, 41, "ALLREDUCE"), (1, 41, "ALLREDUCE"), (2, 40, "BROADCAST"))
    )
    r = classify_text(text)
    assert (r.category, r.attribution) == ("nccl_timeout", "application")
    aligned = text.replace("SeqNum=40, OpType=BROADCAST", "SeqNum=41, OpType=ALLREDUCE")
    assert classify_text(aligned).attribution != "application"


def test_every_verdict_carries_a_confidence_between_zero_and_one() -> None:
    for text in ("", "RuntimeError: CUDA error: out of memory\n", f"node2: {XID79}\n", "Killed\n"):
        r = classify_text(text)
        assert 0.0 < r.confidence <= 1.0


def test_a_healthy_verdict_over_unexplained_error_text_claims_less() -> None:
    clean = classify_text(" iteration 10/100 | elapsed time per iteration (ms): 410.0 | lm loss: 2.1\n")
    murky = classify_text('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n')
    assert not clean.fatal and not murky.fatal
    assert murky.confidence <= 0.5 < clean.confidence
