"""A CLI command given no reachable audit store says so and fails: no silent ./var/audit.db, no "no
events" from an empty store that is not the deployment's (SQLite files and the real MariaDB)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.mysql import temporary_mysql_database
from trainguard.audit import AuditStore
from trainguard.cli import main


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINGUARD_CONFIG", raising=False)
    monkeypatch.delenv("TRAINGUARD_AUDIT__URL", raising=False)
    (tmp_path / "tg.yaml").write_text("cluster:\n  name: lab\n")
    return tmp_path


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "list", "--job-id", "5"],
        ["audit", "workloads"],
        ["decide", "lab/5/1:0:1", "agree"],
    ],
)
def test_no_audit_url_fails_clearly_and_creates_nothing(
    argv: list[str], isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", "tg.yaml", *argv]) == 2
    err = capsys.readouterr().err
    assert "no audit store at var/audit.db" in err and "TRAINGUARD_AUDIT__URL" in err
    assert not (isolated / "var").exists()


def test_unreachable_server_fails_without_showing_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRAINGUARD_AUDIT__URL", "mysql+pymysql://tg:hunter2-secret@127.0.0.1:1/tg")
    assert main(["--config", "tg.yaml", "audit", "workloads"]) == 2
    err = capsys.readouterr().err
    assert "is unreachable" in err and "Can't connect" in err
    assert "hunter2-secret" not in err and "tg:***@127.0.0.1:1/tg" in err


def test_a_database_without_our_tables_is_not_an_empty_audit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with temporary_mysql_database() as url:
        monkeypatch.setenv("TRAINGUARD_AUDIT__URL", url)
        assert main(["--config", "tg.yaml", "audit", "list", "--job-id", "5"]) == 2
        assert "holds no TrainGuard audit tables" in capsys.readouterr().err
        AuditStore.from_url(url).close()  # what a unit does at start: now it is the audit
        assert main(["--config", "tg.yaml", "audit", "list", "--job-id", "5"]) == 0
        assert "no events" in capsys.readouterr().err


def test_an_existing_sqlite_audit_still_reads(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = isolated / "empty.db"
    empty.touch()  # a file that is not an audit store
    monkeypatch.setenv("TRAINGUARD_AUDIT__URL", f"sqlite:///{empty}")
    assert main(["--config", "tg.yaml", "audit", "workloads"]) == 2
    assert "holds no TrainGuard audit tables" in capsys.readouterr().err
    AuditStore.from_url(f"sqlite:///{isolated / 'audit.db'}").close()
    monkeypatch.setenv("TRAINGUARD_AUDIT__URL", f"sqlite:///{isolated / 'audit.db'}")
    assert main(["--config", "tg.yaml", "audit", "workloads"]) == 0
