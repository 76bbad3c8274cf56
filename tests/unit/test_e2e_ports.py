"""The fixed ports of the real-stack tests and benchmarks: two pytest-xdist workers never share one.

Each worker adds tests.e2e.stack.XDIST_PORT_STRIDE per index to every fixed port, so two workers, each
running a different test file at the same moment, can only collide if a port of one lands on a port of
the other. And every fixed port stays below the kernel's ephemeral range (32768 and up by default),
where the free ports of Temporal dev servers and the local ports of client sockets are taken: a fixed
port there can be found in use by chance. This test fails when someone adds a port that breaks either.
"""

from __future__ import annotations

from bench import latency
from tests.e2e import (
    conftest,
    crash_stack,
    test_healthy_real_logs,
    test_slurm_lab,
    test_slurmrestd,
    test_ssh_runner,
)
from tests.e2e.stack import PORT_OFFSET, PROMETHEUS_PORT, XDIST_PORT_STRIDE
from trainguard.quickstart import Layout

EPHEMERAL_LOW = 32768
WORKERS = 2


def port_ranges() -> dict[str, range]:
    """Every fixed port the tests bind, before any offset, as ranges (slurmd ports follow their base)."""

    def ports(first: int, count: int = 1, *, offset: int = PORT_OFFSET) -> range:
        return range(first - offset, first - offset + count)

    lab, ssh = test_slurm_lab.CTLD_PORT, test_ssh_runner.CTLD_PORT
    ranges = {
        "bench latency ctld": ports(latency.CTLD_PORT, offset=0),  # offset by --port-offset at run time
        "bench latency slurmd": ports(latency.NODE_PORT_BASE, latency.NODES, offset=0),
        "crash ctld": ports(crash_stack.CTLD_PORT),
        "crash slurmd": ports(crash_stack.NODE_PORT_BASE, 4),
        # lab: ctld, +9 ghost, +10/+20 both-at-once, +30 rest, +40 the 24.11 lab, +184/+224 slurmd, +300
        "lab": ports(lab, 304),
        "ssh sshd": ports(test_ssh_runner.SSH_PORT),
        "ssh slurm": ports(ssh, 264 + 2),
        "e2e prometheus": ports(PROMETHEUS_PORT),
        # healthy real logs: 22.05 at the base, 24.11 at +40 (2 slurmd each)
        "healthy ctld": ports(test_healthy_real_logs.CTLD_PORT, 40 + 1),
        "healthy slurmd": ports(test_healthy_real_logs.NODE_PORT_BASE, 40 + 2),
    }
    for version, (ctld, nodes) in conftest.SLURM_PORTS.items():
        ranges[f"e2e {version}"] = range(ctld, ctld + 1)
        ranges[f"e2e {version} slurmd"] = range(nodes, nodes + 4)
    for version, port in test_slurmrestd.PORTS.items():
        ranges[f"restd {version}"] = ports(port, 100 + 3)  # ctld, +50 slurmrestd, +100 slurmd
    # test_safety_actions runs `trainguard local up` with the quick-start layout shifted by 500
    layout = Layout(root=conftest.E2E_DIR, port_offset=500)
    for name, base in {"ctld": 16817, "temporal": 7233, "ui": 8233, "api": 8088, "dcgm": 9400,
                       "prometheus": 9090, "metrics": 9464}.items():  # fmt: skip
        ranges[f"local-up {name}"] = range(layout.port(base), layout.port(base) + 1)
    ranges["local-up slurmd"] = range(layout.port(17001), layout.port(17001) + 4)
    return ranges


def test_two_workers_never_share_a_port() -> None:
    ranges = port_ranges()
    ours = {p for r in ranges.values() for p in r}
    for worker in range(1, WORKERS):
        shift = worker * XDIST_PORT_STRIDE
        clashes = {name: r.start + shift for name, r in ranges.items() if ours & {p + shift for p in r}}
        assert not clashes, f"worker gw{worker}'s ports meet gw0's: {clashes}"


def test_every_worker_stays_below_the_ephemeral_range() -> None:
    top = max(r.stop - 1 for r in port_ranges().values()) + (WORKERS - 1) * XDIST_PORT_STRIDE
    assert top < EPHEMERAL_LOW, top
