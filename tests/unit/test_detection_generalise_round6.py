"""Sixth corpus round (issue 12 section 1): network-plugin fallback, cloud nodes that never booted, and
NCCL failing to read the GPUs' PCI topology.

Each kind was generalised from a miss on the tuning part of the corpus (pub373, pub377-pub380, pub388).
The cases check the kind inside the noise a real job prints around it, who it blames, which node it
names, and that the look-alikes stay healthy.
"""

from __future__ import annotations

import pytest

from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

_R3 = "[1,3]<stdout>:gpu-a:31:570 [3] "
OFI_FALLBACK = (
    f"{_R3}NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.9.1-aws\n"
    f"{_R3}nccl_net_ofi_create_plugin:204 NCCL WARN NET/OFI Failed to initialize rdma protocol\n"
    f"{_R3}nccl_net_ofi_create_plugin:257 NCCL WARN NET/OFI aws-ofi-nccl initialization failed\n"
    f"{_R3}nccl_net_ofi_init:155 NCCL WARN NET/OFI Initializing plugin failed\n"
    f"{_R3}NCCL INFO net.cc:56 -> 2\n"
    f"{_R3}NCCL INFO NET/IB : No device found.\n"
    f"{_R3}NCCL INFO NET/Socket : Using [0]eth0:10.0.0.3<0>\n"
    f"{_R3}NCCL INFO Using network Socket\n"
    f"{_R3}NCCL INFO comm 0x55d0 rank 3 nranks 16 cudaDev 3 busId 1a0 - Init COMPLETE\n"
    "[1,0]<stdout>:step 10/1000 loss 7.21\n"
)


def test_a_network_plugin_that_fails_to_initialise_leaves_a_training_job_healthy() -> None:
    r = classify_text(OFI_FALLBACK)
    assert (r.fatal, r.category, r.attribution) == (False, "healthy", "none")


@pytest.mark.parametrize(
    "line",
    [
        "host:249:249 [0] ofi_init:1288 NCCL WARN NET/OFI Only EFA provider is supported\n",
        "host:1:2 [7] get_ofi_provider:312 NCCL WARN NET/OFI Could not find any optimal provider\n",
        "host:1:2 [7] find_ofi_provider:543 NCCL WARN NET/OFI Couldn't find any optimal provider\n",
    ],
)
def test_plugin_initialisation_warnings_alone_are_not_a_failure(line: str) -> None:
    assert not classify_text(line).fatal


def test_a_failure_on_the_fallback_transport_still_decides() -> None:
    text = OFI_FALLBACK + (
        "[1,3]<stdout>:gpu-a:31:612 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
        "10.0.0.9<43211> failed : Software caused connection abort\n"
        "[1,3]<stdout>:gpu-a:31:612 [3] NCCL INFO misc/socket.cc:565 -> 2\n"
    )
    r = classify_text(text)
    assert r.fatal and r.category != "healthy"


def test_an_error_of_a_plugin_that_did_initialise_stays_an_interconnect_failure() -> None:
    line = (
        "gpu-a:31:612 [3] ofi_process_cq:1039 NCCL WARN NET/OFI Request 0x7fbb944701b8 completed with "
        "error. RC: 20. Error: unknown error. Completed length: 0\n"
    )
    r = classify_text(line)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure")
    assert "efa_ofi_error" in r.pattern_ids


