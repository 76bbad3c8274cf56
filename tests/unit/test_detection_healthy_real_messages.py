"""Lines of healthy real logs that an entry read as fatal, found by tests/e2e/test_healthy_real_logs.py.

That test runs real PyTorch (torchrun, gloo) and real Slurm (22.05 and 24.11) at their most verbose and
requires every log to read healthy. One line did not: Slurm 24.11's verbose srun, inside an sbatch job,
lists the options set (src/common/slurm_opt.c slurm_print_set_options, `%-20s: %s`), among them
`oom-kill-step`, which every batch step gets from SLURM_OOM_KILL_STEP; host_oom_killer's `oom[-_]kill`
read that table row as an OOM kill (killed_oom_host). The entry now skips `oom-kill` followed by `-`.

The look-alike cases fail on the code before this change (they read killed_oom_host); the OOM kills the
entry exists for still read as before, and the whole 24.11 options table (verbatim from the real run)
reads healthy.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

OOM = ("killed_oom_host", "application")

# Verbatim from `srun -l -vvv -N 2 -n 4 hostname` inside `sbatch` on Debian 13's Slurm 24.11.5.
SRUN_2411_OPTIONS = """srun: defined options
srun: -------------------- --------------------
srun: (null)              : node[1-2]
srun: jobid               : 1
srun: job-name            : healthy.sbatch
srun: label               : set
srun: nodes               : 2
srun: ntasks              : 4
srun: ntasks-per-node     : 2
srun: oom-kill-step       : 0
srun: verbose             : 3
srun: -------------------- --------------------
srun: end of defined options
"""

LOOK_ALIKES = [
    "srun: oom-kill-step       : 0",
    "srun: oom-kill-step       : 1",  # a user's --oom-kill-step=1: a setting, not a kill
    "sbatch: oom-kill-step       : 1",
    "salloc: oom-kill-step       : 0",
    SRUN_2411_OPTIONS,
]

# The kills the entry is for still read through it (its `oom[-_]kill` alternative, now bounded).
KILLS = [
    "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=123.0. Some of your processes may have been "
    "killed by the cgroup out-of-memory handler.",
    "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been "
    "OOM Killed.",
    "[12345.678] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/slurm/uid_1000/job_42,task_memcg=/slurm/uid_1000/job_42/step_0,task=python,pid=4242,uid=1000",
    "[12345.678] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "[12345.678]  oom_kill_process.cold+0xb/0x10",
    "slurmstepd: error: Detected 1 oom-kill",  # at the end of the line
]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_verbose_slurm_option_table_is_not_an_oom_kill(text: str) -> None:
    assert_not_fatal(text)
    assert "host_oom_killer" not in classify_text(text).pattern_ids


@pytest.mark.parametrize("text", KILLS)
def test_oom_kills_still_read_through_host_oom_killer(text: str) -> None:
    assert_read_as(text, OOM, "host_oom_killer")


def test_the_narrowed_entry_names_its_source() -> None:
    assert_names_source("host_oom_killer")


def test_option_table_does_not_hide_a_real_kill_after_it() -> None:
    log = SRUN_2411_OPTIONS + KILLS[0] + "\n"
    r = classify_text(log)
    assert (r.fatal, r.category) == (True, "killed_oom_host")
    assert all("oom-kill-step" not in e for e in r.evidence)
