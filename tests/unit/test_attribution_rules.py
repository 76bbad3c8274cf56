from __future__ import annotations

from trainguard.attribution.rules import attribute, block_layout
from trainguard.detection.classify import classify_text
from trainguard.models import Attribution, Category, Finding, FindingSource, JobSnapshot


def finding(pid: str, cat: Category, att: Attribution, offset: int, **kw: object) -> Finding:
    return Finding(
        source=FindingSource.LOG,
        pattern_id=pid,
        category=cat,
        attribution=att,
        offset=offset,
        line=f"{pid} line",
        timestamp=1.0,
        **kw,
    )


def test_first_initiating_failure_wins_over_louder_cascades() -> None:
    cascades = [
        finding("nccl_watchdog_timeout", Category.NCCL_TIMEOUT, Attribution.SYSTEM_SOFTWARE, i, cascade=True)
        for i in range(0, 50)
    ]
    root = finding("cuda_illegal_memory_access", Category.CUDA_ILLEGAL_ACCESS, Attribution.APPLICATION, 100)
    later = finding("cuda_oom_allocator", Category.CUDA_OOM, Attribution.APPLICATION, 200)
    v = attribute([*cascades, later, root])
    assert v.category == Category.CUDA_ILLEGAL_ACCESS and v.fatal
    assert v.pattern_ids[0] == "cuda_illegal_memory_access"
    assert "cascade" in v.summary
    only_cascades = attribute(cascades)
    assert only_cascades.category == Category.NCCL_TIMEOUT and only_cascades.confidence < v.confidence


def test_platform_verdict_beats_the_application_symptoms_it_causes() -> None:
    symptom = finding("cuda_unknown_error", Category.GPU_HARDWARE, Attribution.HARDWARE, 10, priority=1)
    traceback = finding("python_exception", Category.PYTHON_EXCEPTION, Attribution.APPLICATION, 5, priority=1)
    node = finding(
        "slurm_node_failure",
        Category.SLURM_NODE_FAILURE,
        Attribution.HARDWARE,
        50,
        priority=3,
        nodes=("gpu-07",),
    )
    v = attribute([traceback, symptom, node])
    assert v.category == Category.SLURM_NODE_FAILURE and v.nodes == ("gpu-07",)
    assert attribute([traceback, symptom]).category == Category.PYTHON_EXCEPTION  # earliest of equals


def test_healthy_and_straggler_verdicts() -> None:
    assert attribute([]).category == Category.HEALTHY
    slow = Finding(
        source=FindingSource.PROGRESS,
        pattern_id="progress_straggler",
        category=Category.STRAGGLER,
        attribution=Attribution.HARDWARE,
        fatal=False,
        detail="slow",
    )
    v = attribute([slow])
    assert v.category == Category.STRAGGLER and not v.fatal


def test_ranks_map_to_nodes_through_the_task_layout() -> None:
    job = JobSnapshot(job_id="1", nodes=("n0", "n1", "n2"))
    layout = block_layout(job, 8)
    assert [layout(0), layout(8), layout(23), layout(24)] == ["n0", "n1", "n2", None]
    xid = finding("xid_hardware", Category.GPU_HARDWARE, Attribution.HARDWARE, 1, rank=17, priority=3)
    assert attribute([xid], job, tasks_per_node=8).nodes == ("n2",)
    app = finding("python_exception", Category.PYTHON_EXCEPTION, Attribution.APPLICATION, 1, rank=17)
    assert attribute([app], job, tasks_per_node=8).nodes == ()


def test_classify_reports_nodes_from_log_prefixes() -> None:
    text = (
        "gpu-a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
        "Mar  4 04:10:52 gpu-b kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
        "[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: x\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "gpu_hardware", "hardware")
    assert r.nodes == ["gpu-b"]
    assert r.evidence[0].startswith("Mar  4")


def test_static_excerpt_that_just_stops_is_not_a_hang() -> None:
    lines = "".join(
        f" iteration {i:6d}/ 1000 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.0 |\n"
        for i in range(5)
    )
    assert classify_text(lines).category == "healthy"
    stalled = lines + "".join(f"[2022-05-01 0{h}:56:11] PULSE: job is running\n" for h in range(3, 6))
    r = classify_text(stalled)
    assert (r.fatal, r.category) == (True, "hang")
