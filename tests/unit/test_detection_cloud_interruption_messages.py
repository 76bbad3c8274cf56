"""Cloud interruption and maintenance messages, derived from their sources (issue 12 section 1).

What the clouds and their HPC schedulers print when the machine under a training job is reclaimed, retired
or fails was read out of the printers' source and the clouds' documentation and mapped to TrainGuard's
categories (docs/detection.md, "Cloud interruption messages, from their sources"):

- aws/aws-parallelcluster-node at 2e8f9a8e325d447cbfc36bb3ebd118cbd6439d6d: src/slurm_plugin/clustermgtd.py
  (_get_nodes_failing_health_check, _handle_nodes_failing_health_check, _handle_unhealthy_static_nodes),
  src/slurm_plugin/slurm_resources.py (EC2_SCHEDULED_EVENT_CODES, is_backing_instance_valid);
- GoogleCloudPlatform/slurm-gcp at 13fd92b615c030b9ba62e4a87d610bcc7af72b75: scripts/slurmsync.py
  (do_node_update, nodes_down), scripts/resume.py (down_nodes);
- Azure/cyclecloud-slurm at 049346f6b1cee4db11fd6a6166a58e32f5d006f5: azure-slurm/slurmcc/allocation.py
  (sync_nodes, mark_missing_in_cyclecloud, mark_down_as_zombie);
- documentation only (no program of the clouds prints these into a job's log): GCE's host events
  (`compute.instances.hostError`), EC2's Spot interruption notices and scheduled events, Azure's Scheduled
  Events.

Each positive case is the source's format string with its conversions filled in; each read healthy or
through another entry (with another attribution) before this change. ALREADY_READ pins the cloud messages
the catalog read before. The look-alikes are notices and warnings a job survives; the notices are recorded
(`fatal: false`), never a failure on their own.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

ADDED = (
    "slurm_gcp_nodes_preempted",
    "slurm_gcp_instance_gone",
    "slurm_gcp_resume_error",
    "pcluster_static_node_replaced",
    "pcluster_instance_gone",
    "cyclecloud_node_missing",
)
RECORDED = ("pcluster_health_check_drain", "cloud_interruption_notice")  # fatal: false
DOCUMENTED = ("gce_host_error",)  # from the cloud's documentation: no source file prints it

PREEMPTED = ("preemption_or_timelimit", "infrastructure")
NODE_INFRA = ("slurm_node_failure", "infrastructure")
NODE_HW = ("slurm_node_failure", "hardware")

PC = "2024-01-01 00:00:00,000 - [slurm_plugin.{}] - {} - "
SYNC = "2024-01-01 00:00:00,000 INFO: "
UPD = "[2024-01-01T00:00:00.000] update_node: node "
PRE, TERM = PREEMPTED, "slurm_gcp_instance_gone"
NOTICE, DRAIN = "cloud_interruption_notice", "pcluster_health_check_drain"

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # slurm-gcp scripts/slurmsync.py do_node_update: a preemptible instance found TERMINATED
    (
        SYNC + "2 nodes set down due to node status 'preempted' (a3-gpu-[0-1])\n",
        PRE,
        "slurm_gcp_nodes_preempted",
    ),
    # ... with the reason it sets on the nodes: the preemption decides (priority 3 over 2)
    (
        SYNC + "1 nodes set down due to node status 'preempted' (a3-gpu-7)\n"
        "[2024-01-01T00:00:01.000] update_node: node a3-gpu-7 reason set to: Instance stopped/deleted\n",
        PREEMPTED,
        "slurm_gcp_nodes_preempted",
    ),
    # ... a non-preemptible instance TERMINATED (host error, maintenance, stop) or gone
    (SYNC + "1 nodes set down due to node status 'terminated' (a3-gpu-0)\n", NODE_INFRA, TERM),
    (SYNC + "3 nodes set down due to node status 'unbacked' (a3-gpu-[2-4])\n", NODE_INFRA, TERM),
    (
        "[2024-01-01T00:00:00.000] update_node: node a3-gpu-0 reason set to: Instance stopped/deleted\n",
        NODE_INFRA,
        "slurm_gcp_instance_gone",
    ),
    # slurm-gcp scripts/resume.py down_nodes: `GCP Error: <code>: <message>` (read as hardware before)
    (
        UPD + "a3-gpu-0 reason set to: GCP Error: ZONE_RESOURCE_POOL_EXHAUSTED: The zone "
        "'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request.\n",
        NODE_INFRA,
        "slurm_gcp_resume_error",
    ),
    (
        "   Reason=GCP Error: QUOTA_EXCEEDED: Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 8.0 in region "
        "us-central1. [slurm@2024-01-01T00:00:00]\n",
        NODE_INFRA,
        "slurm_gcp_resume_error",
    ),
    # aws-parallelcluster-node src/slurm_plugin/clustermgtd.py _handle_unhealthy_static_nodes (read healthy
    # before)
    (
        UPD + "q1-st-p5-1 reason set to: Static node maintenance: unhealthy node is being replaced\n",
        NODE_HW,
        "pcluster_static_node_replaced",
    ),
    # src/slurm_plugin/slurm_resources.py is_backing_instance_valid: the instance behind the node is gone
    (
        PC.format("slurm_resources:is_backing_instance_valid", "WARNING")
        + "EC2 instance availability for node q1-dy-p5-1 has timed out.\n",
        NODE_INFRA,
        "pcluster_instance_gone",
    ),
    # Azure/cyclecloud-slurm azure-slurm/slurmcc/allocation.py sync_nodes: a joined node with no VM behind it
    (
        "2024-01-01 00:00:00,000 - WARNING - Node hpc-gpu-3 not found in CycleCloud, but slurm thinks it "
        "does exist.\n",
        NODE_INFRA,
        "cyclecloud_node_missing",
    ),
    (UPD + "hpc-gpu-3 reason set to: cyclecloud_no_node\n", NODE_INFRA, "cyclecloud_node_missing"),
    # GCE's system event (documentation: "About host events"), read healthy before
    ('protoPayload.methodName: "compute.instances.hostError"\n', NODE_HW, "gce_host_error"),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES)
def test_message_is_read_from_its_source(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text, expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED + DOCUMENTED)


# Cloud messages the catalog read before this pass (pinned, unchanged).
ALREADY_READ = [
    ("compute.instances.preempted: Instance was preempted.\n", PREEMPTED, "cloud_node_preempted"),
    (
        "ray.train.PreemptionError: Training was interrupted by node preemption.\n",
        PRE,
        "cloud_node_preempted",
    ),
    (
        UPD + "q1-dy-g5-1 reason set to: (Code:MaxSpotInstanceCountExceeded)Failure when resuming nodes\n",
        NODE_INFRA,
        "cloud_node_resume_failed",
    ),
    (
        PC.format("resume:_resume", "ERROR")
        + "Failed to launch following nodes, setting nodes to down: (x1) ['q1-dy-p5-1']\n",
        NODE_INFRA,
        "cloud_node_launch_failed",
    ),
    (
        "[2024-01-01T00:00:00.000] node q1-dy-p5-3 not resumed by ResumeTimeout(1800) - marking down and "
        "power_save\n",
        NODE_INFRA,
        "cloud_node_resume_timeout",
    ),
    (
        UPD + "q1-dy-p5-1 reason set to: Scheduler health check failed\n",
        NODE_HW,
        "slurmctld_node_reason",
    ),
]


@pytest.mark.parametrize(("text", "expected", "entry"), ALREADY_READ)
def test_cloud_message_read_before_is_pinned(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text, expected, entry)


# Notices and warnings a job survives: recorded by the RECORDED entries (fatal: false) or not read at all.
RECORDED_LINES = [
    # ParallelCluster's DRAIN for a failing EC2 status check or an EC2 scheduled event (clustermgtd.py):
    # the running job finishes; slurmctld_node_reason read the reason as fatal before
    (UPD + "q1-st-p5-1 reason set to: Node failing ec2_health_check\n", DRAIN),
    ("   Reason=Node failing scheduled_events_check [root@2024-01-01T00:00:00]\n", DRAIN),
    (
        PC.format("clustermgtd:_handle_nodes_failing_health_check", "WARNING")
        + "Setting nodes failing health check type ec2_health_check to DRAIN: {'q1-st-p5-1'}\n",
        "pcluster_health_check_drain",
    ),
    (
        PC.format("clustermgtd:_get_nodes_failing_health_check", "WARNING")
        + "Node q1-st-p5-1(10.0.1.12) is associated with instance i-0123456789abcdef0 that is failing "
        "scheduled_events_check. EC2 health state: ['i-0123456789abcdef0', 'running', {'Status': 'ok'}, "
        "{'Status': 'ok'}, [{'Code': 'instance-retirement'}]]\n",
        "pcluster_health_check_drain",
    ),
    # EC2 Spot interruption notice (EventBridge event and instance metadata), rebalance recommendation
    ('  "detail-type": "EC2 Spot Instance Interruption Warning",\n', "cloud_interruption_notice"),
    ('  "detail": {"instance-id": "i-1234567890abcdef0", "instance-action": "terminate"}\n', NOTICE),
    ('spot notice: {"action": "terminate", "time": "2017-09-18T08:22:00Z"}\n', "cloud_interruption_notice"),
    ('  "detail-type": "EC2 Instance Rebalance Recommendation",\n', "cloud_interruption_notice"),
    # EC2 scheduled event in the metadata (events/maintenance/scheduled)
    ('    "Code" : "instance-retirement",\n', "cloud_interruption_notice"),
    ('    "Code" : "system-maintenance",\n', "cloud_interruption_notice"),
    # Azure Scheduled Events
    (
        '{"DocumentIncarnation": 1, "Events": [{"EventId": "602d9444", "EventType": "Preempt", '
        '"ResourceType": "VirtualMachine", "Resources": ["gpu-vm-3"], "EventStatus": "Scheduled"}]}\n',
        "cloud_interruption_notice",
    ),
    ('{"EventType": "Freeze", "EventStatus": "Scheduled", "DurationInSeconds": 5}\n', NOTICE),
    ('{"EventType": "Redeploy", "EventStatus": "Scheduled"}\n', "cloud_interruption_notice"),
]


@pytest.mark.parametrize(("text", "entry"), RECORDED_LINES)
def test_notice_is_recorded_not_fatal(text: str, entry: str) -> None:
    m = load_catalog().match_line(text.rstrip("\n"))
    assert m is not None and m.signature.id == entry, (text, m)
    assert not m.signature.fatal
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", RECORDED)
def test_recorded_entries_are_not_fatal(sig_id: str) -> None:
    sig = load_catalog().get(sig_id)
    assert sig is not None and not sig.fatal


@pytest.mark.parametrize(
    "text",
    [
        # ParallelCluster's warning while EC2's listing catches up (eventual consistency): not yet gone
        PC.format("slurm_resources:is_backing_instance_valid", "WARNING")
        + "Node state check: no corresponding instance in EC2 for node q1-dy-p5-1(10.0.1.12), node state: "
        "ALLOCATED+CLOUD\n",
        PC.format("clustermgtd:_perform_health_check_actions", "INFO")
        + "Performing instance health check actions\n",
        PC.format("clustermgtd:_get_nodes_failing_health_check", "INFO")
        + "Performing actions for health check type: scheduled_events_check\n",
        # slurm-gcp's other node updates
        SYNC + "2 instances restarted (a3-gpu-[0-1])\n",
        SYNC + "2 instances to power down (a3-gpu-[0-1])\n",
        # CycleCloud's zombie case (a VM for a node Slurm powered off: no job there) and its failed-node note
        "2024-01-01 00:00:00,000 - WARNING - Marking node hpc-gpu-3 down (zombie) in slurm. To fix this, "
        "please try one of the following:\n",
        UPD + "hpc-gpu-3 reason set to: cyclecloud_zombie_node\n",
        "2024-01-01 00:00:00,000 - WARNING - Node hpc-gpu-3 is in a failed state. Ignoring\n",
        # a live migration / maintenance notice that did not stop the VM
        "compute.instances.migrateOnHostMaintenance a3-gpu-0\n",
        '{"action": "none"}\n',
        "If a node is preempted, training resumes from the last checkpoint.\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


def test_a_notice_does_not_change_the_reclaim_s_verdict() -> None:
    # The 2-minute warning, then GCE's own preemption: the reclaim decides, the notice adds nothing fatal.
    text = (
        '  "detail-type": "EC2 Spot Instance Interruption Warning",\n'
        "slurmstepd: error: *** STEP 1234.0 ON gpu-07 CANCELLED AT 2024-01-01T00:02:00 DUE TO PREEMPTION "
        "***\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *PREEMPTED), r.pattern_ids


@pytest.mark.parametrize("sig_id", (*ADDED, DRAIN))
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)


@pytest.mark.parametrize("sig_id", (*DOCUMENTED, NOTICE))
def test_documented_entries_name_their_documentation(sig_id: str) -> None:
    assert_names_source(sig_id, re.compile(r"documentation"))
