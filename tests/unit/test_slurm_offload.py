"""Large Slurm documents are parsed in a helper process; the result is the same as in process."""

from __future__ import annotations

import asyncio
import json

from bench import snapshot
from trainguard.slurm import offload
from trainguard.slurm.client import _parse_jobs_text


def test_a_large_document_is_parsed_in_a_helper_process_with_the_same_result() -> None:
    real = snapshot._load("24.11", "fmt_mixed_squeue.json")
    text = json.dumps(snapshot.scale_jobs(real, 400, 0.01), indent=2)
    assert len(text) > offload.PROCESS_THRESHOLD_BYTES  # real 24.11 jobs are ~8.9 KB printed

    async def go() -> None:
        in_helper = await offload.parse(_parse_jobs_text, text)
        assert offload._pool is not None  # it went to the helper process
        assert in_helper == _parse_jobs_text(text)

    asyncio.run(go())


def test_small_documents_stay_in_this_process() -> None:
    text = (snapshot.FIXTURES / "24.11" / "fmt_mixed_squeue.json").read_text()
    offload._drop_pool()
    jobs = asyncio.run(offload.parse(_parse_jobs_text, text))
    assert len(jobs) == 8 and offload._pool is None
