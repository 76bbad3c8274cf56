"""Fuzz the advisor API against its own OpenAPI document: no input, valid or not, may cause a 5xx.

Runs in-process over ASGI (no server), on a SQLite store seeded with a recovery history, with
Temporal replaced by the store-backed control. Bounded examples keep it well under a minute.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

from tests.fakes.temporal_control import StoreTemporalControl
from trainguard.api.app import create_app
from trainguard.audit import AuditStore
from trainguard.audit.demo import seed_demo
from trainguard.settings import APISettings, AuditSettings, Settings

TOKEN = "fuzz-token"
_DB = Path(tempfile.mkdtemp(prefix="tg-fuzz-")) / "audit.db"
_STORE = AuditStore.from_url(f"sqlite:///{_DB}")
seed_demo(_STORE)
APP = create_app(
    Settings(api=APISettings(token=TOKEN), audit=AuditSettings(url=f"sqlite:///{_DB}")),
    store=_STORE,
    temporal=StoreTemporalControl(_STORE),
)

schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_errors_with_token(case: Any) -> None:
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code < 500, (case.method, case.formatted_path, case.query, response.text[:500])
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body, dict) and "error" in body and "detail" in body


@schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_mutations_without_token_are_refused(case: Any) -> None:
    response = case.call(headers={"Authorization": "Bearer not-the-token"})
    assert response.status_code < 500
    if case.method.upper() in ("PUT", "POST", "DELETE", "PATCH"):
        # Whatever else is wrong with the request, it must never be carried out.
        assert 400 <= response.status_code < 500, response.text[:300]
