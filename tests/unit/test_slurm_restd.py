"""slurmrestd access: version choice, the request of each operation in each API version, how answers
become errors, the token source, settings. The real-server behaviour is tested in
tests/e2e/test_slurmrestd.py; the client tests here use httpx.MockTransport (a fake slurmrestd, shaped
after the answers recorded from the real 22.05 and 24.11 servers) only to check what is *sent*.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from trainguard.settings import ClusterSettings, SettingsError, load_settings
from trainguard.slurm.client import SlurmClient
from trainguard.slurm.factory import make_slurm_access
from trainguard.slurm.restd import SlurmRestClient
from trainguard.slurm.restd_api import (
    REJECTED_HINT,
    VERSIONS,
    NoSupportedVersionError,
    Request,
    SlurmRestAuthError,
    SlurmRestError,
    UnsupportedOperationError,
    answer_error,
    choose_version,
    served_versions,
    version_key,
)
from trainguard.slurm.restd_token import TokenSource, claims
from trainguard.slurm.runner import LocalRunner

URL = "http://restd.example:6820"
REQ = Request("GET", "/slurm/v0.0.42/jobs")


def jwt(exp: float, user: str = "root") -> str:
    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'exp': int(exp), 'sun': user})}.c2lnbmF0dXJl"


# --- versions -----------------------------------------------------------------------------------


def test_served_versions_come_from_slurmctld_paths_only() -> None:
    doc = {
        "paths": {
            "/slurm/v0.0.37/ping": {},
            "/slurm/v0.0.38/jobs": {},
            "/slurm/v0.0.36/diag": {},
            "/slurmdb/v0.0.38/jobs": {},
            "/openapi/v3": {},
        }
    }
    assert served_versions(doc) == ["v0.0.36", "v0.0.37", "v0.0.38"]
    assert served_versions({"paths": []}) == [] and served_versions({}) == []


def test_the_newest_known_version_is_chosen_numerically() -> None:
    assert choose_version(URL, ["v0.0.40", "v0.0.42", "v0.0.41"]).name == "v0.0.42"
    assert choose_version(URL, ["v0.0.38", "v0.0.37"]).name == "v0.0.38"
    # v0.0.100 sorts after v0.0.42 but is unknown: the newest *known* one wins.
    assert choose_version(URL, ["v0.0.42", "v0.0.100"]).name == "v0.0.42"
    assert version_key("v0.0.100") > version_key("v0.0.42")


def test_no_known_version_is_a_typed_error_naming_both_sides() -> None:
    with pytest.raises(NoSupportedVersionError) as caught:
        choose_version(URL, ["v0.0.37", "v0.0.39"])
    assert caught.value.served == ("v0.0.37", "v0.0.39") and not caught.value.retryable
    assert "v0.0.37, v0.0.39" in str(caught.value) and "v0.0.42" in str(caught.value)


def test_a_pinned_version_must_be_served() -> None:
    assert choose_version(URL, ["v0.0.40", "v0.0.42"], pinned="v0.0.40").name == "v0.0.40"
    with pytest.raises(NoSupportedVersionError, match=r"v0\.0\.38"):
        choose_version(URL, ["v0.0.40", "v0.0.42"], pinned="v0.0.38")


# --- requests per version -----------------------------------------------------------------------


def test_hold_and_release_are_the_same_job_update_in_every_version() -> None:
    for name, api in VERSIONS.items():
        assert api.hold("12") == Request("POST", f"/slurm/{name}/job/12", {"hold": True})
        assert api.release("12_3") == Request("POST", f"/slurm/{name}/job/12_3", {"hold": False})
        assert api.cancel("12") == Request("DELETE", f"/slurm/{name}/job/12")


def test_exclusion_uses_each_versions_key_and_shape() -> None:
    assert VERSIONS["v0.0.38"].set_excluded("7", ["node1", "node2"]).body == {"exclude_nodes": "node1,node2"}
    assert VERSIONS["v0.0.42"].set_excluded("7", ["node1", "node2"]).body == {
        "excluded_nodes": ["node1", "node2"]
    }
    # Clearing: an empty array would leave ExcNodeList unchanged in data_parser; "" clears it.
    assert VERSIONS["v0.0.42"].set_excluded("7", []).body == {"excluded_nodes": ""}
    assert VERSIONS["v0.0.38"].set_excluded("7", []).body == {"exclude_nodes": ""}


def test_requeue_is_unsupported_in_every_version() -> None:
    for api in VERSIONS.values():
        with pytest.raises(UnsupportedOperationError, match="no requeue") as caught:
            api.requeue_hold("5")
        assert not caught.value.retryable and caught.value.version == api.name


def test_node_updates_exist_from_v0_0_40() -> None:
    with pytest.raises(UnsupportedOperationError, match="no node update"):
        VERSIONS["v0.0.38"].drain("node1", "xid")
    with pytest.raises(UnsupportedOperationError):
        VERSIONS["v0.0.38"].resume("node1")
    drain = VERSIONS["v0.0.41"].drain("node1", "xid 79\nrm -rf / =x")
    assert drain == Request(
        "POST", "/slurm/v0.0.41/node/node1", {"state": ["DRAIN"], "reason": "xid 79 rm -rf /  x"}
    )
    assert VERSIONS["v0.0.42"].resume("node1").body == {"state": ["RESUME"]}


@pytest.mark.parametrize("bad", ["../diag", "1/../../x", "12?signal=9", "", "0", "abc"])
def test_untrusted_job_ids_never_reach_a_path(bad: str) -> None:
    with pytest.raises(ValueError):
        VERSIONS["v0.0.42"].job(bad)
    with pytest.raises(ValueError):
        VERSIONS["v0.0.42"].cancel(bad)


def test_untrusted_node_names_never_reach_a_path() -> None:
    for bad in ("node1/../../jobs", "node 1", "-x"):
        with pytest.raises(ValueError):
            VERSIONS["v0.0.42"].drain(bad, "r")
        with pytest.raises(ValueError):
            VERSIONS["v0.0.38"].set_excluded("1", [bad])


# --- answers -> errors (shapes recorded from the real servers) ---------------------------------


def test_success_has_no_error() -> None:
    assert answer_error(REQ, 200, {"errors": [], "warnings": [], "jobs": []}, "{}") is None
    # 24.11: cancelling a job that is already completing is success.
    done = {"status": [{"error": {"code": 2021, "string": "Job/step already completing or completed"}}]}
    assert answer_error(REQ, 200, done, "{}") is None


@pytest.mark.parametrize("status", [401, 403, 511])
def test_refused_tokens_are_auth_errors(status: int) -> None:
    error = answer_error(REQ, status, None, "Authentication failure")
    assert isinstance(error, SlurmRestAuthError) and not error.retryable


def test_protocol_authentication_error_is_an_auth_error() -> None:
    doc = {"errors": [{"error": "Protocol authentication error", "error_number": 1007, "description": "x"}]}
    assert isinstance(answer_error(REQ, 500, doc, "{}"), SlurmRestAuthError)


def test_a_2205_anonymous_refusal_carries_the_token_hint() -> None:
    doc = {"errors": [{"error": "Unspecified error", "error_number": -1, "description": "Failed"}]}
    error = answer_error(REQ, 500, doc, "{}")
    assert error is not None and REJECTED_HINT in error.stderr


def test_slurms_own_text_is_kept_for_the_step_rules() -> None:
    doc = {"errors": [{"error": "Job is no longer pending execution", "error_number": 2073}]}
    error = answer_error(REQ, 500, doc, "{}")
    assert error is not None and "Job is no longer pending execution" in error.stderr and not error.retryable


def test_errors_with_http_200_still_fail() -> None:
    doc = {"errors": [{"error": "Operation not permitted", "description": 'Disabled key: "excluded_nodes"'}]}
    error = answer_error(REQ, 200, doc, "{}")
    assert error is not None and "Disabled key" in error.stderr


def test_a_failed_per_job_update_reported_as_warning_fails() -> None:
    doc = {
        "errors": [],
        "warnings": [{"description": "Job update resulted in non-zero return-code[2017]: x"}],
    }
    assert answer_error(REQ, 200, doc, "{}") is not None


def test_unknown_job_in_a_cancel_status_fails() -> None:
    doc = {"status": [{"error": {"code": 2017, "string": "Invalid job id specified"}}]}
    error = answer_error(REQ, 200, doc, "{}")
    assert error is not None and "Invalid job id specified" in error.stderr


def test_unreachable_controller_and_gateway_errors_are_retryable() -> None:
    doc = {
        "errors": [{"error": "Unable to contact slurm controller (connect failure)", "error_number": 1001}]
    }
    error = answer_error(REQ, 500, doc, "{}", transient=("Unable to contact slurm controller",))
    assert error is not None and error.retryable
    gateway = answer_error(REQ, 503, None, "<html>busy</html>")
    assert gateway is not None and gateway.retryable and "busy" in gateway.stderr


# --- token ------------------------------------------------------------------------------------------


def test_static_token_is_hidden_and_expiry_is_checked() -> None:
    fresh = jwt(time.time() + 600)
    source = TokenSource(token=SecretStr(fresh))
    assert source.get() == fresh and fresh not in repr(source)
    assert claims(fresh)["sun"] == "root" and claims("not-a-jwt") == {}
    expired = TokenSource(token=SecretStr(jwt(time.time() - 5)))
    with pytest.raises(SlurmRestAuthError, match="expired") as caught:
        expired.get()
    assert not caught.value.retryable


def test_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    first, second = jwt(time.time() + 600, "a"), jwt(time.time() + 900, "bb")
    path.write_text(f"SLURM_JWT={first}\n")
    source = TokenSource(token_file=path)
    assert source.get() == first
    path.write_text(second + "\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert source.get() == second
    path.write_text(jwt(time.time() - 1) + "\n")
    with pytest.raises(SlurmRestAuthError, match="expired") as caught:
        source.get()
    assert caught.value.retryable  # the file may be rotated again
    path.unlink()
    with pytest.raises(SlurmRestAuthError, match="cannot read"):
        source.get()


def test_exactly_one_token_source() -> None:
    with pytest.raises(ValueError):
        TokenSource()
    with pytest.raises(ValueError):
        TokenSource(token=SecretStr("x"), token_file="/x")


# --- settings -------------------------------------------------------------------------------------


def _load(tmp_path: Path, cluster: dict[str, Any]) -> ClusterSettings:
    path = tmp_path / "tg.yaml"
    path.write_text(json.dumps({"cluster": cluster}))
    return load_settings(path).cluster


def test_slurmrestd_settings_are_validated(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"slurmrestd\.url and \.user"):
        _load(tmp_path, {"access": "slurmrestd"})
    with pytest.raises(SettingsError, match="exactly one of"):
        _load(tmp_path, {"access": "slurmrestd", "slurmrestd": {"url": URL, "user": "tg"}})
    with pytest.raises(SettingsError, match="http"):
        _load(
            tmp_path, {"access": "slurmrestd", "slurmrestd": {"url": "restd:6820", "user": "u", "token": "t"}}
        )
    with pytest.raises(SettingsError, match="api_version"):
        _load(tmp_path, {"slurmrestd": {"api_version": "v0.0.39"}})
    with pytest.raises(SettingsError, match="access"):
        _load(tmp_path, {"access": "rest"})


def test_the_factory_builds_the_client_the_settings_ask_for(tmp_path: Path) -> None:
    secret = jwt(time.time() + 600)
    rest = _load(
        tmp_path, {"access": "slurmrestd", "slurmrestd": {"url": URL + "/", "user": "tg", "token": secret}}
    )
    assert secret not in repr(rest) and secret not in str(rest.model_dump())
    client = make_slurm_access(rest, LocalRunner())
    assert isinstance(client, SlurmRestClient) and client.url == URL and secret not in repr(client)
    assert isinstance(make_slurm_access(ClusterSettings(), LocalRunner()), SlurmClient)


# --- the client (what it sends) -------------------------------------------------------------------

JOB_0038 = {
    "job_id": 5,
    "name": "t",
    "job_state": "RUNNING",
    "state_reason": "None",
    "nodes": "node1",
    "restart_cnt": 0,
    "priority": 100,
    "requeue": True,
}
META_0038 = {"plugin": {"type": "openapi/v0.0.38"}, "Slurm": {"release": "22.05.8"}}


def node_0038(state: str, flags: list[str]) -> dict[str, Any]:
    return {"name": "node1", "state": state, "state_flags": flags, "reason": ""}


def fake_restd(
    seen: list[httpx.Request], *, openapi: int = 200, node: dict[str, Any] | None = None
) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path == "/openapi/v3":
            paths = {"/slurm/v0.0.37/ping": {}, "/slurm/v0.0.38/ping": {}}
            return httpx.Response(openapi, json={"paths": paths} if openapi == 200 else {})
        if path == "/openapi":
            return httpx.Response(404, text="Unable find requested URL.")
        if path.startswith("/slurm/v0.0.38/"):
            if path.endswith("/job/5"):
                return httpx.Response(200, json={"meta": META_0038, "errors": [], "jobs": [JOB_0038]})
            if path.endswith("/node/node1"):
                nodes = [node or node_0038("allocated", [])]
                return httpx.Response(200, json={"meta": META_0038, "errors": [], "nodes": nodes})
            return httpx.Response(200, json={"meta": META_0038, "errors": []})
        return httpx.Response(404, text="Unable find requested URL.")

    return httpx.MockTransport(handle)


async def test_every_request_carries_user_and_token_and_no_requeue_is_sent() -> None:
    seen: list[httpx.Request] = []
    token = jwt(time.time() + 600)
    client = SlurmRestClient(URL, "tg", TokenSource(token=SecretStr(token)), "c", transport=fake_restd(seen))
    try:
        assert (await client.start()).name == "v0.0.38"
        with pytest.raises(UnsupportedOperationError):
            await client.requeue_hold("5", expected_restarts=0)
    finally:
        await client.close()
    assert all(r.headers["X-SLURM-USER-NAME"] == "tg" for r in seen)
    assert all(r.headers["X-SLURM-USER-TOKEN"] == token for r in seen)
    assert {r.method for r in seen} == {"GET"}  # reads only: nothing that could change Slurm


async def test_a_job_on_a_failing_node_waits_for_slurms_own_requeue() -> None:
    """Slurm requeues a --requeue job itself when it sets the node DOWN: the step is retried meanwhile."""
    seen: list[httpx.Request] = []
    transport = fake_restd(seen, node=node_0038("allocated", ["NOT_RESPONDING"]))
    client = SlurmRestClient(URL, "tg", TokenSource(token=SecretStr("t.t.t")), "c", transport=transport)
    try:
        with pytest.raises(SlurmRestError, match="waiting for Slurm to requeue it") as caught:
            await client.requeue_hold("5", expected_restarts=0)
    finally:
        await client.close()
    assert caught.value.retryable and "node1" in str(caught.value)
    assert {r.method for r in seen} == {"GET"}


async def test_without_an_openapi_document_versions_are_probed() -> None:
    seen: list[httpx.Request] = []
    client = SlurmRestClient(
        URL, "tg", TokenSource(token=SecretStr("t.t.t")), "c", transport=fake_restd(seen, openapi=404)
    )
    try:
        assert (await client.start()).name == "v0.0.38"
    finally:
        await client.close()
    assert client.served == ["v0.0.38"]


async def test_connection_failures_are_retryable_and_never_show_the_token() -> None:
    token = jwt(time.time() + 600)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = SlurmRestClient(
        URL, "tg", TokenSource(token=SecretStr(token)), "c", transport=httpx.MockTransport(refuse)
    )
    try:
        with pytest.raises(Exception) as caught:
            await client.snapshot()
    finally:
        await client.close()
    assert getattr(caught.value, "retryable", False) and token not in str(caught.value)
