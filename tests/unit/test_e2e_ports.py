"""The fixed ports of the real-stack tests and benchmarks stay inside one band, below the ephemeral range.

pytest-xdist workers add tests.e2e.stack.XDIST_PORT_STRIDE per worker index to every one of them, so
two workers (each running a different test file at the same moment) can only collide if some fixed
port, plus the few ports derived from it, leaves the band. This test fails when someone adds a port
outside it.
"""

from __future__ import annotations

from bench import latency
from tests.e2e import conftest, crash_stack, test_slurm_lab, test_slurmrestd, test_ssh_runner
from tests.e2e.stack import PORT_OFFSET, XDIST_PORT_STRIDE
from trainguard.quickstart import Layout

BAND = (7000, 27000)
DERIVED = 400  # the most any test adds to a base port (lab: +300 and a node per slurmd)


def base_ports() -> dict[str, int]:
    ports = {
        "bench latency ctld": latency.CTLD_PORT,
        "bench latency slurmd": latency.NODE_PORT_BASE,
        "crash ctld": crash_stack.CTLD_PORT - PORT_OFFSET,
        "crash slurmd": crash_stack.NODE_PORT_BASE - PORT_OFFSET,
        "lab": test_slurm_lab.CTLD_PORT - PORT_OFFSET,
        "ssh sshd": test_ssh_runner.SSH_PORT - PORT_OFFSET,
        "ssh ctld": test_ssh_runner.CTLD_PORT - PORT_OFFSET,
    }
    for version, (ctld, nodes) in conftest.SLURM_PORTS.items():
        ports[f"e2e {version} ctld"], ports[f"e2e {version} slurmd"] = ctld, nodes
    for version, port in test_slurmrestd.PORTS.items():
        ports[f"restd {version}"] = port - PORT_OFFSET
    # test_safety_actions runs `trainguard local up` with the quick-start layout shifted by 500
    layout = Layout(root=conftest.E2E_DIR, port_offset=500)
    quickstart = {"ctld": 16817, "slurmd": 17001, "temporal": 7233, "ui": 8233, "api": 8088, "dcgm": 9400,
                  "prometheus": 9090, "metrics": 9464}  # fmt: skip
    for name, base in quickstart.items():
        ports[f"local-up {name}"] = layout.port(base)
    return ports


def test_every_fixed_port_lies_in_the_band() -> None:
    low, high = BAND
    outside = {name: p for name, p in base_ports().items() if not low <= p or not p + DERIVED < high}
    assert not outside, f"ports outside {BAND} (minus {DERIVED} for derived ports): {outside}"


def test_the_xdist_stride_clears_the_band() -> None:
    low, high = BAND
    assert high - low <= XDIST_PORT_STRIDE
    assert high + XDIST_PORT_STRIDE <= 65535 - 10000  # room for TG_TEST_PORT_OFFSET of parallel checkouts
