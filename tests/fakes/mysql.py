"""Throwaway MariaDB/MySQL databases for tests, so no test touches rows that others keep in `test`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url

DEFAULT_SERVER = "mysql+pymysql://root@127.0.0.1:3306"


class DatabaseUnavailable(RuntimeError):
    pass


@contextmanager
def temporary_mysql_database(server_url: str = DEFAULT_SERVER) -> Iterator[str]:
    """Create `tg_test_<random>`, yield its SQLAlchemy URL, drop it afterwards."""
    import pymysql

    url = make_url(server_url)
    try:
        admin = pymysql.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            connect_timeout=2,
            autocommit=True,
        )
    except pymysql.MySQLError as err:
        raise DatabaseUnavailable(f"cannot reach {url.host}:{url.port}: {err}") from err
    # The name is ours (hex digits only), never user input, so formatting it into DDL is safe.
    name = f"tg_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()
