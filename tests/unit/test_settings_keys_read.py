"""Every settings key is read by the code: a documented key that nothing reads is a lie to operators
(issue 15 §2: watchdog.mode, watchdog.acknowledge_scheduler_actions and watchdog.environment_pattern were
documented, set by the Helm chart, and read by nothing).

A key counts as read when the production code (trainguard/, workflows/, activities/, workers/; not the
declarations themselves) accesses it as an attribute: `<anything>.<section>.<key>` (for example
`settings.watchdog.mode`), or `.<key>` in a module that names the key's settings class or one of its bases
(a function typed `logs: LogSettings` reading `logs.backend`), or, for a key of a nested section, `.<key>`
in a module that accesses that section (`cfg = settings.api.trusted_header` ... `cfg.default_role`).
Keys read dynamically are listed in
DYNAMIC with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from trainguard.settings import Section, Settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("trainguard", "workflows", "activities", "workers")

# key -> why it is read without a literal attribute access
DYNAMIC: dict[str, str] = {}


def settings_keys(model: type[BaseModel], prefix: str = "") -> list[tuple[str, type[BaseModel]]]:
    """(dotted key, class that declares it) for every leaf setting; sections are walked, not listed."""
    keys: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += settings_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append((f"{prefix}{name}", model))
    return keys


def sources(root: Path = ROOT) -> dict[Path, str]:
    files = [p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")]
    return {p: p.read_text() for p in files}


def class_names(model: type[BaseModel]) -> set[str]:
    skip = {Section, BaseModel}
    return (
        {c.__name__ for c in model.__mro__ if isinstance(c, type) and issubclass(c, BaseModel)}
        - {c.__name__ for c in skip}
        - {"BaseSettings"}
    )


def is_read(key: str, owner: type[BaseModel], texts: dict[Path, str]) -> bool:
    parts = key.split(".")
    leaf = parts[-1]
    qualified = re.compile(rf"\b{re.escape('.'.join(parts[-2:]))}\b") if len(parts) > 1 else None
    bare = re.compile(rf"\.{re.escape(leaf)}\b")
    names = class_names(owner)
    # a nested section's key (api.trusted_header.default_role) may be read off a local alias of the
    # section (`cfg = settings.api.trusted_header`): the section's attribute access counts as its mention.
    parent = re.compile(rf"\.{re.escape(parts[-2])}\b") if len(parts) > 2 else None
    for text in texts.values():
        if qualified is not None and qualified.search(text):
            return True
        if bare.search(text) and any(re.search(rf"\b{n}\b", text) for n in names):
            return True
        if parent is not None and bare.search(text) and parent.search(text):
            return True
    return False


def test_the_walk_sees_every_section() -> None:
    keys = {k for k, _ in settings_keys(Settings)}
    assert {"watchdog.mode", "cluster.ssh.host", "policy.retry_budget", "state_dir"} <= keys
    assert len(keys) > 60


def test_every_settings_key_is_read_by_the_code() -> None:
    texts = sources()
    unread = [k for k, owner in settings_keys(Settings) if k not in DYNAMIC and not is_read(k, owner, texts)]
    assert unread == [], f"settings keys that nothing reads (read them, or remove and undocument): {unread}"


def test_the_check_catches_an_unread_key() -> None:
    class Probe(Section):
        never_read_anywhere_xyz: int = 0

    assert not is_read("probe.never_read_anywhere_xyz", Probe, sources())


def test_dynamic_allowlist_names_real_keys() -> None:
    keys = {k for k, _ in settings_keys(Settings)}
    assert set(DYNAMIC) <= keys
