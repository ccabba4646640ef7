"""What a running tool may know about its call: the workspace jail, the policy, the trust
level. A handler asks for it by annotating a parameter with `ToolContext`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._types import ToolCall
from ..calls._policy import Policy, PolicyRefusal

if TYPE_CHECKING:
    from ._jail import Jail

__all__ = ["ToolContext", "ToolFailure"]


@dataclass(frozen=True)
class ToolContext:
    """Handed to handlers that declare a `ToolContext` parameter (the built-in tools do)."""

    call: ToolCall
    policy: Policy
    trust: str
    workspace: Path | None = None
    jail: Jail | None = None
    timeout: float = 30.0
    """Seconds this call may run (already capped by the policy)."""
    dry_run: bool = False
    engine: Any = None
    bytes_budget: int | None = None
    """Bytes file tools may still write this session (None: no limit)."""
    stats: dict[str, int] = field(default_factory=dict)
    """Counters a handler reports back (``bytes_written``), read by the rate limits."""

    def require_jail(self) -> Jail:
        if self.jail is None:
            raise PolicyRefusal("PERMISSION_DENIED", "workspace",
                                f"{self.call.name} needs a workspace; create the executor "
                                "with workspace=...")
        return self.jail


class ToolFailure(Exception):
    """Raise from a handler to fail with a specific envelope code (TIMEOUT, ...) and a
    message for the model, instead of the generic mapping of rules/errors.yaml."""

    def __init__(self, error: str, message: str, **details: Any):
        super().__init__(message)
        self.error = error
        self.message = message
        self.details = details
