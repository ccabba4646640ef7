"""toolrules: tool calling that works the same across every model and provider.

Everything that differs between models lives in rules/ (YAML), templates/ (Jinja) and
grammars/ (Lark); this package is the small engine that interprets them.

    import toolrules
    engine = toolrules.load()
    engine.capability("claude-3.5-sonnet")
"""

from ._engine import Engine, load
from ._errors import (
    CapabilityError,
    InputTooLargeError,
    ParseError,
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
from ._version import __version__
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
from .calls._response_format import (
    ResponseFormat,
    ToolResultConfig,
    TruncatedResult,
    format_list_result,
    truncate_result,
)
from .calls._selection import optimize_tool_definitions
from .calls._tool_errors import ToolError, ToolErrorCode, get_retry_strategy, should_retry
from .calls._validation import ToolEnvelope, ValidationError, ValidationResult
from .clients import LocalModel, ModelClient, ScriptedModel
from .clients._connect import connect
from .clients._errors import ProviderError
from .emulation._chat import ChatPrompt
from .emulation._grammar import CallGrammar
from .emulation._inspect import TemplateReport
from .emulation._part import build_emulation_prompt
from .emulation._rules import EmulationPrompt, EmulationStyle
from .runtime import (
    LoopEvent,
    LoopEventType,
    LoopOutcome,
    Policy,
    ToolContext,
    ToolExecutor,
    ToolFailure,
    ToolLoop,
    ToolRegistry,
    builtin_tools,
)

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
    "Message",
    "ModelClient",
    "ModelSpec",
    "ParseError",
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
    "plan_parallel_execution",
    "should_retry",
    "truncate_result",
    "validate_tool_call",
    "validate_tool_calls",
]
