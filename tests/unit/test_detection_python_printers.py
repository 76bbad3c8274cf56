"""Python exceptions in other printers' forms, derived from their sources (issue 12 section 1, "generalise,
don't memorise").

A Python exception that ends a training run is often printed by something other than CPython's own
`Traceback (most recent call last):` ... `<Type>: <msg>`. Each printer's source was read for how it prints an
uncaught exception (docs/detection.md, "Python exceptions in other printers' forms, from their sources"):
rich (Textualize/rich 42899d8a rich/traceback.py), loguru (Delgan/loguru 2a17be7
loguru/_better_exceptions.py, _logger.py), better_exceptions (Qix-/better-exceptions 8fa00a7
better_exceptions/formatter.py), Hydra
(facebookresearch/hydra 2c03d1b925 hydra/core/utils.py, hydra/_internal/utils.py), absl (abseil/abseil-py
3e45907 absl/logging/__init__.py), Python logging's `logger.exception`, Ray (RayTaskError's
`ray::<Actor>.<method>()`), IPython (ipython/ipython 7f0ee5568 IPython/core/ultratb.py, tbtools.py), click
(pallets/click 2c8cd3ac src/click/exceptions.py, core.py) and typer (fastapi/typer 9a7b2e83
typer/rich_utils.py). The positive cases are the printers' forms filled in; those in NEW failed on the code
before this change. The look-alikes are tracebacks a program logs and survives.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import CATALOG_PATH, assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

ANALYZER_PATH = CATALOG_PATH.with_name("analyzer.py")
ADDED = ("hydra_job_failed", "click_usage_error")
APP = ("python_exception", "application")

PY_SOURCE_FILE = re.compile(r"[a-z_]+/[A-Za-z0-9_/.-]*\.py\b")

_TB = ["Traceback (most recent call last):", '  File "train.py", line 97, in main', "    run()", "{exc}"]


def _prefixed(prefix: str, exc: str) -> str:
    return "".join(prefix + line.format(exc=exc) + "\n" for line in _TB)


GLOG = "E1201 12:00:01.000000   140 logging.py:99] "

# Forms that read healthy before this change: (text, entry expected among the pattern ids).
NEW = [
    # loguru (loguru/_better_exceptions.py, _format_locations): the catching frame is marked `> File`, values
    # are annotated with `└`/`│` under the source line; an exception name without an Error suffix
    (
        "2024-01-01 12:00:00.000 | ERROR    | __main__:main:10 - An error has been caught in function "
        "'main', process 'MainProcess' (4242), thread 'MainThread' (1398):\n"
        "Traceback (most recent call last):\n\n"
        '  File "train.py", line 12, in <module>\n    main()\n    └ <function main at 0x7f225fe2bc80>\n\n'
        "> File \"train.py\", line 10, in main\n    step(batch)\n    │    └ {'x': 1}\n"
        "    └ <function step at 0x7f225fe2b9d8>\n\n"
        "torch._dynamo.exc.Unsupported: call_function UserDefinedObjectVariable\n",
        "python_traceback_exception",
    ),
    # IPython 8 (IPython/core/ultratb.py header `<etype>  Traceback (most recent call last)`, tbtools.py
    # `Cell In[N], line L` and `File <path>:<line>, in f(...)`, PyColorize's `---->` arrow)
    (
        "---------------------------------------------------------------------------\n"
        "Unsupported                               Traceback (most recent call last)\n"
        "Cell In[3], line 5\n      3 model = build()\n      4 for batch in loader:\n"
        "----> 5     loss = model(batch)\n\n"
        "File ~/proj/model.py:10, in Model.forward(self, x)\n      9 def forward(self, x):\n"
        "---> 10     return self.compiled(x)\n\n"
        "[... skipping hidden 1 frame]\n\n"
        "Unsupported: call_function\n",
        "python_traceback_exception",
    ),
    # IPython 7 (`<ipython-input-N-hash> in <module>`, `/path/x.py in f(x)`)
    (
        "---------------------------------------------------------------------------\n"
        "Empty                                     Traceback (most recent call last)\n"
        "<ipython-input-3-9e1622b385b6> in <module>\n----> 5     batch = q.get(timeout=60)\n\n"
        "/home/u/proj/data.py in get(self, timeout)\n---> 10         raise Empty\n\n"
        "Empty: \n",
        "python_traceback_exception",
    ),
    # absl/glog: a traceback logged line by line, every line with the record prefix (absl/logging/__init__.py,
    # get_absl_log_prefix `%c%02d%02d %02d:%02d:%02d.%06d %5d %s:%d] `)
    (_prefixed(GLOG, "queue.Empty"), "python_traceback_exception"),
    (_prefixed(GLOG, "jax._src.checkify.JaxRuntimeCheck: nan"), "python_traceback_exception"),
    # Python logging's record prefix repeated on every line by a relaying launcher
    (
        _prefixed("[2024-01-01 12:00:00,000][__main__][ERROR] - ", "StopIteration"),
        "python_traceback_exception",
    ),
    (_prefixed("2024-01-01 12:00:00,000 ERROR ", "queue.Empty"), "python_traceback_exception"),
    # Hydra (hydra/core/utils.py JobReturn.return_value; hydra/_internal/utils.py run_and_report): a
    # CompactHydraException printed as str(ex), then the footer of Hydra 1.0-1.3
    (
        "Error executing job with overrides: []\nCould not override 'trainer.foo'.\n"
        "To append to your config use +trainer.foo=1\nKey 'foo' is not in struct\n"
        "    full_key: trainer.foo\n    object_type=dict\n"
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n",
        "hydra_job_failed",
    ),
    ("Error executing job with overrides: ['model=big', 'trainer.devices=8']\n", "hydra_job_failed"),
    ("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n", "hydra_job_failed"),
    # click's UsageError (src/click/exceptions.py) and Abort (src/click/core.py); typer's rich forms
    (
        "Usage: train.py [OPTIONS]\nTry 'train.py --help' for help.\n\n"
        "Error: Invalid value for '--lr': 'abc' is not a valid float.\n",
        "click_usage_error",
    ),
    (
        "Usage: train.py [OPTIONS]\nTry 'train.py --help' for help.\n"
        "╭─ Error ──────────────────────────────────────────────────────╮\n"
        "│ No such option: --epochz Did you mean --epochs?               │\n"
        "╰──────────────────────────────────────────────────────────────╯\n",
        "click_usage_error",
    ),
    ("Aborted!\n", "click_usage_error"),
    ("Aborted.\n", "click_usage_error"),
]

# Forms the code already read, kept so (rich's box, better_exceptions' annotations, logger.exception, Ray,
# Hydra with its exception shown).
ALREADY = [
    (
        "╭──────────────── Traceback (most recent call last) ────────────────╮\n"
        "│ /home/u/train.py:42 in main                                       │\n"
        "│ ❱ 42 │   │   loss = model(batch)                                  │\n"
        "╰───────────────────────────────────────────────────────────────────╯\n"
        "KeyboardInterrupt\n",
        "python_exception",
    ),
    (
        'Traceback (most recent call last):\n  File "train.py", line 3, in foo\n    return a / b\n'
        "           │   └ 0\n           └ 1\nZeroDivisionError: division by zero\n",
        "python_exception_line",
    ),
    (
        "2024-01-01 12:00:00,000 - train - ERROR - Training crashed\nTraceback (most recent call last):\n"
        '  File "train.py", line 97, in main\n    run()\n'
        "omegaconf.errors.ConfigAttributeError: Key 'lr_schedule' is not in struct\n",
        "python_exception_line",
    ),
    (
        "ray.exceptions.RayTaskError(ValueError): ray::TrainTrainable.train() (pid=4242, ip=10.0.0.7, "
        "actor_id=ab12, repr=TorchTrainer)\n",
        "python_exception_line",
    ),
    (
        "Error executing job with overrides: ['trainer.max_epochs=10']\nTraceback (most recent call last):\n"
        '  File "/home/u/train.py", line 20, in main\n    model = build(cfg)\nValueError: bad\n\n'
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n",
        "python_exception_line",
    ),
]


CASES = NEW + ALREADY


@pytest.mark.parametrize(("text", "entry"), CASES, ids=[f"{i}:{c[1]}" for i, c in enumerate(CASES)])
def test_printer_s_form_of_an_uncaught_exception_is_read(text: str, entry: str) -> None:
    assert_read_as(text, APP, entry)


def test_a_specific_entry_still_decides_inside_another_printer_s_form() -> None:
    text = _prefixed(GLOG, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert classify_text(text).category == "cuda_oom"
    ipython = (
        "OutOfMemoryError                          Traceback (most recent call last)\nCell In[3], line 5\n"
        "----> 5     loss = model(batch)\n\n"
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert classify_text(ipython).category == "cuda_oom"


def test_every_added_entry_is_exercised_here() -> None:
    assert {c[1] for c in NEW} >= set(ADDED)


@pytest.mark.parametrize(
    "text",
    [
        # a traceback logged line by line at a level below error: logger.warning(..., exc_info=True), absl W/I
        _prefixed("W1201 12:00:01.000000   140 retry.py:42] ", "queue.Empty"),
        _prefixed("I1201 12:00:01.000000   140 retry.py:42] ", "TimeoutError: read timed out"),
        _prefixed("[2024-01-01 12:00:00,000][fsspec][WARNING] - ", "StopIteration"),
        _prefixed("2024-01-01 12:00:00,000 INFO ", "queue.Empty"),
        # CPython's reporters the program survives (the analyzer's existing rules)
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>\n"
        "Traceback (most recent call last):\n"
        '  File "dataloader.py", line 1478, in __del__\n    self._shutdown_workers()\n'
        "AssertionError: can only test a child process\n",
        "Exception in thread Thread-3:\nTraceback (most recent call last):\n"
        '  File "threading.py", line 980, in _bootstrap_inner\n    self.run()\nqueue.Empty\n',
        # a retried operation's logged traceback, then training goes on (ran_on.py). The words of a closing
        # exception line's message no longer say the program went on ("Python tracebacks, second pass"): the
        # steps after it do.
        "Traceback (most recent call last):\n"
        '  File "upload.py", line 10, in push\n    s3.put(obj)\n'
        "botocore.exceptions.ReadTimeoutError: Read timeout on endpoint URL; retrying in 5 s\n"
        + "".join(
            f"{{'loss': {2.0 - i / 10:.4f}, 'learning_rate': 5e-05, 'epoch': {0.1 * (i + 1):.2f}}}\n"
            for i in range(5)
        ),
        # IPython's own arrows and click's prompt errors outside a traceback
        "----> 5     loss = model(batch)\n",
        "Error: invalid input\n",
        "Error: The two entered values do not match.\n",
        # Hydra's variable being set, click's help hint quoted in prose
        "export HYDRA_FULL_ERROR=1\n",
        "Run 'train.py --help' for help.\n",
        # a loguru-style `> File` line with no traceback before it
        '> File "train.py", line 10, in main\n',
        # IPython's header of a traceback cut off before its exception line decides nothing
        "ValueError                                Traceback (most recent call last)\nCell In[3], line 5\n"
        "----> 5     loss = model(batch)\n",
    ],
)
def test_tracebacks_a_program_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id, PY_SOURCE_FILE)


def test_the_grammar_s_additions_name_their_source_files() -> None:
    source = ANALYZER_PATH.read_text()
    for name in ("loguru/_better_exceptions.py", "IPython/core/tbtools.py", "absl/logging/__init__.py"):
        assert name in source, name
