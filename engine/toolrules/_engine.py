"""The Engine: a validated rule set plus the parts compiled from it, one per concern.

`Engine` is a facade: each public method hands over to the part that owns the concern
(models, dialects, providers, emulation, calls). A part is built on first use and keeps
its compiled tables in the engine's cache; parts reach each other only through these
public methods. `load()` validates the rule set (`lint_rules`) before building an engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import MAX_TEXT_CHARS, Problem, RuleError
from .rules._loader import RuleSet, cache_read, cache_write, discover, layers_for

if TYPE_CHECKING:
    from ._types import Capability, Message, ModelSpec, ParsedResponse, Tool, ToolCall
    from .calls._part import CallCheck, CallsPart
    from .calls._tool_errors import ToolError
    from .calls._validation import ToolEnvelope, ValidationError, ValidationResult
    from .chat_template._inspect import TemplateReport
    from .chat_template._part import ChatTemplatePart
    from .chat_template._turns import Turns
    from .dialects._compile import Dialect
    from .dialects._parser import DialectsPart, TextParser
    from .emulation._chat_prompt import ChatPrompt
    from .emulation._grammar import CallGrammar
    from .emulation._part import EmulationPart
    from .emulation._rules import EmulationPrompt, EmulationStyle
    from .models._part import ModelsPart
    from .models._rules import Resolution
    from .providers._front import Front
    from .providers._part import ProvidersPart
    from .providers._rules import Provider
    from .rules._lint import CrossCheck

__all__ = ["Engine", "cross_checks", "lint_rules", "load"]

T = TypeVar("T")


def cross_checks() -> tuple[CrossCheck, ...]:
    """Every concern's cross-checks between rule files, in the order lint reports them.
    Imported here, when a rule set is linted: loading from the validated cache needs none
    of them."""
    from .calls._policy import check_rules as policies
    from .dialects._compile import check_rules as dialects
    from .emulation._chat_prompt import check_rules as chat
    from .emulation._rules import check_rules as emulation
    from .mcp._rules import check_rules as mcp
    from .models._rules import check_rules as models
    from .providers._constrained import check_rules as constrained
    from .providers._rules import check_rules as providers
    from .providers._transport import check_rules as transport
    from .rules._eval_rules import check_rules as evals
    from .rules._loop_rules import check_rules as loop
    from .rules._serve_rules import check_rules as serve
    from .rules._tables import check_rules as tables

    return (models, providers, transport, constrained, dialects, tables, emulation, chat,
            loop, policies, evals, serve, mcp)


def lint_rules(rs: RuleSet, thorough: bool = True) -> list[Problem]:
    """Every problem of the rule set: YAML, schemas and every concern's cross-checks."""
    from .rules._lint import lint

    return lint(rs, thorough, cross_checks())


