"""The JWT TrainGuard sends to slurmrestd: from the settings, or from a file re-read whenever it changes.

Sites rotate these tokens (`scontrol token lifespan=...` from a cron job or a Kubernetes secret), so a
file is re-read when its size, mtime or inode changes. The token is never logged or put in an error
message; only its expiry (the unverified `exp` claim) is reported.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from trainguard.slurm.restd_api import SlurmRestAuthError

PREFIX = "SLURM_JWT="  # what `scontrol token` prints; accepted in a token file as is


def claims(token: str) -> dict[str, Any]:
    """The payload of a JWT, unverified (slurmctld verifies it); {} when it is not a readable JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        doc = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, UnicodeDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _clean(text: str) -> str:
    token = text.strip()
    return token.removeprefix(PREFIX).strip()


@dataclass(frozen=True)
class _Seen:
    size: int
    mtime_ns: int
    inode: int


class TokenSource:
    """Exactly one of `token` (a SecretStr) or `token_file`."""

    def __init__(self, *, token: SecretStr | None = None, token_file: str | Path | None = None) -> None:
        if (token is None) == (token_file is None):
            raise ValueError("give exactly one of token or token_file")
        self._static = token
        self.file = Path(token_file).expanduser() if token_file is not None else None
        self._seen: _Seen | None = None
        self._cached = ""

    @property
    def rotates(self) -> bool:
        """A file may be replaced by a fresh token, so an expired one is worth retrying later."""
        return self.file is not None

    def __repr__(self) -> str:
        return f"TokenSource(file={str(self.file)!r})" if self.file else "TokenSource(token=**********)"

    def get(self, now: float | None = None) -> str:
        token = self._read()
        if not token:
            raise self._error("the slurmrestd token is empty")
        expires = claims(token).get("exp")
        if isinstance(expires, int | float) and expires <= (time.time() if now is None else now):
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
            raise self._error(f"the slurmrestd token expired at {when}")
        return token

    def _read(self) -> str:
        if self.file is None:
            assert self._static is not None
            return _clean(self._static.get_secret_value())
        try:
            st = os.stat(self.file)
            seen = _Seen(st.st_size, st.st_mtime_ns, st.st_ino)
            if seen != self._seen:
                self._cached = _clean(self.file.read_text())
                self._seen = seen
        except OSError as err:
            raise self._error(f"cannot read the slurmrestd token file {self.file}: {err.strerror}") from None
        return self._cached

    def _error(self, message: str) -> SlurmRestAuthError:
        return SlurmRestAuthError(("slurmrestd", "token"), None, message, retryable=self.rotates)
