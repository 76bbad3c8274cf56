"""Alembic migrations of the audit store (script location `trainguard.audit:migrations`).

Applied by `trainguard.audit.migrate.upgrade` when a store opens and by `trainguard audit migrate`.
A new revision: `alembic -c trainguard/audit/migrations/alembic.ini revision -m "..."`, then write the
upgrade by hand (portable between SQLite and MySQL/MariaDB: batch mode for SQLite ALTERs).
"""
