"""A size-limited filesystem for a job's checkpoint directory, and another writer that fills it up.

The checkpoint filesystem running full is a fault from outside the job (a neighbour's dump on shared
scratch): the real-PyTorch e2e tests and bench.latency's pt_enospc rows mount a small tmpfs there and
fill it while the job trains. Mounting needs root, as the local Slurm cluster does.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

FILLER = "filler.bin"


def mount_tmpfs(directory: Path, size_bytes: int) -> None:
    """`directory` (made if missing) becomes a tmpfs of `size_bytes`; undo with `unmount`."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(directory)],
        check=True,
        capture_output=True,
    )


def unmount(directory: Path) -> None:
    """Lazily: a process of a job that is still ending may hold a file there."""
    subprocess.run(["umount", "-l", str(directory)], check=False, capture_output=True)


def fill(directory: Path) -> Path:
    """Write one file in `directory` until its filesystem has no space left; returns that file (delete it
    to free the space). Any error but ENOSPC is raised: the filesystem is then not known to be full."""
    filler = directory / FILLER
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = b"\0" * 4096
    try:
        while True:
            os.write(fd, block)
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return filler
