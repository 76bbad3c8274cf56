"""Fifth corpus round (issue 12 section 1): Slurm prolog failures and Ray's actor-death wrapper.

Each kind was generalised from a miss on the tuning part of the corpus (pub360, pub368, pub369). The
cases check the kind inside the noise a real job prints around it, who it blames, that Ray's wrapper
stays a cascade a cause next to it overrides, and that look-alikes stay healthy.
"""

from __future__ import annotations

import pytest

from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

RAY_WORKER_GONE = (
    "Traceback (most recent call last):\n"
    '  File "/opt/verl/single_controller/ray/base.py", line 42, in func\n'
    "    output = ray.get(output)\n"
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict\n"
    "\tpid: 4242\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
    "detail: Worker unexpectedly exits with a connection error code 2. End of file.\n"
)


@pytest.mark.parametrize(
    ("kind", "text", "nodes"),
    [
        (
            "node prolog failed at task launch",
            "srun: error: Task launch for 77.0 failed on node gpu-12: Job prolog failed\n"
            "srun: error: Application launch failed: Job prolog failed\n"
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n",
            ["gpu-12"],
        ),
        (
            "controller prolog failed, allocation revoked",
            "srun: Force Terminated job 4242\nsrun: PrologSlurmctld failed, job killed\n"
            "srun: error: Job allocation 4242 has been revoked\n",
            [],
        ),
        ("sbatch output, prolog only", "slurmstepd: error: prolog failed: rc:1 output:\n", []),
    ],
)
def test_a_failed_prolog_is_the_sites_software_on_the_node(kind: str, text: str, nodes: list[str]) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "system_software"), kind
    assert r.nodes == nodes, kind
    assert "slurm_prolog_failed" in r.pattern_ids, kind


def test_a_task_launch_failure_for_another_reason_still_blames_the_node() -> None:
    line = "srun: error: Task launch for 77.0 failed on node gpu-12: Communication connection failure\n"
    r = classify_text(line)
    assert (r.category, r.attribution, r.nodes) == ("slurm_node_failure", "hardware", ["gpu-12"])


@pytest.mark.parametrize(
    "text",
    [
        "PrologFlags=Alloc,Contain\n",
        "Prolog=/etc/slurm/prolog.sh\n",
        "INFO: running the job prolog (prolog.d/50-gpu-check.sh)\n",
    ],
)
def test_prolog_configuration_and_progress_stay_healthy(text: str) -> None:
    assert not classify_text(text).fatal


def test_a_ray_actor_death_is_a_worker_death_not_the_programs_exception() -> None:
    r = classify_text(RAY_WORKER_GONE)
    assert (r.fatal, r.category, r.attribution) == (True, "signal_kill", "unknown")
    assert "ray_actor_died_wrapper" in r.pattern_ids


def test_the_ray_wrapper_alone_is_a_low_confidence_cascade() -> None:
    line = "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
    r = classify_text(line)
    assert (r.fatal, r.category) == (True, "signal_kill")
    assert r.confidence < 0.6


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", "cuda_oom"),
        (
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n",
            "killed_oom_host",
        ),
    ],
)
def test_a_cause_printed_with_the_ray_wrapper_decides(cause: str, expected: str) -> None:
    text = cause + "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    assert classify_text(text).category == expected


def test_an_actor_that_raised_in_its_constructor_is_not_the_wrapper() -> None:
    line = "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task"
    sig = next(s for s in load_catalog().signatures if s.id == "ray_actor_died_wrapper")
    assert sig.match(line) is None
