"""The Slurm client the settings ask for: the commands through a Runner (CLI or SSH), or slurmrestd."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from trainguard.slurm.access import SlurmAccess
from trainguard.slurm.client import SlurmClient
from trainguard.slurm.restd import SlurmRestClient
from trainguard.slurm.restd_token import TokenSource
from trainguard.slurm.runner import Runner

if TYPE_CHECKING:
    from trainguard.settings import ClusterSettings


def make_slurm_access(cluster: ClusterSettings, runner: Runner) -> SlurmAccess:
    """`runner` runs the commands in cli mode; with slurmrestd it only reads job output files."""
    if cluster.access == "slurmrestd":
        rest = cluster.slurmrestd
        verify: bool | ssl.SSLContext = rest.tls_verify
        if rest.ca_file:
            verify = ssl.create_default_context(cafile=str(Path(rest.ca_file).expanduser()))
        return SlurmRestClient(
            rest.url,
            rest.user,
            TokenSource(token=rest.token, token_file=rest.token_file),
            cluster.name,
            verify=verify,
            timeout_s=rest.timeout_s,
            api_version=rest.api_version,
        )
    return SlurmClient(runner, cluster.name)
