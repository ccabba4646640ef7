"""toolrules: tool calling that works the same across every model and provider.

Everything that differs between models lives in rules/ (YAML), templates/ (Jinja) and
grammars/ (Lark); this package is the small engine that interprets them.

    import toolrules
    engine = toolrules.load()
    engine.capability("claude-3.5-sonnet")

Importing the package is cheap: each public name below is imported from its module on
first use (module `__getattr__`), so `import toolrules; toolrules.load()` loads neither
the runtime, the clients, the proxy nor their dependencies (asyncio, httpx, jsonschema,
Jinja, llama.cpp ...) until a program uses them. Type checkers read the imports under
TYPE_CHECKING.
"""

import typing as _typing
from importlib import import_module as _import_module

from ._version import __version__
from .rules import _default as _default_engine

if _typing.TYPE_CHECKING:
    from ._engine import (
        Engine,
        load,
    )
    from ._errors import (
        CapabilityError,
        InputTooLargeError,
        McpError,
        ParseError,
        ParseTimeoutError,
        Problem,
        RuleError,
        SchemaError,
        ToolrulesError,
        UnknownRuleError,
        UnsupportedContentError,
    )
    from ._types import (
        Capability,
        ContentPart,
        Message,
        ModelSpec,
        ParsedResponse,
        StreamChunk,
        StreamChunkType,
        Tool,
        ToolCall,
        ToolResult,
    )
    from .calls._engineering import (
        ExecutionPlan,
        ToolClassification,
        ToolDescriptionQuality,
        audit_tool_description,
        audit_tool_set,
        classify_tool,
        enhance_tool_description,
        plan_parallel_execution,
    )
    from .calls._namespacing import (
        extract_namespace,
        filter_tools_by_task_namespaces,
        group_tools_by_namespace,
        namespace_tools,
    )
    from .calls._part import (
        CallCheck,
        dispatch_tool_call,
        format_validation_errors_for_retry,
        validate_tool_call,
        validate_tool_calls,
    )
    from .calls._policy import (
        Policy,
    )
    from .calls._response_format import (
        ResponseFormat,
        ToolResultConfig,
        TruncatedResult,
        format_list_result,
        truncate_result,
    )
    from .calls._selection import (
        optimize_tool_definitions,
    )
    from .calls._tool_errors import (
        ToolError,
        ToolErrorCode,
        get_retry_strategy,
        should_retry,
    )
    from .calls._validation import (
        ToolEnvelope,
        ValidationError,
        ValidationResult,
    )
    from .chat_template._inspect import (
        TemplateReport,
    )
    from .chat_template._turns import (
        TurnRewrite,
        Turns,
    )
    from .clients._base import (
        ModelClient,
    )
    from .clients._connect import (
        connect,
    )
    from .clients._errors import (
        ProviderError,
    )
    from .clients._local import (
        LocalModel,
    )
    from .clients._scripted import (
        ScriptedModel,
    )
    from .dialects._parser import (
        parse_deadline,
    )
    from .emulation._chat_prompt import (
        ChatPrompt,
    )
    from .emulation._grammar import (
        CallGrammar,
    )
    from .emulation._part import (
        build_emulation_prompt,
    )
    from .emulation._rules import (
        EmulationPrompt,
        EmulationStyle,
    )
    from .runtime._builtins import (
        builtin_tools,
    )
    from .runtime._context import (
        ToolContext,
        ToolFailure,
    )
    from .runtime._events import (
        LoopEvent,
        LoopEventType,
        LoopOutcome,
    )
    from .runtime._executor import (
        ToolExecutor,
    )
    from .runtime._loop import (
        ToolLoop,
    )
    from .runtime._registry import (
        ToolRegistry,
    )

