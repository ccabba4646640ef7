"""Executing tools: the registry, the policy-enforcing executor, the workspace jail, the
built-in tools and the audit log (seed 002 RFC-012, seed 003).

Policies and built-in tool definitions are rules (rules/policies/, rules/tools/);
this package enforces them around real files and processes.
"""

from __future__ import annotations

from ..calls._policy import Decision, Policy, PolicyRefusal, policy_rules
from ._audit import AuditLog, sanitize_arguments
from ._builtins import builtin_tools
from ._context import ToolContext, ToolFailure
from ._executor import RateLimiter, ToolExecutor, envelope_of
from ._jail import Jail
from ._registry import RegisteredTool, ToolRegistry, parse_docstring

__all__ = [
    "AuditLog",
    "Decision",
    "Jail",
    "Policy",
    "PolicyRefusal",
    "RateLimiter",
    "RegisteredTool",
    "ToolContext",
    "ToolExecutor",
    "ToolFailure",
    "ToolRegistry",
    "builtin_tools",
    "envelope_of",
    "parse_docstring",
    "policy_rules",
    "sanitize_arguments",
]
