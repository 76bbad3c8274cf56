"""A node dies while no TrainGuard worker is running (a restart, an upgrade, a crash loop), on a full
cluster: Slurm requeues the job itself (NODE_FAIL) and it waits for resources. The worker that comes back
must see that the attempt it was watching ended on a node Slurm reports down: contain the pending job,
exclude that node (Slurm's own verdict on a node of the job's allocation), release it, and audit it all.
Before, the restarted watch saw only a pending job with no nodes and recorded nothing."""

from __future__ import annotations

from tests.e2e.crash_stack import crash_stack, is_held
from trainguard.models import EventType


async def test_a_node_that_died_while_the_worker_was_away_is_excluded_when_it_is_back() -> None:
    async with crash_stack("away") as stack:
        job = stack.submit("action", fault=None, iters=3000)
        fillers: list[str] = []
        victim = ""
        try:
            await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED, timeout=120)
            await stack.wait_for(
                # discovery may see the job pending, before its output file exists
                lambda: (
                    job.output.exists()
                    and "successfully saved checkpoint" in job.output.read_text(errors="replace")
                ),
                "a checkpoint",
                60,
                job.job_id,
            )
            victim = stack.show(job.job_id)["NodeList"]
            # Other users' jobs (not opted in) fill every other node: the requeued job waits in the queue.
            for _ in range(3):
                argv = [
                    "--nodes=1",
                    "--exclusive",
                    "--job-name=other-user",
                    "--output=/dev/null",
                    "--wrap=sleep 900",
                ]
                fillers.append(stack.cluster.sbatch(argv))
            await stack.wait_for(
                lambda: all(stack.show(f)["JobState"] == "RUNNING" for f in fillers), "the other jobs", 60
            )
            await stack.worker.stop()
            assert stack.cluster.kill_node(victim)
            await stack.wait_for(lambda: stack.show(job.job_id)["Restarts"] == "1", "Slurm's requeue", 90)
            requeued = stack.show(job.job_id)
            assert requeued["JobState"] == "PENDING" and not is_held(requeued), requeued
            await stack.worker.restart_with({})
            await stack.wait_for(
                lambda: (
                    stack.show(job.job_id)["ExcNodeList"] == victim and not is_held(stack.show(job.job_id))
                ),
                f"{victim} excluded and the job released",
                90,
                job.job_id,
            )
            record = stack.show(job.job_id)
            assert record["Restarts"] == "1" and record["JobState"] == "PENDING", record
            for filler in fillers:  # Slurm's record of other users' jobs: untouched
                assert stack.show(filler)["ExcNodeList"] == "(null)" and stack.show(filler)["Restarts"] == "0"
            events = stack.events(job.job_id)
            detection = next(e for e in events if e.event_type == EventType.DETECTION)
            assert detection.category == "slurm_node_failure" and detection.nodes == (victim,), detection
            steps = [(e.action, e.data.get("performed")) for e in events if e.event_type == EventType.ACTION]
            assert steps[:3] == [("requeue_hold", True), ("exclude", True), ("release", True)], steps
        finally:
            if fillers:
                stack.cluster.run(["scancel", *fillers])
            if victim:
                stack.cluster.restart_node(victim)
