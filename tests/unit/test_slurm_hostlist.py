from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.slurm.hostlist import MAX_EXPANDED, compress_hostlist, expand_hostlist


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu-[01-04,07],login1", ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-07", "login1"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[008-010]", ["n008", "n009", "n010"]),
        ("r[1-2]-g[1,3]", ["r1-g1", "r1-g3", "r2-g1", "r2-g3"]),
        ("a,b,a", ["a", "b"]),
        ("", []),
        ("(null)", []),
        ("  node1  ", ["node1"]),
    ],
)
def test_expand(text: str, expected: list[str]) -> None:
    assert expand_hostlist(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a[1-", "unclosed"),
        ("a]", "unmatched"),
        ("a[[1]]", "nested"),
        ("a[x]", "bad range"),
        ("a[3-1]", "backwards"),
        ("a,,b", "empty name"),
        ("a b", "unexpected character"),
        ("a;rm", "unexpected character"),
        (f"n[0-{MAX_EXPANDED}]", "exceeds"),
        ("a[1-400]b[1-400]", "more than"),
    ],
)
def test_expand_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand_hostlist(text)


def test_compress_groups_ranges_and_padding() -> None:
    assert compress_hostlist(["gpu01", "gpu02", "gpu03", "gpu07", "login"]) == "gpu[01-03,07],login"
    assert compress_hostlist(["node1", "node2", "node10"]) == "node[1-2,10]"
    assert compress_hostlist(["gpu09", "gpu10"]) == "gpu[09-10]"
    assert compress_hostlist(["node3"]) == "node3"
    assert compress_hostlist([]) == ""


def test_compress_rejects_unsafe_names() -> None:
    with pytest.raises(ValueError):
        compress_hostlist(["node1", "x;reboot"])


names = st.builds(
    lambda prefix, num, pad: f"{prefix}{str(num).zfill(pad)}" if num is not None else prefix,
    st.sampled_from(["gpu", "node-", "r1-g", "login", "a.b"]),
    st.one_of(st.none(), st.integers(0, 300)),
    st.integers(0, 4),
)


@given(st.lists(names, max_size=40))
def test_compress_round_trip(nodes: list[str]) -> None:
    assert set(expand_hostlist(compress_hostlist(nodes))) == set(nodes)


@given(st.text(max_size=60))
def test_expand_arbitrary_text_only_raises_value_error(text: str) -> None:
    try:
        result = expand_hostlist(text)
    except ValueError:
        return
    assert all(isinstance(n, str) and n for n in result)
