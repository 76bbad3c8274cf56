"""Thirteenth corpus round (issue 12 section 1): generalised from the round's tuning misses only.

Round 13 added 31 excerpts, found by the kinds the held-out part still reads as healthy (kind-informed, like
rounds 8 and 11), split by the stored rule and committed before the classifier ran on them. Its tuning
misses, each generalised from the program that prints the text, not from an excerpt:
- a job Slurm refuses at submission, read healthy (pub592-pub595: Snakemake's SLURM executor, Nextflow and a
  pipeline tool relaying sbatch): sbatch's `Batch job submission failed: %m`, salloc's `Job submit/allocate
  failed: %m`, srun's and salloc's `Unable to allocate resources: %m`, the option parser's `Invalid --<opt>
  specification` (Slurm's sbatch.c, salloc.c, allocate.c, slurm_opt.c) and Snakemake's relay of them;
- libfabric's EFA provider aborting on an error it cannot report (pub582, ofiwg/libfabric#6249), read as a
  disk's I/O error: `Unable to write to EQ: ...` / `Libfabric EFA provider has encountered an internal
  error` (efa_eq_write_error, which then calls abort());
- torchelastic's agent signalled from outside (pub589, RRHF#35), read as the program's exception:
  `SignalException: Process N got signal: <sig>` and `Received <sig> death signal` (elastic's api.py);
- tracebacks CPython prints and survives (pub585, modelscope#104: multiprocessing's exit-time finalizers
  meeting an NFS silly-rename file; pub586, DeepLabCut#683: a thread that died when training ended), read
  as the program's failure: threading.excepthook, sys.unraisablehook, atexit and util._run_finalizers.
Every positive case below fails on the round-12 code (the look-alikes and guards pass on both).
"""

from __future__ import annotations

import pytest

from tests.unit.classify_verdict import verdict
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

# ---------------------------------------------------------------- Slurm refusing the job at submission


@pytest.mark.parametrize(
    "text",
    [
        "sbatch: error: Batch job submission failed: Invalid feature specification",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination "
        "specified",
        "salloc: error: Job submit/allocate failed: Requested node configuration is not available",
        "srun: error: Unable to allocate resources: Invalid qos specification",
        "sbatch: error: Invalid --distribution specification",
        "srun: error: Invalid --mem specification",
        # Snakemake's SLURM executor relays whatever sbatch printed (snakemake-executor-plugin-slurm).
        "WorkflowError:\nSLURM job submission failed. The error message was sbatch: error: "
        'Invalid numeric value "{n}" for --ntasks.',
        "SLURM sbatch failed. The error message was sbatch: error: You must specify an account",
    ],
)
def test_a_job_slurm_refuses_at_submission_is_the_site_s(text: str) -> None:
    r = classify_text(text + "\n")
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "system_software"), text
    assert "slurm_submission_refused" in r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        # sbatch's notes while it retries (sbatch.c): the submission may still succeed.
        "sbatch: error: Slurm job queue full, sleeping and retrying\nSubmitted batch job 4242\n",
        "sbatch: Job creation temporarily disabled, retrying\nSubmitted batch job 4243\n",
    ],
)
def test_sbatch_s_retry_notes_are_not_a_refusal(text: str) -> None:
    assert "slurm_submission_refused" not in classify_text(text).pattern_ids


# ---------------------------------------------------------------- the EFA provider's own abort


@pytest.mark.parametrize(
    "text",
    [
        # rxr.h (libfabric 1.9-1.11) prints the errno text it could not report, whatever it is.
        "Unable to write to EQ: Missing or unavailable event queue. err: Input/output error (5) "
        "prov_errno: Unknown error -12 (-12) prov/efa/src/rxr/rxr.h:1343\n",
        # Later releases (prov/efa efa_eq_write_error).
        "Libfabric EFA provider has encountered an internal error:\n\n"
        "Libfabric error: (5) Input/output error\n"
        "EFA internal error: (4) Unknown error\n\nYour application will now abort().\n",
    ],
)
def test_the_efa_provider_aborting_on_an_error_it_cannot_report_is_fabric_software(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "system_software")
    assert "efa_provider_internal_error" in r.pattern_ids


