"""`Part`: one concern of the Engine (models, dialects, providers ...), compiled lazily
from the engine's rule set. Parts reach each other only through the engine's public
methods, so each can be read, tested and replaced on its own."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._types import Capability, Message, ModelSpec, ToolCall

if TYPE_CHECKING:
    from ._loader import RuleSet

__all__ = ["EngineView", "Part"]

T = TypeVar("T")


class EngineView(Protocol):
    """What a part may use of the `Engine` it belongs to: the rule set, the compile cache
    and the public methods parts call on each other. The Engine sits above every part, so
    the parts name it through this protocol; results of higher layers (a parser, a
    resolution, an emulation style) are typed where those layers are used."""

    ruleset: RuleSet

    def _cached(self, key: str, build: Callable[[], T]) -> T: ...

    def capability(self, model_id: str | Any) -> Capability: ...

    def parse_model_id(self, model_id: str) -> ModelSpec: ...

    def resolve_model(self, model_id: str) -> Any: ...

    def text_parser(self, model: str | None = None, tools: Any = None, *,
                    dialect: str | None = None, generation_prompt: str | None = None,
                    repairs: Any = None, ids: str = "random", max_chars: int = ...,
                    heuristics: bool = False) -> Any: ...

    def select_emulation(self, model: Any = None, *, capability: Capability | None = None,
                         style: str | None = None) -> Any: ...

    def render_emulation(self, tools: Any, model: Any = None, task_hint: str | None = None, *,
                         capability: Capability | None = None, style: str | None = None,
                         examples: bool | int | Sequence[Any] | None = None) -> str: ...

    def emulate_history(self, messages: Iterable[Any], tools: Any = None, model: Any = None, *,
                        capability: Capability | None = None,
                        style: str | None = None) -> list[Message]: ...

    def emulation_styles(self) -> tuple[Any, ...]: ...

    def render_template(self, name: str, context: Any) -> str: ...

    def normalize_turns(self, messages: Any, model: Any = None, *, tools: Any = None,
                        capability: Capability | None = None) -> Any: ...

    def format_validation_errors_for_retry(self, errors: Iterable[Any],
                                           call: Any = None, tools: Any = None, *,
                                           model: Any = None, capability: Capability | None = None,
                                           style: str | None = None) -> str: ...

    def corrected_call(self, call: Any, tools: Any) -> ToolCall | None: ...


class Part:
    """Base of the engine's parts: the engine, its rule set and its compile cache."""

    __slots__ = ("engine", "ruleset")

    def __init__(self, engine: EngineView):
        self.engine = engine
        self.ruleset: RuleSet = engine.ruleset

    def _cached(self, key: str, build: Callable[[], T]) -> T:
        return self.engine._cached(key, build)

    def capability_for(self, model: Any, capability: Capability | None = None) -> Capability:
        """`capability` when given, else the model's (defaults when there is no model)."""
        if capability is not None:
            return capability
        if model is None:
            return Capability()
        return self.engine.capability(model)
