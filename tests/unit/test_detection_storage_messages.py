"""Storage messages, derived from their sources (issue 12 section 1, "generalise, don't memorise").

Instead of fitting excerpt lines, the messages that say a training job's read or write of its data or
checkpoints failed for good were read out of the printers' source and mapped to TrainGuard's categories
(docs/detection.md, "Storage messages, from their sources"): glibc's strerror table and Python's OSError
text, PyTorch's checkpoint archive (caffe2/serialize/inline_container.cc) and torch.distributed.checkpoint
(torch/distributed/checkpoint/api.py), HDF5 (src/H5FDsec2.c, src/H5Eint.c) as h5py raises it, safetensors,
botocore (botocore/exceptions.py) and the Lustre client (lustre/ptlrpc/import.c). Each positive case in
MESSAGES is the source's format string with its conversions filled in; each read healthy or through another
entry on the code before this change. ALREADY_READ pins the errno texts and writer messages the catalog read
before. The look-alikes are messages a job survives.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

# Entries added from the printers' sources, and the entries this change extended (each comment names
# the file).
ADDED = (
    "hdf5_lock_unsupported",
    "hdf5_lock_held",
    "pytorch_stream_reader_failed",
    "dcp_checkpoint_exception",
    "s3_retries_exhausted",
    "s3_endpoint_timeout",
    "lustre_client_evicted",
)
RECORDED = ("hdf5_diag_stack",)  # fatal: false
EXTENDED = ("storage_stale_or_io", "checkpoint_write_failed")

INFRA = ("storage_io", "infrastructure")
APP = ("storage_io", "application")

TB = 'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    main()\n'

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # HDF5 src/H5FDsec2.c (H5FD__sec2_lock) through HSYS_GOTO_ERROR, as h5py raises it
    (
        TB + "OSError: Unable to open file (unable to lock file, errno = 38, error message = 'Function not "
        "implemented')",
        INFRA,
        "hdf5_lock_unsupported",
    ),
    (
        TB + "OSError: [Errno 37] Unable to synchronously open file (unable to lock file, errno = 37, error "
        "message = 'No locks available')",
        INFRA,
        "hdf5_lock_unsupported",
    ),
    (
        TB + "OSError: Unable to open file (unable to lock file, errno = 11, error message = 'Resource "
        "temporarily unavailable')",
        APP,
        "hdf5_lock_held",
    ),
    # caffe2/serialize/inline_container.cc, PyTorchStreamReader::valid
    (
        TB + "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
        APP,
        "pytorch_stream_reader_failed",
    ),
    (
        TB + "RuntimeError: PytorchStreamReader failed reading file data/3: invalid header or archive is "
        "corrupted",
        APP,
        "pytorch_stream_reader_failed",
    ),
    (
        TB + "RuntimeError: PytorchStreamReader failed locating file constants.pkl: file not found",
        APP,
        "pytorch_stream_reader_failed",
    ),
    (
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
        APP,
        "pytorch_stream_reader_failed",
    ),
    # caffe2/serialize/inline_container.cc, PyTorchStreamWriter::valid (err_seen_ form)
    (
        "RuntimeError: PytorchStreamWriter failed writing central directory for archive checkpoint.",
        INFRA,
        "checkpoint_write_failed",
    ),
    # torch/distributed/checkpoint/api.py, CheckpointException.__str__
    (
        TB + "torch.distributed.checkpoint.api.CheckpointException: CheckpointException "
        "ranks:dict_keys([0, 1])",
        INFRA,
        "dcp_checkpoint_exception",
    ),
    # botocore/exceptions.py ClientError.MSG_TEMPLATE with retry_info
    (
        TB + "botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject "
        "operation (reached max retries: 4): Please reduce your request rate.",
        INFRA,
        "s3_retries_exhausted",
    ),
    (
        TB + "botocore.exceptions.ClientError: An error occurred (RequestTimeout) when calling the "
        "UploadPart operation (reached max retries: 4): Your socket connection to the server was "
        "not read from or written to within the timeout period.",
        INFRA,
        "s3_retries_exhausted",
    ),
    (
        TB + "botocore.exceptions.ClientError: An error occurred (InternalError) when calling the GetObject "
        "operation (reached max retries: 9): We encountered an internal error. Please try again.",
        INFRA,
        "s3_retries_exhausted",
    ),
    # botocore/exceptions.py ReadTimeoutError, ConnectTimeoutError
    (
        TB
        + 'botocore.exceptions.ReadTimeoutError: Read timeout on endpoint URL: "https://bucket.s3.amazonaws'
        '.com/shards/shard-00042.tar"',
        INFRA,
        "s3_endpoint_timeout",
    ),
    (
        TB + 'botocore.exceptions.ConnectTimeoutError: Connect timeout on endpoint URL: "https://s3.us-east-1'
        '.amazonaws.com/bucket"',
        INFRA,
        "s3_endpoint_timeout",
    ),
    # lustre/ptlrpc/import.c, LCONSOLE_ERROR_MSG(0x167, ...)
    (
        "Lustre: scratch-MDT0000-mdc-ffff8a4c2d3e1000: This client was evicted by scratch-MDT0000; in "
        "progress operations using this service will fail.",
        INFRA,
        "lustre_client_evicted",
    ),
    (
        "LustreError: 167-0: scratch-OST0012-osc-ffff8a4c2d3e1000: This client was evicted by "
        "scratch-OST0012; in progress operations using this service will fail.",
        INFRA,
        "lustre_client_evicted",
    ),
    # glibc before 2.13 (and GPFS' mmfs): ESTALE's older text
    ("cp: cannot stat '/gpfs/data/train/shard-7.bin': Stale NFS file handle", INFRA, "storage_stale_or_io"),
]

# Read before this change (kept as they were): glibc strerror texts, Python's OSError, the Rust io::Error
# safetensors prints, HDF5's own errno report, PyTorch's writer, Lustre's own error prefix.
ALREADY_READ = [
    ("OSError: [Errno 28] No space left on device: '/ckpt/step_1000.pt'", "storage_no_space"),
    ("OSError: [Errno 122] Disk quota exceeded", "storage_no_space"),
    ("OSError: [Errno 5] Input/output error", "storage_stale_or_io"),
    ("OSError: [Errno 116] Stale file handle", "storage_stale_or_io"),
    ("OSError: [Errno 30] Read-only file system: '/ckpt'", "storage_stale_or_io"),
    ("OSError: [Errno 107] Transport endpoint is not connected: '/mnt/s3fs/data'", "storage_stale_or_io"),
    ("OSError: [Errno 121] Remote I/O error", "storage_stale_or_io"),
    (
        "safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: "
        'StorageFull, message: "No space left on device" })',
        "storage_no_space",
    ),
    (
        "OSError: Can't write data (file write failed: time = Tue Dec  1 20:00:00 2026, filename = "
        "'/scratch/feat.h5', file descriptor = 5, errno = 5, error message = 'Input/output error', buf = "
        "0x5583, total write size = 4096, bytes this sub-write = 4096, bytes actually written = "
        "18446744073709551615, offset = 0)",
        "storage_stale_or_io",
    ),
    (
        "RuntimeError: PytorchStreamWriter failed writing file data/12: file write failed",
        "checkpoint_write_failed",
    ),
    (
        "RuntimeError: [enforce fail at inline_container.cc:626] . unexpected pos 448 vs 342",
        "checkpoint_write_failed",
    ),
    (
        "LustreError: 11-0: scratch-OST0003-osc-ffff8a4c: operation ost_write to node 10.1.0.3@o2ib failed: "
        "rc = -5",
        "parallel_fs_kernel_frames",
    ),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_storage_failure_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "entry"), ALREADY_READ, ids=[m[0][:60] for m in ALREADY_READ])
def test_errno_and_writer_texts_read_before_still_read(text: str, entry: str) -> None:
    assert_read_as(TB + text + "\n", INFRA, entry)


def test_dcp_wrapper_gives_way_to_the_rank_s_own_error() -> None:
    text = (
        TB + "torch.distributed.checkpoint.api.CheckpointException: CheckpointException "
        "ranks:dict_keys([1])\n"
        "Traceback (most recent call last): (RANK 1)\n"
        "RuntimeError: [enforce fail at inline_container.cc:626] . unexpected pos 448 vs 342\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *INFRA)
    assert "checkpoint_write_failed" in r.pattern_ids, r.pattern_ids


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED + EXTENDED)


@pytest.mark.parametrize(
    "text",
    [
        # the NFS client's recovery notice (net/sunrpc/clnt.c, `%s: server %s OK`)
        "Dec  1 20:00:00 gpu-07 kernel: nfs: server fs01 OK\n",
        # Lustre's recoverable notices (lustre/ptlrpc/import.c): the client waits and reconnects
        "Lustre: scratch-OST0012-osc-ffff8a4c2d3e1000: Connection to scratch-OST0012 (at 10.1.0.12@o2ib) was "
        "lost; in progress operations using this service will wait for recovery to complete\n"
        "Lustre: scratch-OST0012-osc-ffff8a4c2d3e1000: Connection restored to 10.1.0.12@o2ib (at "
        "10.1.0.12@o2ib)\n",
        # HDF5's error stack printed for an error its caller handles (src/H5Eint.c), no exception follows
        "HDF5-DIAG: Error detected in HDF5 (1.12.2) thread 0:\n"
        "  #000: H5A.c line 528 in H5Aopen_by_name(): can't open attribute\n"
        "    major: Attribute\n    minor: Can't open object\n",
        # botocore's retry handler between attempts, and a program logging a spent request and going on
        "DEBUG:botocore.retryhandler:retry needed, retrying request after delay of: 0.42\n",
        "ERROR:uploader:An error occurred (SlowDown) when calling the PutObject operation (reached max "
        "retries: 4): Please reduce your request rate.\nINFO:uploader:queued shard-00042 for the next pass\n",
        'WARNING:fsspec:Read timeout on endpoint URL: "https://bucket.s3.amazonaws.com/x"; retrying\n',
        # HDF5's lock held by another process, logged by a reader that retries without locking
        "WARNING:reader:/data/feat.h5 busy (unable to lock file, errno = 11, error message = 'Resource "
        "temporarily unavailable'), opening it without locking\n",
        # a resume that finds a broken checkpoint and starts from scratch (no traceback)
        "WARNING: could not resume (PytorchStreamReader failed reading zip archive: failed finding central "
        "directory), starting from scratch\n",
        # configuration and documentation
        "export HDF5_USE_FILE_LOCKING=FALSE\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


def test_too_many_open_files_is_the_program_s_not_storage() -> None:
    # EMFILE (glibc `Too many open files`) is the process's descriptor limit or leak, not the filesystem
    r = classify_text(TB + "OSError: [Errno 24] Too many open files: '/data/shard-7.bin'\n")
    assert r.category != "storage_io", r.pattern_ids
    assert r.attribution == "application", r.pattern_ids


def test_hdf5_diag_is_recorded_not_fatal() -> None:
    sig = load_catalog().get("hdf5_diag_stack")
    assert sig is not None and not sig.fatal


@pytest.mark.parametrize("sig_id", ADDED + RECORDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)
