"""Seventeenth corpus round (issue 12 section 1): generalised from the round's tuning misses only.

Round 17 (done beside round 16, from the round-15 code) added 25 excerpts drawn at random from the HPC side
of distributed training (Slurm tooling, pyxis/enroot, Open MPI/MPICH/UCX, Horovod, JAX/XLA, DCGM, Kubeflow;
not chosen by the held-out part's kinds), split by the stored rule and committed before the classifier ran
on them. Its tuning misses, each generalised from the program that prints the text, not from an excerpt:
- Slurm's clients finding no configuration (pub762, one_policy_to_run_them_all#5, read healthy): configless
  discovery's `fetch_config: DNS SRV lookup failed`, `_establish_config_source: failed to fetch config`
  and `fatal: Could not establish a configuration source` (src/common/fetch_config.c, read_config.c);
- XLA/TSL's coordination service timing out the tasks' registration (pub758, google/paxml#77, read
  healthy): `Coordination service agent in error status: DEADLINE_EXCEEDED` (xla/pjrt/distributed/
  client.cc) and `Stopping coordination service as cluster registration failed` (coordination_service.cc);
- NCCL's socket(2) failing (pub772, nccl#224, read as the network's hardware): `NCCL WARN Net : Socket
  creation failed : <strerror>` (src/include/socket.h) is the node's configuration, not the fabric;
- Open MPI's abort for an MPI call outside MPI_Init/MPI_Finalize (pub757, exalearn/EXARL#22, read healthy):
  `*** The <call>() function was called before MPI_INIT was invoked.` (ompi/errhandler/
  errhandler_predefined.c), the program's misuse, except when the call is MPI_Init itself (a failed init).
Every positive case below fails on the round-15 code (the look-alikes and guards pass on both).
"""

from __future__ import annotations

import pytest

from trainguard.detection.classify import classify_text

# ---------------------------------------------------------------- Slurm's clients with no configuration


@pytest.mark.parametrize(
    "text",
    [
        "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
        "sbatch: error: fetch_config: DNS SRV lookup failed\n"
        "sbatch: error: _establish_config_source: failed to fetch config\n"
        "sbatch: fatal: Could not establish a configuration source\n",
        "srun: fatal: Could not establish a configuration source\n",
        "squeue: error: fetch_config: DNS SRV lookup failed\n",
    ],
)
def test_a_slurm_client_with_no_configuration_source_is_the_site_s(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "system_software"), text
    assert "slurm_config_source_missing" in r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        "slurmd: debug:  _establish_config_source: using config_file=/etc/slurm/slurm.conf (environment)\n",
        "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n",
        "Submitted batch job 4242\n",
    ],
)
def test_a_found_configuration_is_not_it(text: str) -> None:
    assert "slurm_config_source_missing" not in classify_text(text).pattern_ids


# ---------------------------------------------------------------- XLA's coordination service timing out


@pytest.mark.parametrize(
    "text",
    [
        "2024-04-12 23:39:41.656900: E external/xla/xla/pjrt/distributed/client.cc:96] Coordination service "
        "agent in error status: DEADLINE_EXCEEDED: Deadline Exceeded\n",
        "Stopping coordination service as cluster registration failed. This may be due to 1) some tasks "
        "crashed earlier before connecting, 2) some tasks were never scheduled, or 3) scheduling delays.\n",
    ],
)
def test_xla_s_coordination_service_timing_out_is_a_rendezvous_timeout(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "nccl_timeout", "system_software"), text
    assert "xla_coordination_service_timeout" in r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        # A peer's missed heartbeat is a failure elsewhere, not this rendezvous.
        "E external/xla/xla/pjrt/distributed/client.cc:96] Coordination service agent in error status: "
        "UNAVAILABLE: Task /job:jax_worker/replica:0/task:3 heartbeat timeout.\n",
        "I0412 23:30:01.000000 client.cc:120] Connected to distributed JAX controller\n",
    ],
)
def test_other_coordination_service_lines_are_not_it(text: str) -> None:
    assert "xla_coordination_service_timeout" not in classify_text(text).pattern_ids


def test_the_barrier_raised_into_the_program_stays_the_program_s() -> None:
    # Tuning pub498 (llama-2-jax#20): a script told to wait for 8 processes and started as one; the
    # exception raised from client.connect() keeps its reading (the program's exception).
    text = (
        "Traceback (most recent call last):\n"
        '  File "/root/llama-2-jax/train.py", line 89, in main\n'
        '    jax.distributed.initialize(coordinator_address="localhost", num_processes=8, process_id=0)\n'
        "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: "
        "PjRT_Client_Connect. Timed out task names:\n"
    )
    r = classify_text(text)
    assert "xla_coordination_service_timeout" not in r.pattern_ids
    assert (r.fatal, r.category, r.attribution) == (True, "python_exception", "application")


# ---------------------------------------------------------------- NCCL's socket(2) failing


def test_nccl_s_socket_creation_failure_is_the_node_s_configuration() -> None:
    text = (
        "[1,4]<stdout>:gpu7:4105:4372 [0] include/socket.h:318 NCCL WARN Net : Socket creation failed : "
        "Address family not supported by protocol\n"
        "[1,4]<stdout>:gpu7:4105:4372 [0] NCCL INFO transport/net_ib.cu:407 -> 2\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "nccl_error", "system_software")
    assert "nccl_socket_create_failed" in r.pattern_ids


def test_a_socket_connect_failure_stays_the_network_s() -> None:
    text = (
        "gpu7:4105:4372 [0] NCCL WARN NET/Socket : Connect to 10.0.0.2<52345> failed : Connection refused\n"
    )
    r = classify_text(text)
    assert "nccl_socket_create_failed" not in r.pattern_ids
    assert (r.fatal, r.category, r.attribution) == (True, "nccl_error", "hardware")


# ---------------------------------------------------------------- Open MPI: a call outside MPI_Init/Finalize


@pytest.mark.parametrize(
    "text",
    [
        "*** The MPI_Comm_rank() function was called before MPI_INIT was invoked.\n"
        "*** This is disallowed by the MPI standard.\n"
        "*** Your MPI job will now abort.\n",
        "*** The MPI_Query_thread() function was called before MPI_INIT was invoked.\n",
        "*** The MPI_Comm_dup() function was called after MPI_FINALIZE was invoked.\n",
    ],
)
def test_an_mpi_call_outside_init_is_the_program_s(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "python_exception", "application"), text
    assert "openmpi_call_outside_init" in r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        # The same words after a failed MPI_Init: the runtime's failure, not the program's misuse.
        "*** The MPI_Init_thread() function was called before MPI_INIT was invoked.\n",
        "*** The MPI_Init() function was called before MPI_INIT was invoked.\n",
    ],
)
def test_a_failed_mpi_init_is_not_it(text: str) -> None:
    assert "openmpi_call_outside_init" not in classify_text(text).pattern_ids
