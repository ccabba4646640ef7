"""Lint cross-checks of rules/loop.yaml: placeholders are ones the loop fills, regexes
compile, the message provider exists."""

from __future__ import annotations

from typing import Any

from ._lint import check_regex
from ._loader import RuleSet
from ._schemas_loop import LOOP_PLACEHOLDERS
from ._tables import check_placeholders

__all__ = ["check_rules"]


def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    """Placeholders are ones the loop fills, regexes compile, the message provider exists."""
    rf = rs.get("table", "loop")
    if rf is None or ("table", "loop") in failed or not isinstance(rf.data, dict):
        return
    data = rf.data
    for section in ("messages", "retry_hints"):
        for key, text in (data.get(section) or {}).items():
            check_placeholders(rep, rf, (section, key), text, LOOP_PLACEHOLDERS)
    provider = data.get("message_provider")
    if isinstance(provider, str) and rs.get("provider", provider) is None:
        rep.error(rf, ("message_provider",), f"provider {provider!r} does not exist under "
                  "rules/providers/", "loop-provider")
    redact = data.get("redact") or {}
    check_regex(rep, rf, ("redact", "keys"), redact.get("keys"))
    for j, pattern in enumerate(redact.get("patterns") or []):
        check_regex(rep, rf, ("redact", "patterns", j), pattern)
