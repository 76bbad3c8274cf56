"""Twenty-third corpus round (issue 12 section 2): generalised from the round's tuning misses only.

Round 23 added 21 excerpts (pub1060-pub1080) drawn at random from sources other than GitHub issue trackers
(NVIDIA developer forums, Bitbucket and GitLab trackers, a GitLab-mirrored ports commit, pastebin, gists,
Hugging Face Space discussions), split by the stored rule and committed (9591c51) before the classifier ran
on them. Its tuning misses:
- HPX's libfabric parcelport that cannot set its fabric up (pub1066, pastebin.com/GwykfCJ0, read
  interconnect / infrastructure only because the header path `.../libfabric/fabric_error.hpp` matched the
  generic libfabric entry): HPX plugins/parcelport/libfabric/libfabric_controller.hpp `throw
  fabric_error(ret, "Failed to get fabric info")` after fi_getinfo, logged by fabric_error.hpp as
  `<msg> : <fi_strerror>`: interconnect, system_software (entry hpx_libfabric_setup_failed);
- not changed: pub1060 (a kernel past the display watchdog, `the launch timed out and was terminated` with
  Xid 8, labelled hang; the catalog reads the launch timeout with the launch failure and Xid 8's NVIDIA
  bucket is RESTART_APP, which the Categories table maps to cuda_illegal_access: a labelling question, not a
  missing signature) and pub1080 (the deciding `RuntimeError: CUDA error: invalid argument` is quoted inside
  the user's sentence, not printed by a program).
Every positive case below fails on main before this change (the look-alike passes on both).
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_read_as
from trainguard.detection.classify import classify_text

FABRIC_SETUP = ("interconnect", "system_software")


@pytest.mark.parametrize(
    "text",
    [
        "00: <ERROR> ------------------ 0x2aaab2d35280 Failed to get fabric info : No data available"
        " /global/homes/u/user/hpx/plugins/parcelport/libfabric/fabric_error.hpp 31\n"
        "terminate called without an active exception\n"
        "srun: error: nid00012: task 0: Aborted\n",
        "<ERROR> 0x7f3c2a1b Failed to get fi_fabric : code 61 : No data available\n"
        "terminate called without an active exception\n",
        "<ERROR> Failed to get fi_passive_ep : Function not implemented\n",
    ],
)
def test_hpx_libfabric_setup_failure_is_the_nodes_provider_setup(text: str) -> None:
    assert_read_as(text, FABRIC_SETUP, "hpx_libfabric_setup_failed")


def test_gpu_fabric_info_lookups_are_not_this_entry() -> None:
    # A GPU-fabric (NVLink) probe prints the same words with a GPU and no libfabric error after ` : `.
    result = classify_text(
        "W0101 12:00:00.000 1 state.go:88] Failed to get fabric info for GPU GPU-1234: Not Supported\n"
    )
    assert (result.category, result.attribution) != FABRIC_SETUP


def test_round23_entries_name_their_sources() -> None:
    # HPX's parcelport is header-only here: the entry names its .hpp files.
    assert_names_source("hpx_libfabric_setup_failed", re.compile(r"parcelport/libfabric/[a-z_]+\.hpp"))