# public name -> the module that defines it (imported on first use)
_LAZY: dict[str, str] = {
    "CallCheck": ".calls._part",
    "CallGrammar": ".emulation._grammar",
    "Capability": "._types",
    "CapabilityError": "._errors",
    "ChatPrompt": ".emulation._chat_prompt",
    "ContentPart": "._types",
    "EmulationPrompt": ".emulation._rules",
    "EmulationStyle": ".emulation._rules",
    "Engine": "._engine",
    "ExecutionPlan": ".calls._engineering",
    "InputTooLargeError": "._errors",
    "LocalModel": ".clients._local",
    "LoopEvent": ".runtime._events",
    "LoopEventType": ".runtime._events",
    "LoopOutcome": ".runtime._events",
    "McpError": "._errors",
    "Message": "._types",
    "ModelClient": ".clients._base",
    "ModelSpec": "._types",
    "ParseError": "._errors",
    "ParseTimeoutError": "._errors",
    "ParsedResponse": "._types",
    "Policy": ".calls._policy",
    "Problem": "._errors",
    "ProviderError": ".clients._errors",
    "ResponseFormat": ".calls._response_format",
    "RuleError": "._errors",
    "SchemaError": "._errors",
    "ScriptedModel": ".clients._scripted",
    "StreamChunk": "._types",
    "StreamChunkType": "._types",
    "TemplateReport": ".chat_template._inspect",
    "Tool": "._types",
    "ToolCall": "._types",
    "ToolClassification": ".calls._engineering",
    "ToolContext": ".runtime._context",
    "ToolDescriptionQuality": ".calls._engineering",
    "ToolEnvelope": ".calls._validation",
    "ToolError": ".calls._tool_errors",
    "ToolErrorCode": ".calls._tool_errors",
    "ToolExecutor": ".runtime._executor",
    "ToolFailure": ".runtime._context",
    "ToolLoop": ".runtime._loop",
    "ToolRegistry": ".runtime._registry",
    "ToolResult": "._types",
    "ToolResultConfig": ".calls._response_format",
    "ToolrulesError": "._errors",
    "TruncatedResult": ".calls._response_format",
    "TurnRewrite": ".chat_template._turns",
    "Turns": ".chat_template._turns",
    "UnknownRuleError": "._errors",
    "UnsupportedContentError": "._errors",
    "ValidationError": ".calls._validation",
    "ValidationResult": ".calls._validation",
    "audit_tool_description": ".calls._engineering",
    "audit_tool_set": ".calls._engineering",
    "build_emulation_prompt": ".emulation._part",
    "builtin_tools": ".runtime._builtins",
    "classify_tool": ".calls._engineering",
    "connect": ".clients._connect",
    "dispatch_tool_call": ".calls._part",
    "enhance_tool_description": ".calls._engineering",
    "extract_namespace": ".calls._namespacing",
    "filter_tools_by_task_namespaces": ".calls._namespacing",
    "format_list_result": ".calls._response_format",
    "format_validation_errors_for_retry": ".calls._part",
    "get_retry_strategy": ".calls._tool_errors",
    "group_tools_by_namespace": ".calls._namespacing",
    "load": "._engine",
    "namespace_tools": ".calls._namespacing",
    "optimize_tool_definitions": ".calls._selection",
    "parse_deadline": ".dialects._parser",
    "plan_parallel_execution": ".calls._engineering",
    "should_retry": ".calls._tool_errors",
    "truncate_result": ".calls._response_format",
    "validate_tool_call": ".calls._part",
    "validate_tool_calls": ".calls._part",
}

__all__ = [
    "CallCheck",
    "CallGrammar",
    "Capability",
    "CapabilityError",
    "ChatPrompt",
    "ContentPart",
    "EmulationPrompt",
    "EmulationStyle",
    "Engine",
    "ExecutionPlan",
    "InputTooLargeError",
    "LocalModel",
    "LoopEvent",
    "LoopEventType",
    "LoopOutcome",
    "McpError",
    "Message",
    "ModelClient",
    "ModelSpec",
    "ParseError",
    "ParseTimeoutError",
    "ParsedResponse",
    "Policy",
    "Problem",
    "ProviderError",
    "ResponseFormat",
    "RuleError",
    "SchemaError",
    "ScriptedModel",
    "StreamChunk",
    "StreamChunkType",
    "TemplateReport",
    "Tool",
    "ToolCall",
    "ToolClassification",
    "ToolContext",
    "ToolDescriptionQuality",
    "ToolEnvelope",
    "ToolError",
    "ToolErrorCode",
    "ToolExecutor",
    "ToolFailure",
    "ToolLoop",
    "ToolRegistry",
    "ToolResult",
    "ToolResultConfig",
    "ToolrulesError",
    "TruncatedResult",
    "TurnRewrite",
    "Turns",
    "UnknownRuleError",
    "UnsupportedContentError",
    "ValidationError",
    "ValidationResult",
    "__version__",
    "audit_tool_description",
    "audit_tool_set",
    "build_emulation_prompt",
    "builtin_tools",
    "classify_tool",
    "connect",
    "dispatch_tool_call",
    "enhance_tool_description",
    "extract_namespace",
    "filter_tools_by_task_namespaces",
    "format_list_result",
    "format_validation_errors_for_retry",
    "get_retry_strategy",
    "group_tools_by_namespace",
    "load",
    "namespace_tools",
    "optimize_tool_definitions",
    "parse_deadline",
    "plan_parallel_execution",
    "should_retry",
    "truncate_result",
    "validate_tool_call",
    "validate_tool_calls",
]


def _load_default_engine() -> _typing.Any:
    from ._engine import load as _load

    return _load()


# module-level helpers (validate_tool_call, ToolError.from_exception ...) use this engine
# when given none; it is built on first use
_default_engine.set_default_factory(_load_default_engine)


# subpackages reachable as attributes (`toolrules.runtime.envelope_of`), imported on use
_SUBPACKAGES = frozenset({"bench", "calls", "cli", "clients", "dialects", "emulation", "evals",
                          "golden", "mcp", "models", "providers", "rules", "runtime", "serve"})


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        if name in _SUBPACKAGES:
            return _import_module(f".{name}", __name__)
        raise AttributeError(f"module 'toolrules' has no attribute {name!r}")
    value = getattr(_import_module(module, __name__), name)
    globals()[name] = value  # the next access is a plain attribute lookup
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
