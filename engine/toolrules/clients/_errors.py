"""The error a model client raises: a call to a model that failed, carrying its ToolError.

    ToolrulesError
     └── ProviderError        a model provider could not be reached or refused the call:
                              .tool_error (code RATE_LIMIT, NETWORK, TIMEOUT, AUTH ...),
                              .status, .retry_after, .provider, .unanswered

`ToolError.from_exception(exc)` returns the carried error unchanged, so a loop that maps
any exception to a ToolError gets the provider's code and message. Messages never hold
the API key (clients scrub it before an error is built).
"""

from __future__ import annotations

from typing import Any

from .._errors import ToolrulesError
from ..calls._tool_errors import ToolError, ToolErrorCode

__all__ = ["ProviderError"]


class ProviderError(ToolrulesError):
    """A failed model call. `code` is the ToolError code; `str()` reads
    `[code] provider: message` (with the HTTP status when there was one)."""

    def __init__(self, tool_error: ToolError, *, provider: str, status: int | None = None,
                 retry_after: float | None = None, attempts: int = 1,
                 unanswered: bool = False):
        self.tool_error = tool_error
        self.provider = provider
        self.status = status
        self.retry_after = retry_after
        self.attempts = attempts
        # the server never began an answer: no connection, or one closed before any byte
        # of a reply - the request may go to another server of the same model
        self.unanswered = unanswered
        super().__init__(self._text())

    def _text(self) -> str:
        status = f" (HTTP {self.status})" if self.status is not None else ""
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        return f"[{self.code.name}] {self.provider}{status}{tries}: {self.tool_error.message}"

    @property
    def code(self) -> ToolErrorCode:
        return ToolErrorCode(self.tool_error.code)

    @property
    def message(self) -> str:
        """The provider's message (or what went wrong on the way to it)."""
        return self.tool_error.message

    @property
    def recoverable(self) -> bool:
        return self.tool_error.recoverable

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.tool_error, self.provider, self.status, self.retry_after,
                           self.attempts, self.unanswered))


def _rebuild(tool_error: ToolError, provider: str, status: int | None,
             retry_after: float | None, attempts: int, unanswered: bool = False
             ) -> ProviderError:
    return ProviderError(tool_error, provider=provider, status=status, retry_after=retry_after,
                         attempts=attempts, unanswered=unanswered)