@pytest.mark.parametrize(
    ("kind", "text", "nodes", "pattern"),
    [
        (
            "Slurm power saving gave up on the node",
            "[2024-03-01T10:00:00.000] POWER: power_save: waking nodes q1-dy-p5-3\n"
            "[2024-03-01T10:30:00.512] node q1-dy-p5-3 not resumed by ResumeTimeout(1800) - marking down "
            "and power_save\n",
            ["q1-dy-p5-3"],
            "cloud_node_resume_timeout",
        ),
        (
            "ParallelCluster could not launch the instance (capacity)",
            "2024-03-01 10:00:01,000 - [slurm_plugin.instance_manager:add_instances_for_nodes] - INFO - "
            "Launching instances for slurm nodes (x2) ['q1-dy-p5-1', 'q1-dy-p5-2']\n"
            "2024-03-01 10:00:03,000 - [slurm_plugin.instance_manager:add_instances_for_nodes] - ERROR - "
            "Encountered exception when launching instances for nodes (x2) ['q1-dy-p5-1', 'q1-dy-p5-2']: An "
            "error occurred (InsufficientHostCapacity) when calling the RunInstances operation\n"
            "2024-03-01 10:00:03,001 - [slurm_plugin.resume:_resume] - INFO - Successfully launched "
            "nodes (x0) []\n"
            "2024-03-01 10:00:03,002 - [slurm_plugin.resume:_resume] - ERROR - Failed to launch following "
            "nodes, setting nodes to down: (x2) ['q1-dy-p5-1', 'q1-dy-p5-2']\n",
            ["q1-dy-p5-1"],
            "cloud_node_launch_failed",
        ),
        (
            "a fleet request without capacity names no node",
            "2024-03-01 10:00:03,000 - [slurm_plugin.fleet_manager:_launch_instances] - ERROR - JobID 9 - "
            "Error in CreateFleet request (1a2b): InsufficientInstanceCapacity - We currently do not have "
            "sufficient p5.48xlarge capacity in the Availability Zone you requested (us-east-2b).\n",
            [],
            "cloud_node_launch_failed",
        ),
    ],
)
def test_a_cloud_node_that_never_booted_is_infrastructure(
    kind: str, text: str, nodes: list[str], pattern: str
) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "infrastructure"), kind
    assert r.nodes == nodes, kind
    assert pattern in {s.id for s in load_catalog().signatures}
    assert pattern in r.pattern_ids, kind


def test_a_node_failure_slurm_reports_on_a_running_node_still_blames_the_node() -> None:
    r = classify_text("srun: error: Node failure on gpu-12\nsrun: Job step aborted\n")
    assert (r.category, r.attribution, r.nodes) == ("slurm_node_failure", "hardware", ["gpu-12"])


@pytest.mark.parametrize(
    "text",
    [
        "ResumeTimeout=1800\nSuspendTime=600\n",
        "2024-03-01 10:00:03,001 - [slurm_plugin.resume:_resume] - INFO - Successfully launched nodes (x1) "
        "['q1-dy-p5-1']\n",
        "2024-03-01 10:00:00,000 - [slurm_plugin.resume:main] - INFO - ResumeProgram startup.\n",
    ],
)
def test_cloud_scaling_configuration_and_success_stay_healthy(text: str) -> None:
    assert not classify_text(text).fatal


def test_nccl_that_cannot_resolve_the_gpus_pci_path_is_the_software_environment() -> None:
    text = (
        "wsl-box:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:172.20.1.5<0>\n"
        "wsl-box:4242:4242 [0] NCCL INFO Using network Socket\n"
        "wsl-box:4242:4301 [0] graph/xml.cc:332 NCCL WARN Could not find real path of "
        "/sys/class/pci_bus/0000:2b/../../0000:2b:00.0\n"
        "wsl-box:4242:4301 [0] NCCL INFO graph/xml.cc:469 -> 2\n"
        "wsl-box:4242:4301 [0] NCCL INFO init.cc:840 -> 2\n"
        "wsl-box:4242:4301 [0] NCCL INFO group.cc:73 -> 2 [Async thread]\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "nccl_error", "system_software")
    assert "nccl_gpu_pci_path_missing" in r.pattern_ids


def test_nccl_skipping_an_unreadable_link_attribute_stays_healthy() -> None:
    line = (
        "host:23:124 [0] NCCL INFO Topology detection : could not read /sys/devices/pci0001:00/"
        "0001:00:00.0/../max_link_speed, ignoring\n"
    )
    assert not classify_text(line).fatal


def test_a_node_that_never_booted_attributes_srun_s_node_failure_to_infrastructure() -> None:
    text = (
        "srun: error: Node failure on q1-dy-p5-3\n"
        "srun: error: Nodes q1-dy-p5-3 are still not ready\n"
        "srun: error: Something is wrong with the boot of the nodes.\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "infrastructure")
    assert r.nodes == ["q1-dy-p5-3"]
    assert "slurm_nodes_boot_failed" in r.pattern_ids


def test_srun_s_boot_message_alone_is_a_node_that_never_booted() -> None:
    r = classify_text("srun: error: Something is wrong with the boot of the nodes.\n")
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "infrastructure")


def test_a_boot_failure_of_another_node_leaves_a_node_failure_on_the_node() -> None:
    text = (
        "srun: error: Node failure on gpu-12\n"
        "[2024-03-01T10:30:00.512] node q1-dy-p5-3 not resumed by ResumeTimeout(1800) - marking down\n"
    )
    r = classify_text(text)
    assert (r.category, r.attribution) == ("slurm_node_failure", "hardware")
    assert r.nodes[0] == "gpu-12"
