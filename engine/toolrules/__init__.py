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
)
from ._types import (
    Capability,
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

__all__ = [
    "Capability",
    "CapabilityError",
    "Engine",
    "InputTooLargeError",
    "Message",
    "ModelSpec",
    "ParseError",
    "ParsedResponse",
    "Problem",
    "RuleError",
    "SchemaError",
    "StreamChunk",
    "StreamChunkType",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolrulesError",
    "UnknownRuleError",
    "__version__",
    "load",
]