class Engine:
    """Everything toolrules knows, compiled from rules/, templates/ and grammars/."""

    def __init__(self, ruleset: RuleSet):
        self.ruleset = ruleset
        self._compiled: dict[str, Any] = {}

    def _cached(self, key: str, build: Callable[[], T]) -> T:
        value = self._compiled.get(key)
        if value is None:
            value = self._compiled[key] = build()
        return value

    def __repr__(self) -> str:
        counts = ", ".join(f"{len(v)} {k}s" for k, v in sorted(self.ruleset.files.items()))
        return f"<toolrules.Engine {counts}>"

    # ------------------------------------------------------------ the parts

    @cached_property
    def _models(self) -> ModelsPart:
        from .models._part import ModelsPart

        return ModelsPart(self)

    @cached_property
    def _dialects(self) -> DialectsPart:
        from .dialects._parser import DialectsPart

        return DialectsPart(self)

    @cached_property
    def _providers(self) -> ProvidersPart:
        from .providers._part import ProvidersPart

        return ProvidersPart(self)

    @cached_property
    def _emulation(self) -> EmulationPart:
        from .emulation._part import EmulationPart

        return EmulationPart(self)

    @cached_property
    def _chat_template(self) -> ChatTemplatePart:
        from .chat_template._part import ChatTemplatePart

        return ChatTemplatePart(self)

    @cached_property
    def _calls(self) -> CallsPart:
        from .calls._part import CallsPart

        return CallsPart(self)

    # ------------------------------------------------------------ model ids and capabilities (rules/models)

    def resolve_model(self, model_id: str) -> Resolution:
        """Spec, capability and the rule lines that decided them."""
        return self._models.resolve_model(model_id)

    def parse_model_id(self, model_id: str) -> ModelSpec:
        """Take a model id apart: family, version, variant, size, provider, org ..."""
        return self._models.parse_model_id(model_id)

    def capability(self, model_id: str | Any) -> Capability:
        """What the model can do with tools (family rules, then overrides)."""
        return self._models.capability(model_id)

    # ------------------------------------------------------------ raw-text dialects (rules/dialects, grammars/)

    def dialect(self, name: str) -> Dialect:
        """The compiled dialect `name` (rules/dialects/<name>.yaml)."""
        return self._dialects.dialect(name)

    def dialect_for(self, model: str | None = None, dialect: str | None = None) -> str:
        """The dialect id used for `model`: its own, or the one its emulation style asks for."""
        return self._dialects.dialect_for(model, dialect)

    def text_parser(self, model: str | None = None, tools: Any = None, *,
                    dialect: str | None = None, generation_prompt: str | None = None,
                    repairs: Any = None, ids: str = "random", max_chars: int = MAX_TEXT_CHARS,
                    heuristics: bool = False) -> TextParser:
        """A parser for `model`'s raw output (its dialect), or for `dialect` directly."""
        return self._dialects.text_parser(model, tools, dialect=dialect, generation_prompt=generation_prompt, repairs=repairs, ids=ids, max_chars=max_chars, heuristics=heuristics)

    # ------------------------------------------------------------ provider wire formats (rules/providers)

    def providers(self) -> list[str]:
        """Every provider id the rules define."""
        return self._providers.providers()

    def provider_rules(self, provider: str) -> Provider:
        """The compiled rules of `provider` (its id, or an alias it declares)."""
        return self._providers.provider_rules(provider)

    def translate_tools(self, tools: Any, provider: str, model: str | None = None, *,
                        strict: Any = None, allowed_tools: Any = None,
                        denied_tools: Any = None) -> Any:
        """Tools -> the provider's tools field (schemas through the provider's pipeline,
        plus the model's simplification strategy). `strict`: True, False or 'auto'
        (default: the provider's)."""
        return self._providers.translate_tools(tools, provider, model, strict=strict, allowed_tools=allowed_tools, denied_tools=denied_tools)

    def tool_choice(self, choice: Any, provider: str, tools: Any = None, *,
                    model: str | None = None) -> Any:
        """The provider's wire value for `choice` (auto, none, required, a tool name), or
        None when the provider is to be sent no tool_choice."""
        return self._providers.tool_choice(choice, provider, tools, model=model)

    def build_request(self, provider: str, model: str | None, messages: Any, tools: Any = None,
                      tool_choice: Any = None, *, rewrites: list[Any] | None = None,
                      **options: Any) -> dict[str, Any]:
        """A complete request body for `provider`. Where the provider's server renders the
        model's own chat template, the conversation is fitted to its turn constraints
        first; `rewrites` (a list) receives each TurnRewrite made."""
        return self._providers.build_request(provider, model, messages, tools, tool_choice, rewrites=rewrites, **options)

    def tool_result_message(self, result: Any, provider: str) -> Any:
        """A tool result (ToolResult, tool Message or dict) as the provider's message."""
        return self._providers.tool_result_message(result, provider)

    def parse_request(self, body: Any, provider: str, *, omitted: dict[str, str] | None = None
                      ) -> tuple[list[Message], list[Tool], Any]:
        """A request body in `provider`'s format -> (messages, tools, tool_choice), neutral values.
        `omitted`: where tool entries the rules let a caller leave out (built-in tools the
        upstream cannot provide) are recorded (label -> reason); without it they refuse."""
        return self._providers.parse_request(body, provider, omitted=omitted)

    def parse_response(self, body: Any, provider: str, tools: Any = None,
                       model: str | None = None, *, strict: Any = None,
                       ids: str = "random") -> ParsedResponse:
        """A provider response body (dict, JSON text or SDK object) -> ParsedResponse.
        `ids`: how calls read from the text are numbered (random, or sequential)."""
        return self._providers.parse_response(body, provider, tools, model, strict=strict,
                                              ids=ids)

    def response_stream(self, provider: str, tools: Any = None, model: str | None = None, *,
                        strict: Any = None, ids: str = "random") -> Any:
        """A consumer of the provider's own stream events: `feed(event)` -> chunks,
        `close()` -> the rest, `result` -> the ParsedResponse (same as parse_response)."""
        return self._providers.response_stream(provider, tools, model, strict=strict, ids=ids)

    def build_response(self, parsed: Any, provider: str, model: str | None = None, *,
                       response_id: str | None = None, created: int | None = None,
                       usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """A ParsedResponse -> a response body in `provider`'s format (for proxies).
        `usage`: {input_tokens, cached_tokens, output_tokens} for the body's usage fields
        (input_tokens counts every prompt token, cached ones included)."""
        return self._providers.build_response(parsed, provider, model, response_id=response_id,
                                              created=created, usage=usage)

    def sends_native_tools(self, model: str | None, provider: str | None = None) -> bool:
        """Does build_request send `model` its tools natively, or the emulation prompt?
        `provider`: the API the request goes to (a server that renders the model's chat
        template may take the tools in the system prompt: capability turn_tools)."""
        return self._providers.sends_native_tools(model, provider)

    def simplify_tools(self, tools: Any, model: str | None = None, *,
                       strategy: str | None = None
                       ) -> tuple[tuple[Tool, ...], Callable[[ToolCall], ToolCall]]:
        """Tools through the model's schema-simplification strategy (capability
        `schema_strategy`) or the named `strategy` (rules/schema_strategies.yaml): the
        simplified tools, and a function that gives a call made against them back in the
        original schema's shape."""
        return self._providers.simplify_tools(tools, model, strategy=strategy)

    def front(self, provider: str) -> Front:
        """How a proxy serves `provider`'s API to clients: reading requests, error bodies,
        the stream's event grammar (the rule's `serve:` section)."""
        return self._providers.front(provider)

    def response_usage(self, body: Any, provider: str) -> dict[str, Any] | None:
        """The token counts an answer reports, as {input_tokens, cached_tokens,
        output_tokens} (the ones it has; input_tokens counts cached tokens too): a
        response body, or the list of a streamed answer's events."""
        return self._providers.response_usage(body, provider)

    # ------------------------------------------------------------ emulation prompts and templates (rules/emulation.yaml, templates/)

    def emulation_styles(self) -> tuple[EmulationStyle, ...]:
        """Every emulation template: generic styles, then trained formats."""
        return self._emulation.emulation_styles()

    def select_emulation(self, model: Any = None, *, capability: Capability | None = None,
                         style: str | None = None) -> EmulationStyle:
        """The template and answer dialect a model gets (rules/emulation.yaml `selection`),
        or the named `style` (a style name or a dialect with a trained prompt)."""
        return self._emulation.select_emulation(model, capability=capability, style=style)

    def emulation(self, tools: Any, model: Any = None, task_hint: str | None = None, *,
                  capability: Capability | None = None, style: str | None = None,
                  examples: bool | int | Sequence[Any] | None = None) -> EmulationPrompt:
        """The emulation prompt for `tools` and what it was built from (the dialect that
        reads the answer, the tools shown after the context budget, the examples)."""
        return self._emulation.emulation(tools, model, task_hint, capability=capability, style=style, examples=examples)

    def render_emulation(self, tools: Any, model: Any = None, task_hint: str | None = None, *,
                         capability: Capability | None = None, style: str | None = None,
                         examples: bool | int | Sequence[Any] | None = None) -> str:
        """A tool-calling prompt for a model without native tools (an emulation prompt)."""
        return self._emulation.render_emulation(tools, model, task_hint, capability=capability, style=style, examples=examples)

    def render_call(self, calls: ToolCall | Mapping[str, Any] | Sequence[Any], tools: Any = None,
                    model: Any = None, *, capability: Capability | None = None,
                    style: str | None = None) -> str:
        """Calls written in the format the model's emulation prompt asks for (the template's
        `call`/`calls` macro): what the model should have answered."""
        return self._emulation.render_call(calls, tools, model, capability=capability, style=style)

    def emulate_history(self, messages: Iterable[Any], tools: Any = None, model: Any = None, *,
                        capability: Capability | None = None,
                        style: str | None = None) -> list[Message]:
        """A conversation rewritten for a model without native tools: each assistant turn's
        calls are appended to its text in the format the model's prompt asks for, and tool
        results become text turns (rules/emulation.yaml `history`); consecutive results
        travel together so roles keep alternating."""
        return self._emulation.emulate_history(messages, tools, model, capability=capability, style=style)

    def normalize_turns(self, messages: Any, model: Any = None, *, tools: Any = None,
                        capability: Capability | None = None) -> Turns:
        """`messages` fitted to the turn constraints of `model`'s own chat template
        (capability turn_*: where system messages may stand, alternation, roles, content
        beside calls ...) as a server that renders that template needs them. No text is
        dropped; `Turns.rewrites` says what was moved and why."""
        return self._chat_template.normalize_turns(messages, model, tools=tools,
                                                   capability=capability)

    def render_template(self, name: str, context: Mapping[str, Any]) -> str:
        """Render any template of the rule set (sandboxed, strict) with `context`."""
        return self._emulation.render_template(name, context)

    def chat_prompt(self, messages: Any, model: Any = None, *, tools: Any = None,
                    tool_choice: Any = "auto", capability: Capability | None = None,
                    style: str | None = None, template: str | None = None,
                    embedded: str | None = None, add_generation_prompt: bool = True,
                    bos_token: str = "", eos_token: str = "") -> ChatPrompt:
        """The one prompt a raw-text model completes for this conversation: its turn
        format (capability `chat_template`, or `template`, or a template `embedded` in its
        weights) over the conversation as an emulated model sees it - the emulation prompt
        for `tools` with the system text, earlier calls and results written as text. Comes
        with the turn's stop strings and the dialect that reads the answer."""
        return self._emulation.chat_prompt(messages, model, tools=tools, tool_choice=tool_choice, capability=capability, style=style, template=template, embedded=embedded, add_generation_prompt=add_generation_prompt, bos_token=bos_token, eos_token=eos_token)

    def inspect_template(self, source: str, *, bos_token: str = "", eos_token: str = "",
                         origin: str = "template") -> TemplateReport:
        """What a model's own chat template (untrusted Jinja: a file, a GGUF's
        tokenizer.chat_template, a server's) enforces, drops and writes, found by rendering
        probe conversations through it in the server-like sandbox: the constraints it
        raises on (with its own words) and the texts it silently drops, as capability
        turn_* fields; the dialect its tool calls read back in exactly; its reasoning
        markers and switches; how it renders tool results. `bos_token`/`eos_token` as the
        server passes them. Raises TemplateRaised when the template does not render a
        one-message conversation (a syntax error names its line)."""
        return self._chat_template.inspect_template(source, bos_token=bos_token,
                                                    eos_token=eos_token, origin=origin)

    def call_grammar(self, tools: Any, model: Any = None, *, format: str = "gbnf",
                     tool_choice: Any = "auto", capability: Capability | None = None,
                     style: str | None = None) -> CallGrammar | None:
        """Constrained decoding for `tools`: the grammar that admits only a valid call in
        the format `model`'s emulation prompt asks for (its markers, keys and arguments
        typed by each tool's schema). `format`: gbnf (llama.cpp grammars) or json_schema
        (servers that take a schema: the call's JSON object alone). `tool_choice`:
        required or a tool name - one call; auto - a call or free text the dialect keeps
        as text (GBNF only; json_schema gives None); none - None (no constraint)."""
        return self._emulation.call_grammar(tools, model, format=format, tool_choice=tool_choice, capability=capability, style=style)

    def optimize_tool_definitions(self, tools: Any, capability: Capability | str | None = None,
                                  task_hint: str | None = None) -> tuple[Tool, ...]:
        """See toolrules.optimize_tool_definitions."""
        return self._emulation.optimize_tool_definitions(tools, capability, task_hint)

    def format_validation_errors_for_retry(self, errors: Iterable[ValidationError],
                                           call: Any = None, tools: Any = None, *,
                                           model: Any = None, capability: Capability | None = None,
                                           style: str | None = None) -> str:
        """The message that asks the model to fix its call (templates/feedback/), with a
        corrected example call when `call` and `tools` are given: written in the model's
        emulation format when the model has no native tools (or `style` is given), else
        as a JSON object."""
        return self._emulation.format_validation_errors_for_retry(errors, call, tools, model=model, capability=capability, style=style)

    # ------------------------------------------------------------ checking calls: validation, tool errors, the dispatcher (rules/validation.yaml, errors.yaml)

    def check_tool_call(self, call: Any, tools: Any, *, coerce: Any = None) -> ValidationResult:
        """Validate one call: the (coerced) call, its errors, the coercions applied."""
        return self._calls.check_tool_call(call, tools, coerce=coerce)

    def validate_tool_call(self, call: Any, tools: Any, *, coerce: Any = None) -> list[ValidationError]:
        """Structured errors for one call (empty when valid)."""
        return self._calls.validate_tool_call(call, tools, coerce=coerce)

    def corrected_call(self, call: Any, tools: Any) -> ToolCall | None:
        """The call with its errors fixed (valid values kept, the rest from the schema),
        under the closest tool name when the name is unknown; None if no tool fits."""
        return self._calls.corrected_call(call, tools)

    def check_tool_calls(self, calls: Any, tools: Any, model: Any = None, *,
                         capability: Capability | None = None, attempt: int = 1,
                         coerce: Any = None, max_attempts: int | None = None,
                         retry: bool | None = None, style: str | None = None) -> CallCheck:
        """Validate a response's calls before execution (validate-and-retry)."""
        return self._calls.check_tool_calls(calls, tools, model, capability=capability, attempt=attempt, coerce=coerce, max_attempts=max_attempts, retry=retry, style=style)

    def validate_with_retry(self, generate: Callable[[str | None], Any], tools: Any,
                            model: Any = None, *, capability: Capability | None = None,
                            coerce: Any = None, max_attempts: int | None = None,
                            retry: bool | None = None) -> CallCheck:
        """Ask `generate(feedback)` for calls until they validate or attempts run out."""
        return self._calls.validate_with_retry(generate, tools, model, capability=capability, coerce=coerce, max_attempts=max_attempts, retry=retry)

    def tool_error(self, exc: BaseException, tool_name: str) -> ToolError:
        """ToolError.from_exception through this engine's rules/errors.yaml."""
        return self._calls.tool_error(exc, tool_name)

    def dispatch_tool_call(self, call: Any, tools: Any, execute: Any, *, coerce: Any = None,
                           max_tool_args_bytes: int | None = None,
                           max_tool_output_bytes: int | None = None) -> ToolEnvelope:
        """Validate, execute and wrap one call in the envelope `{ok, data, warnings, errors}`."""
        return self._calls.dispatch_tool_call(call, tools, execute, coerce=coerce, max_tool_args_bytes=max_tool_args_bytes, max_tool_output_bytes=max_tool_output_bytes)

    def guard_tool_output(self, output: Any, *, max_tool_output_bytes: int | None = None,
                          warnings: Sequence[str] = ()) -> ToolEnvelope:
        """`{ok: true, data: output}`, or TOOL_OUTPUT_TOO_LARGE when output is too big."""
        return self._calls.guard_tool_output(output, max_tool_output_bytes=max_tool_output_bytes, warnings=warnings)


def load(paths: Sequence[str | os.PathLike[str]] | None = None, *, use_env: bool = True,
         cache: bool = True) -> Engine:
    """Load the bundled rules, TOOLRULES_PATH overlays, then `paths`.

    Returns a complete engine or raises one RuleError listing every problem.
    """
    rs = discover(layers_for(paths, use_env=use_env))
    if not (cache and cache_read(rs)):
        problems = lint_rules(rs, thorough=False)
        if any(p.level == "error" for p in problems):
            raise RuleError(problems)
        if cache:
            cache_write(rs)
    return Engine(rs)

