"""Executing tools: the registry, the policy-enforcing executor, the workspace jail, the
built-in tools and the audit log, with the dispatcher's size guards and its envelope
`{ok, data, warnings, errors}`; the tool loop that carries a task to a final answer, its
events, trace and replay; the chat session on top of it.

Policies and built-in tool definitions are rules (rules/policies/, rules/tools/);
this package enforces them around real files and processes.
"""

from __future__ import annotations

from ..calls._policy import Decision, Policy, PolicyRefusal, policy_rules
from ._audit import AuditLog, sanitize_arguments
from ._builtins import builtin_tools
from ._context import ToolContext, ToolFailure
from ._events import STOP_REASONS, LoopEvent, LoopEventType, LoopOutcome
from ._executor import RateLimiter, ToolExecutor, envelope_of
from ._jail import Jail
from ._loop import TOOL_USE_MODES, ToolLoop
from ._registry import RegisteredTool, ToolRegistry, parse_docstring
from ._replay import Divergence, ReplayReport, replay, turns_from_trace
from ._session import ChatSession, ModelInfo, ModelSwitch, capability_changes
from ._trace import Trace

__all__ = [
    "STOP_REASONS",
    "TOOL_USE_MODES",
    "AuditLog",
    "ChatSession",
    "Decision",
    "Divergence",
    "Jail",
    "LoopEvent",
    "LoopEventType",
    "LoopOutcome",
    "ModelInfo",
    "ModelSwitch",
    "Policy",
    "PolicyRefusal",
    "RateLimiter",
    "RegisteredTool",
    "ReplayReport",
    "ToolContext",
    "ToolExecutor",
    "ToolFailure",
    "ToolLoop",
    "ToolRegistry",
    "Trace",
    "builtin_tools",
    "capability_changes",
    "envelope_of",
    "parse_docstring",
    "policy_rules",
    "replay",
    "sanitize_arguments",
    "turns_from_trace",
]
