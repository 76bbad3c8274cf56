"""Schema migrations of the audit store (Alembic), run when a store opens and by `trainguard audit migrate`.

- An empty database is built by the migrations from the baseline up.
- A database created by the `create_all` code of earlier releases (tables, no `alembic_version`) holds
  exactly the baseline schema: it is stamped at the baseline, then upgraded.
- Several units starting at once (API, control and cluster workers) take turns under a lock: a named
  lock (GET_LOCK) on MySQL/MariaDB, whose DDL is not transactional; a lock file beside a SQLite database.
  The first one migrates, the others find the database at head. This replaces the race of `create_all`
  (`Table ... already exists`) rather than retrying around it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from trainguard.audit.tables import ALL_TABLES

SCRIPT_LOCATION = "trainguard.audit:migrations"
BASELINE = "0001_baseline"
LOCK_TIMEOUT_S = 120
_MYSQL = {"mysql", "mariadb"}


@dataclass(frozen=True)
class MigrationReport:
    before: str | None  # revision found (None: empty, or created by create_all before migrations)
    after: str
    stamped: bool = False  # a pre-migrations database was recognised and stamped at the baseline

    @property
    def changed(self) -> bool:
        return self.before != self.after


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    if head is None:
        raise RuntimeError("no audit-store migrations found (is the package installed completely?)")
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> MigrationReport:
    """Bring the database to the newest schema; cheap (one SELECT) when it already is."""
    head = head_revision()
    before = current_revision(engine)
    if before == head:
        return MigrationReport(before=before, after=head)
    with _locked(engine) as conn:
        before = MigrationContext.configure(conn).get_current_revision()  # another unit may have done it
        if before == head:
            return MigrationReport(before=before, after=head)
        stamped = False
        cfg = _config(conn)
        if before is None and set(inspect(conn).get_table_names()) & {t.name for t in ALL_TABLES}:
            command.stamp(cfg, BASELINE)
            stamped = True
        command.upgrade(cfg, "head")
        conn.commit()
    return MigrationReport(before=before, after=head, stamped=stamped)


@contextlib.contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    if engine.dialect.name in _MYSQL:
        with engine.connect() as conn:
            database = conn.exec_driver_sql("SELECT DATABASE()").scalar()
            name = f"trainguard_migrate_{database}"[:64]
            got = conn.exec_driver_sql("SELECT GET_LOCK(%s, %s)", (name, LOCK_TIMEOUT_S)).scalar()
            conn.commit()
            if got != 1:
                why = Exception(f"no migration lock within {LOCK_TIMEOUT_S} s")
                raise OperationalError("GET_LOCK", (name,), why)
            try:
                yield conn
            finally:
                conn.exec_driver_sql("SELECT RELEASE_LOCK(%s)", (name,))
                conn.commit()
        return
    database = engine.url.database or ""
    if (
        engine.dialect.name == "sqlite"
        and database not in ("", ":memory:")
        and not database.startswith("file::memory:")
    ):
        lock_path = Path(database).expanduser().with_name(Path(database).name + ".migrate-lock")
        with lock_path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                with engine.connect() as conn:
                    yield conn
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    with engine.connect() as conn:  # in memory: one process only
        yield conn
