"""Network file system and data-client messages, derived from their sources (issue 12 section 1).

A second storage pass (docs/detection.md, "Network file system and data-client messages, from their
sources"): what the other clients a training job reads its data and checkpoints through print when a read
fails for good, read out of their source and mapped to TrainGuard's categories. Sources: the Linux NFS /
SUNRPC client (torvalds/linux 0010b838db9f net/sunrpc/clnt.c, rpc_check_timeout / call_decode), the CephFS
kernel client (torvalds/linux fs/ceph/mds_client.c, handle_session, through the code index), huggingface_hub
(huggingface/huggingface_hub f7c9b7dfd5e5 src/huggingface_hub/file_download.py, f92040945e7b
src/huggingface_hub/utils/_http.py), transformers (huggingface/transformers d8cb2e01f4
src/transformers/utils/hub.py) and datasets
(huggingface/datasets src/datasets/utils/file_utils.py, src/datasets/load.py) through the code index,
CPython's Lib/urllib/error.py, and fsspec's gcsfs (fsspec/gcsfs 1ddedc1ac47b gcsfs/retry.py). Each positive
case in MESSAGES is the source's format string with its conversions filled in; each read healthy or as the
program's exception (python_exception / application) before this change. ALREADY_READ pins what the catalog
read before; the look-alikes are messages a job survives, and the user's own settings and references stay
the program's (application).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

ADDED = (
    "cephfs_reconnect_denied",
    "hf_hub_unreachable",
    "hf_hub_http_unavailable",
    "urlopen_network_unreachable",
    "gcsfs_retries_exhausted",
)

INFRA = ("storage_io", "infrastructure")
APP = ("python_exception", "application")

TB = 'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    main()\n'

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # linux fs/ceph/mds_client.c, handle_session: CEPH_SESSION_CLOSE while reconnecting
    ("[ 8123.456789] ceph: mds0 reconnect denied", INFRA, "cephfs_reconnect_denied"),
    (
        "[ 8123.456789] ceph: [7f3c2a10-1b2c-4d5e-8f90-123456789abc 4123]: mds1 reconnect denied",
        INFRA,
        "cephfs_reconnect_denied",
    ),
    # huggingface_hub src/huggingface_hub/file_download.py, _raise_on_head_call_error (connection or downtime)
    (
        TB + "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the "
        "file on the Hub and we cannot find the requested files in the local cache. Please check your "
        "connection and try again or make sure your Internet connection is on.",
        INFRA,
        "hf_hub_unreachable",
    ),
    # huggingface_hub src/huggingface_hub/_snapshot_download.py (snapshot_download's form)
    (
        TB + "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the "
        "files on the Hub and we cannot find the appropriate snapshot folder for the specified revision on "
        "the local disk. Please check your internet connection and try again.",
        INFRA,
        "hf_hub_unreachable",
    ),
    # transformers src/transformers/utils/hub.py (cached_file; the second form is later releases')
    (
        TB + "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
        "them in the cached files.",
        INFRA,
        "hf_hub_unreachable",
    ),
    (
        TB + "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it "
        "in the cached files and it looks like bert-base-uncased is not the path to a directory containing a "
        "file named config.json.",
        INFRA,
        "hf_hub_unreachable",
    ),
    # datasets src/datasets/utils/file_utils.py (get_from_cache) and src/datasets/load.py
    (
        TB + "ConnectionError: Couldn't reach https://huggingface.co/datasets/allenai/c4/resolve/main/en/"
        'c4-train.00000-of-01024.json.gz (ReadTimeout(ReadTimeoutError("HTTPSConnectionPool('
        "host='huggingface.co', port=443): Read timed out. (read timeout=10)\")))",
        INFRA,
        "hf_hub_unreachable",
    ),
    (
        TB + "ConnectionError: Couldn't reach https://huggingface.co/datasets/allenai/c4/resolve/main/"
        "README.md (error 503)",
        INFRA,
        "hf_hub_unreachable",
    ),
    (
        TB + "ConnectionError: Couldn't reach 'allenai/c4' on the Hub (ConnectionError)",
        INFRA,
        "hf_hub_unreachable",
    ),
    (
        TB + "ConnectionError: Couldn't reach the Hugging Face Hub for dataset 'allenai/c4': "
        "LocalEntryNotFoundError",
        INFRA,
        "hf_hub_unreachable",
    ),
    # huggingface_hub src/huggingface_hub/utils/_http.py, hf_raise_for_status with requests' text
    (
        TB + "huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: "
        "https://huggingface.co/api/datasets/allenai/c4/paths-info/main (Request ID: Root=1-6565f0a2)",
        INFRA,
        "hf_hub_http_unavailable",
    ),
    (
        TB + "huggingface_hub.utils._errors.HfHubHTTPError: 504 Server Error: Gateway Time-out for url: "
        "https://huggingface.co/api/models/meta-llama/Llama-2-7b-hf",
        INFRA,
        "hf_hub_http_unavailable",
    ),
    # CPython Lib/urllib/error.py, URLError.__str__, as torch.hub's download raises it
    (
        TB + "urllib.error.URLError: <urlopen error [Errno 110] Connection timed out>",
        INFRA,
        "urlopen_network_unreachable",
    ),
    (
        TB + "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>",
        INFRA,
        "urlopen_network_unreachable",
    ),
    (TB + "urllib.error.URLError: <urlopen error timed out>", INFRA, "urlopen_network_unreachable"),
    # fsspec/gcsfs gcsfs/retry.py, HttpError (`<message>, <code>`) re-raised once its retries are spent
    (
        TB + "gcsfs.retry.HttpError: The rate of change requests to the object my-bucket/ckpt/latest exceeds "
        "the rate limit. Please reduce the rate of create, update, and delete requests., 429",
        INFRA,
        "gcsfs_retries_exhausted",
    ),
    (
        TB + "gcsfs.retry.HttpError: We encountered an internal error. Please try again., 503",
        INFRA,
        "gcsfs_retries_exhausted",
    ),
]

# Read before this change (kept as they were): the NFS client's soft-mount timeout (the RPC fails with EIO,
# net/sunrpc/clnt.c) and the errno texts a FUSE or network mount returns to the program.
ALREADY_READ = [
    ("[ 9182.331] nfs: server fs01 not responding, timed out", "storage_stale_or_io"),
    (TB + "OSError: [Errno 107] Transport endpoint is not connected: '/mnt/gcs'", "storage_stale_or_io"),
    (TB + "OSError: [Errno 5] Input/output error: '/mnt/s3/ckpt/step_1000.pt'", "storage_stale_or_io"),
]

# The user's own settings and references: the program's exception, as before (the container pass's
# convention: the user's reference is the application's).
USERS_OWN = [
    "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache and "
    "outgoing traffic has been disabled. To enable hf.co look-ups and downloads online, set "
    "'local_files_only' to False.",
    "ConnectionError: Couldn't reach 'allenai/c4' on the Hub (OfflineModeIsEnabled)",
    "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-6565f0a2)\n\n"
    "Repository Not Found for url: https://huggingface.co/api/models/org/typo-model.",
    "huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-6565f0a2)\n\n"
    "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-2-7b-hf/resolve/main/config.json.",
    "urllib.error.URLError: <urlopen error [Errno -2] Name or service not known>",
    "urllib.error.HTTPError: HTTP Error 404: Not Found",
    "gcsfs.retry.HttpError: Invalid bucket name: my_bucket!, 400",
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_netfs_and_data_client_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "entry"), ALREADY_READ, ids=[m[0][-60:] for m in ALREADY_READ])
def test_messages_read_before_still_read(text: str, entry: str) -> None:
    assert_read_as(text + "\n", INFRA, entry)


@pytest.mark.parametrize("text", USERS_OWN, ids=[t[:60] for t in USERS_OWN])
def test_the_user_s_own_setting_or_reference_stays_the_program_s(text: str) -> None:
    r = classify_text(TB + text + "\n")
    assert (r.fatal, r.category, r.attribution) == (True, *APP), r.pattern_ids
    assert not set(r.pattern_ids) & set(ADDED), r.pattern_ids


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED)


@pytest.mark.parametrize(
    "text",
    [
        # the NFS client's recovery notice alone (net/sunrpc/clnt.c, call_decode: `%s: server %s OK`)
        "Dec  1 20:00:00 gpu-07 kernel: nfs: server fs01 OK\n",
        # the CIFS/SMB client's reconnect (it retries the session; the I/O it fails prints its own errno)
        "CIFS: VFS: \\\\fs01 has not responded in 180 seconds. Reconnecting...\n",
        # CephFS' recoverable notices (fs/ceph/mds_client.c)
        "ceph: mds0 reconnect success\n",
        "ceph: mds0 caps went stale, renewing\n",
        # urllib3's retry warning and requests' retried download
        "WARNING:urllib3.connectionpool:Retrying (Retry(total=4, connect=None, read=None, redirect=None, "
        "status=None)) after connection broken by 'ReadTimeoutError(\"HTTPSConnectionPool("
        "host='huggingface.co', port=443): Read timed out. (read timeout=10)\")': /api/models/bert\n",
        "WARNING:root:download failed: <urlopen error [Errno 110] Connection timed out>, retrying in 5s\n",
        # huggingface_hub's warnings (a program that goes on), datasets' progress bars
        "UserWarning: Not enough free disk space to download the file. The expected file size is: "
        "1024.00 MB. The target location /data/hf only has 512.00 MB free disk space.\n",
        "Downloading data: 100%|██████████| 1024/1024 [00:10<00:00, 98.2 files/s]\n",
        "Generating train split: 100%|██████████| 356317/356317 [00:04<00:00, 80117.24 examples/s]\n",
        # a downloader that logs the Hub's failure and goes on (no raised exception)
        "Download: FunAudioLLM/x failed!: An error happened while trying to locate the file on the Hub "
        "and we cannot find the requested files in the local cache. Please check your connection.\n",
        "INFO:loader:HfHubHTTPError 429 Client Error: Too Many Requests; backing off 30 s\n",
        # gcsfs between attempts (gcsfs/retry.py logs at debug and retries)
        "DEBUG:gcsfs:_call retrying after exception: Too Many Requests, 429\n",
        # the NFSv4 client's lock-reclaim notice (fs/nfs/nfs4state.c): spurious on many kernels (its later
        # fixes say so); the I/O a lost lock fails prints its own errno
        "[ 937.607990] NFS: __nfs4_reclaim_open_state: Lock reclaim failed!\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)