def test_a_disk_s_io_error_stays_the_storage_s() -> None:
    assert verdict("OSError: [Errno 5] Input/output error: '/scratch/ckpt/step_100.pt'\n")[1] == "storage_io"


# ---------------------------------------------------------------- torchelastic's agent signalled from outside


@pytest.mark.parametrize(
    "text",
    [
        "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 77 closing signal SIGHUP\n"
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 76 got signal: 1\n",
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/bin/torchrun", line 8, in <module>\n'
        "    sys.exit(main())\n"
        "torch.distributed.elastic.multiprocessing.api.SignalException: "
        "Process 9 got signal: Signals.SIGINT\n",
    ],
)
def test_the_elastic_agent_signalled_from_outside_is_a_signal_kill(text: str) -> None:
    assert verdict(text) == (True, "signal_kill", "unknown")


def test_a_sigterm_to_the_agent_is_left_to_the_scheduler_s_entries() -> None:
    text = (
        "W0409 07:28:49.530000 1359 torch/distributed/elastic/agent/server/api.py:719] "
        "Received 15 death signal, shutting down workers\n"
    )
    assert "elastic_agent_death_signal" not in classify_text(text).pattern_ids


def test_a_time_limit_still_decides_over_the_agent_s_signal() -> None:
    text = (
        "slurmstepd: error: *** JOB 42 ON gpu-1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***\n"
        "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers\n"
    )
    assert verdict(text)[1] == "preemption_or_timelimit"


# ---------------------------------------------------------------- tracebacks Python survives


@pytest.mark.parametrize(
    "text",
    [
        # threading.excepthook: the thread is gone, the process is not.
        "iteration: 200000 loss: 0.0010 lr: 1e-05\n"
        "Exception in thread Thread-1 (load_and_enqueue):\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/threading.py", line 1016, in _bootstrap_inner\n'
        "    self.run()\n"
        "RuntimeError: Enqueue operation was cancelled\n",
        # sys.unraisablehook.
        "Exception ignored in: <function Pool.__del__ at 0x7f3a2c1d0e50>\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/multiprocessing/pool.py", line 271, in __del__\n'
        "    self._change_notifier.put(None)\n"
        "ValueError: Queue is closed\n",
        # multiprocessing's exit-time finalizers (util._run_finalizers prints and goes on).
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.9/multiprocessing/util.py", line 300, in _run_finalizers\n'
        "    finalizer()\n"
        '  File "/usr/lib/python3.9/shutil.py", line 718, in rmtree\n'
        "    _rmtree_safe_fd(fd, path, onerror)\n"
        "OSError: [Errno 39] Directory not empty: '/tmp/pymp-a1b2c3'\n",
        # A chained report of a thread that died is still that thread's.
        "Exception in thread Thread-2:\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/loader.py", line 10, in run\n'
        "    item = self.queue.get()\n"
        "KeyError: 'shard'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/loader.py", line 12, in run\n'
        "    self.report()\n"
        "AttributeError: 'Loader' object has no attribute 'report'\n",
    ],
)
def test_a_traceback_python_prints_and_survives_is_not_the_failure(text: str) -> None:
    assert verdict(text) == (False, "healthy", "none")


def test_the_main_thread_s_traceback_after_a_survived_one_is_the_failure() -> None:
    text = (
        "Exception in thread Thread-1:\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/loader.py", line 10, in run\n'
        "ValueError: bad record\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    main()\n"
        "RuntimeError: no batches left\n"
    )
    assert verdict(text) == (True, "python_exception", "application")


def test_evidence_of_another_kind_inside_a_survived_traceback_still_counts() -> None:
    text = (
        "Exception in thread Thread-3:\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/prefetch.py", line 20, in run\n'
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert verdict(text)[:2] == (True, "cuda_oom")


def test_the_new_entries_are_ordered_before_the_entries_they_refine() -> None:
    ids = [s.id for s in load_catalog().signatures]
    assert ids.index("efa_provider_internal_error") < ids.index("efa_ofi_error")
    assert ids.index("efa_provider_internal_error") < ids.index("storage_stale_or_io")
    assert ids.index("elastic_agent_death_signal") < ids.index("python_exception_line")
    assert ids.index("slurm_submission_refused") < ids.index("python_exception_line")
