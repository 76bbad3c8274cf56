"""Python tracebacks, second pass (docs/detection.md, same section; issue 12, fatal-vs-healthy).

CPython's traceback printing (Lib/traceback.py, TracebackException.format, format_exception_only) and the
printers that wrap it were read against the analyzer. The grammar held for most forms tried (chained and
`During handling` tracebacks, notes, bare and dotted classes, SyntaxError without a header,
torch.multiprocessing.spawn, concurrent.futures' and multiprocessing.pool's remote tracebacks, torchelastic's
error-file traceback, loguru, IPython; behind torchrun, srun -l, mpirun, Ray and glog prefixes, interleaved
across ranks; PINNED below). What failed:
- an exception group's `| ` margin (3.11+, _ExceptionPrintContext) hid the group's own exception line, so a
  group of classes no catalog entry names read healthy;
- the message of the exception line that closes a traceback was read for a program's word that it went on
  (`Caught`, `ignoring`, `retry after 20`, `attempt 1 of 3`): words the exception carries, not a log's. Most
  often PyTorch's ExceptionWrapper.reraise (torch/_utils.py), `ValueError: Caught ValueError in DataLoader
  worker process 3.`, which read healthy when the excerpt ends there or its `Original Traceback` is cut;
- SkyPilot's verdict on a task (sky/backends/task_codegen.py, add_epilogue: `ERROR: Job <id> failed with
  return code list: [1]`), tuning pub977, which the catalog did not know.
Every POSITIVE case fails on main; every look-alike reads non-fatal on main and after.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

PY = ("python_exception", "application")
_HEAD = (
    'Traceback (most recent call last):\n  File "/workspace/train.py", line 212, in <module>\n    main()\n'
)
_RERAISE = (
    '  File "/opt/conda/lib/python3.10/site-packages/torch/_utils.py", line 722, in reraise\n'
    "    raise exception\n"
)

# An exception group of classes no catalog entry names (3.11+, asyncio.TaskGroup's form as CPython prints it).
_EG = (
    "  + Exception Group Traceback (most recent call last):\n"
    '  |   File "/workspace/train.py", line 4, in <module>\n'
    "  | ExceptionGroup: unhandled errors in a TaskGroup (2 sub-exceptions)\n"
    "  +-+---------------- 1 ----------------\n"
    "    | Traceback (most recent call last):\n"
    '    |   File "/workspace/train.py", line 2, in worker\n'
    "    | Preempted: worker 1 lost its lease\n"
    "    +------------------------------------\n"
)

# (log, expected (category, attribution), an entry among the findings)
POSITIVE: dict[str, tuple[str, tuple[str, str], str]] = {
    # torch/_utils.py ExceptionWrapper.reraise, the excerpt ending at the re-raised line.
    "dataloader_reraise_cut": (
        _HEAD + _RERAISE + "ValueError: Caught ValueError in DataLoader worker process 3.\n",
        PY,
        "python_exception_line",
    ),
    "dataparallel_reraise_cut": (
        _HEAD + _RERAISE + "StopIteration: Caught StopIteration in replica 0 on device 0.\n",
        PY,
        "python_traceback_exception",
    ),
    "pin_memory_reraise_cut": (
        _HEAD + _RERAISE + "RuntimeError: Caught RuntimeError in pin memory thread for device 0.\n",
        PY,
        "python_exception_line",
    ),
    # The same line with the header above it cut off (no traceback open): the catalog's line entry.
    "dataloader_reraise_headerless": (
        "KeyError: Caught KeyError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n",
        PY,
        "python_exception_line",
    ),
    # Messages with a word the benign rule reads, closing a traceback: the exception was raised with them.
    "message_says_ignoring": (
        _HEAD + "ValueError: Unknown optimizer 'adamw8bit'; ignoring it is not supported\n",
        PY,
        "python_exception_line",
    ),
    "message_says_attempt": (
        _HEAD + "TimeoutError: rendezvous store not reachable (attempt 1 of 3)\n",
        PY,
        "python_exception_line",
    ),
    "message_says_retry_after": (
        _HEAD
        + "openai.RateLimitError: Error code: 429 - Rate limit reached. Please retry after 20 seconds.\n",
        PY,
        "python_exception_line",
    ),
    "custom_class_message_says_skipping": (
        _HEAD + "Preempted: lost the lease while skipping to step 4000\n",
        PY,
        "python_traceback_exception",
    ),
    # Exception groups (Lib/traceback.py, _ExceptionPrintContext): the `| ` margin hid the group's own line.
    "exception_group": (_EG, PY, "python_traceback_exception"),
    "exception_group_torchrun": (
        "".join("[rank0]: " + line + "\n" for line in _EG.splitlines()),
        PY,
        "python_traceback_exception",
    ),
    "exception_group_torchrun_tee": (
        "".join("[default0]:" + line + "\n" for line in _EG.splitlines()),
        PY,
        "python_traceback_exception",
    ),
    # SkyPilot's generated driver, sky/backends/task_codegen.py add_epilogue (tuning pub977's line).
    "skypilot_job_failed": (
        "$ sky launch task.yaml\nERROR: Job 439 failed with return code list: [1]\n"
        "✓ Job finished (status: FAILED).\n",
        PY,
        "skypilot_job_failed",
    ),
    "skypilot_job_failed_coloured": (
        "ERROR: \x1b[31mJob 7 failed with return code list:\x1b[0m [137, 1] "
        "(A Worker failed with return code 1, SkyPilot cleaned up the processes on other nodes "
        "with return code 137)\n",
        PY,
        "skypilot_job_failed",
    ),
    "skypilot_job_segv": (
        "ERROR: Job 12 failed with return code list: [139] (likely due to Segmentation Fault)\n",
        ("segfault", "system_software"),
        "skypilot_job_failed_segv",
    ),
    "skypilot_job_killed": (
        "ERROR: Job 12 failed with return code list: [137, 137] \n",
        ("signal_kill", "unknown"),
        "skypilot_job_killed",
    ),
}

_HF = "".join(
    f"{{'loss': {2.0 - i * 0.1:.4f}, 'learning_rate': 5e-05, 'epoch': {0.1 * (i + 1):.2f}}}\n"
    for i in range(5)
)
HEALTHY: dict[str, str] = {
    # logger.exception in an except block, then training goes on.
    "logger_exception_then_training": (
        "2026-12-02 12:03:49,315 ERROR train: eval failed, continuing\n"
        + _HEAD
        + "ZeroDivisionError: division by zero\n"
        + _HF
    ),
    "logged_reraise_then_training": (
        "2026-12-02 12:03:49,315 ERROR train: bad batch\n"
        + _HEAD
        + _RERAISE
        + "ValueError: Caught ValueError in DataLoader worker process 3.\n"
        + _HF
    ),
    # CPython's survived reports (sys.unraisablehook, threading.excepthook), with a message word.
    "exception_ignored_in": (
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>\n"
        + "Traceback (most recent call last):\n"
        + '  File "/usr/lib/python3/torch/utils/data/dataloader.py", line 1479, in __del__\n'
        + "    self._shutdown_workers()\n"
        + "AssertionError: can only test a child process, retrying in 5 s\n"
    ),
    "exception_in_thread": (
        "Exception in thread Thread-3 (_pin_memory_loop):\n"
        + _HEAD
        + "RuntimeError: Caught RuntimeError in pin memory thread for device 0.\n"
    ),
    # A traceback logged at WARNING (logger.warning(..., exc_info=True)) before a retry.
    "warning_with_traceback": (
        "2026-12-02 12:03:49,315 WARNING uploader: checkpoint upload failed, will retry\n"
        + "2026-12-02 12:03:49,315 WARNING uploader: Traceback (most recent call last):\n"
        + '2026-12-02 12:03:49,315 WARNING uploader:   File "/workspace/upload.py", line 40, in push\n'
        + "2026-12-02 12:03:49,315 WARNING uploader: ConnectionError: Retry after 30 seconds\n"
    ),
    "python_warning": "/workspace/train.py:3: FutureWarning: torch.cuda.amp.GradScaler is deprecated\n",
    "skypilot_succeeded": "ERROR: Job 438 failed to fetch logs\n✓ Job finished (status: SUCCEEDED).\n",
}

# CPython's and its wrappers' forms the analyzer already read (3.11's own output where CPython prints it).
PINNED: dict[str, str] = {
    "chained_custom": (
        _HEAD
        + "KeyError: 'k'\n\nThe above exception was the direct cause of the following exception:\n\n"
        + _HEAD
        + "DataError: bad batch\n"
    ),
    "note_after_exception": _HEAD + "Preempted: lost lease\nwhile loading checkpoint step 100\n",
    "syntax_error_no_header": (
        "  File \"/workspace/train.py\", line 1\n    x = (1,\n        ^\nSyntaxError: '(' was never closed\n"
    ),
    "spawn": (
        _HEAD
        + "torch.multiprocessing.spawn.ProcessRaisedException:\n\n"
        + "-- Process 1 terminated with the following error:\n"
        + _HEAD
        + "Preempted: lost lease\n"
    ),
    "remote_traceback": (
        'concurrent.futures.process._RemoteTraceback: \n"""\n'
        + _HEAD
        + 'Preempted: bad record 3\n"""\n\n'
        + "The above exception was the direct cause of the following exception:\n\n"
        + _HEAD
        + "Preempted: bad record 3\n"
    ),
    "ray_prefixed": "".join(
        "(RayTrainWorker pid=2345, ip=10.0.0.1) " + line + "\n"
        for line in (_HEAD + "_queue.Empty").splitlines()
    ),
}


@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_fatal_python_exception_forms(name: str) -> None:
    log, expected, entry = POSITIVE[name]
    assert_read_as(log, expected, entry)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_survived_and_logged_tracebacks_stay_non_fatal(name: str) -> None:
    assert_not_fatal(HEALTHY[name])


@pytest.mark.parametrize("name", sorted(PINNED))
def test_cpython_forms_read_already(name: str) -> None:
    r = classify_text(PINNED[name])
    assert (r.fatal, r.category, r.attribution) == (True, *PY), (name, r.pattern_ids)


@pytest.mark.parametrize("entry", ["skypilot_job_failed_segv", "skypilot_job_killed", "skypilot_job_failed"])
def test_skypilot_entries_name_their_source(entry: str) -> None:
    assert_names_source(entry)
