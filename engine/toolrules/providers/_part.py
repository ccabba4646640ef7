"""Engine methods for provider wire formats, in both directions.

Client side: translate_tools, tool_choice, build_request, parse_response,
tool_result_message, response_stream. Server (proxy) side: parse_request,
build_response. The provider is always a rule id from rules/providers/ (or one of its
`aliases`); everything provider-specific comes from that rule (`_providers`).
"""

from __future__ import annotations

import copy
import json
import time
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .._errors import (
    CapabilityError,
    ParseError,
    SchemaError,
    UnknownRuleError,
    UnsupportedContentError,
)
from .._types import Message, ParsedResponse, Tool, ToolCall, coerce_tools
from ..rules._part import Part
from ._front import (
    compile_front,
    fold_signature,
    iso_time,
    signature_in_id,
    unfold_signature,
    usage_view,
    wire_call_id,
)
from ._messages import (
    WireTools,
    choice_value,
    coerce_body,
    coerce_message,
    coerce_messages,
    content_parts,
    content_text,
    decode_call,
    derived_id,
    describe_part,
    locate_parts,
    normalize_choice,
    prepare_history,
    read_choice,
    read_history,
    read_wire_message,
    refuse_tools,
    wire_name,
    write_messages,
)
from ._rules import MESSAGE_TRANSFORMS, Expr, compile_provider, get_path, prune, set_path
from ._stream import ProviderStream, finish_call, merge_calls

if TYPE_CHECKING:
    from ._front import Front
    from ._rules import Provider
    from ._transforms import Pipeline, TransformedTool

__all__ = ["ProvidersPart"]

_CACHE_LIMIT = 8192
_STRICT_MODES = {True: "on", False: "off", None: None, "on": "on", "off": "off", "auto": "auto"}


class ProvidersPart(Part):
    """translate_tools / tool_choice / build_request / parse_response / ... per provider."""

    ruleset: Any
    _cached: Any
    capability: Any
    parse_model_id: Any

    # ------------------------------------------------------------ rules

    def providers(self) -> list[str]:
        """Every provider id the rules define."""
        return self.ruleset.ids("provider")

    def provider_rules(self, provider: str) -> Provider:
        """The compiled rules of `provider` (its id, or an alias it declares)."""
        compiled: dict[str, Provider] = self._cached("providers", dict)
        # the name as asked before (a proxy asks many a time a request)
        hit = compiled.get(provider) if isinstance(provider, str) else None
        if hit is not None:
            return hit
        key = str(provider).strip().lower()
        hit = compiled.get(key)
        if hit is None:
            ids = self.ruleset.ids("provider")
            rule_id = key if key in ids else self._provider_aliases().get(key)
            if rule_id is None:
                raise UnknownRuleError("provider", str(provider), ids)
            hit = compiled[key] = compile_provider(self.ruleset, rule_id)
        if isinstance(provider, str):
            compiled[provider] = hit
        return hit

    def _provider_aliases(self) -> dict[str, str]:
        def build() -> dict[str, str]:
            out = {}
            for rid in self.ruleset.ids("provider"):
                data = self.ruleset.get("provider", rid).data or {}
                for alias in data.get("aliases") or ():
                    out[str(alias).lower()] = rid
            return out
        return self._cached("provider_aliases", build)

    def _strategy(self, model: str | None, prov: Provider | None = None
                  ) -> tuple[str | None, Pipeline | None]:
        """(a cache key, the ops) for the pipeline's `strategy` slot: the model's schema
        simplification strategy, then - where `prov`'s server renders the model's chat
        template - the fixes that template needs on the schemas it renders
        (capability turn_tool_schema)."""
        from ._transforms import Pipeline, compile_pipeline

        if model is None:
            return None, None
        cap = self.engine.capability(model)
        name = cap.schema_strategy
        fixes = cap.turn_tool_schema if prov is not None and prov.renders_template else ()
        if not name and not fixes:
            return None, None
        table = self.ruleset.table("schema_strategies") or {}
        cache: dict[str, Pipeline] = self._cached("schema_strategies", dict)
        steps: list[Any] = []
        for kind, key in ([("strategies", name)] if name else []) + \
                [("template_fixes", f) for f in fixes]:
            entries = table.get(kind) or {}
            if key not in entries:
                raise UnknownRuleError("schema strategy" if kind == "strategies"
                                       else "template fix", key, list(entries))
            ck = key if kind == "strategies" else f"template_fixes:{key}"
            if ck not in cache:
                cache[ck] = compile_pipeline(entries[key].get("pipeline"))
            steps.extend(cache[ck].steps)
        if not fixes:
            return name, cache[str(name)]
        return f"{name or ''}+{'+'.join(fixes)}", Pipeline(tuple(steps))

    def _native(self, model: str | None, prov: Provider | None = None) -> bool:
        """Does the model call tools through the API? Ids no family rule knows are sent
        natively - the provider's API took the tools field; known families decide, and so
        does an explicit override for the id. Where `prov`'s server renders a chat template
        that moves its tool list between turns (capability turn_tools: system), the tools
        go in the leading system prompt instead."""
        if model is None:
            return True
        res = self.engine.resolve_model(model)
        if not res.spec.known and not res.overridden:
            return True
        cap = res.capability
        if prov is not None and prov.renders_template and cap.turn_tools == "system":
            return False
        return bool(cap.native_tools)

    # ------------------------------------------------------------ tools

    def _name_map(self, prov: Provider, tools: Iterable[Tool]) -> dict[str, str]:
        taken: set[str] = set()
        out: dict[str, str] = {}
        for t in tools:
            if t.name in out:
                raise SchemaError(f"two tools are named {t.name!r}")
            out[t.name] = w = wire_name(t.name, prov, taken)
            taken.add(w)
        return out

    def _strict_mode(self, prov: Provider, strict: Any, model: str | None) -> str:
        if strict not in _STRICT_MODES:
            raise ParseError(f"strict must be True, False, None or 'auto', not {strict!r}")
        mode = _STRICT_MODES[strict]
        if prov.strict_pipeline is None:
            if mode == "on":
                raise CapabilityError(f"provider {prov.id!r} has no strict schema mode")
            return "off"
        if mode is None:
            mode = prov.strict_default
            if mode == "off" and model is not None and self.engine.capability(model).needs_tool_schema_strict:
                mode = "auto"
        return mode

    def _transform(self, prov: Provider, tool: Tool, mode: str,
                   strategy: Pipeline | None) -> tuple[TransformedTool, bool]:
        base = prov.pipeline.with_strategy(strategy)
        if mode in ("on", "auto") and prov.strict_pipeline is not None:
            try:
                return (base + prov.strict_pipeline).run(tool.name, tool.description,
                                                         tool.parameters), True
            except SchemaError:
                if mode == "on":
                    raise
        return base.run(tool.name, tool.description, tool.parameters), False

    def _tool_entry(self, prov: Provider, tool: Tool, wname: str, mode: str,
                    strategy: tuple[str | None, Pipeline | None]) -> tuple[TransformedTool, str]:
        """(transformed tool, wire tool as JSON text), cached per provider, mode, strategy
        and tool content. JSON text, so no caller can mutate the cache."""

        try:
            params_key = json.dumps(tool.parameters, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"tool {tool.name!r}: parameters are not JSON: {exc}") from None
        key = (prov.id, mode, strategy[0], tool.name, wname, tool.description, params_key)
        cache: dict[Any, Any] = self._cached("provider_tools", dict)
        hit = cache.get(key)
        if hit is None:
            tt, is_strict = self._transform(prov, tool, mode, strategy[1])
            desc = tt.description
            if prov.description_max and len(desc) > prov.description_max:
                desc = desc[:prov.description_max - 3].rstrip() + "..."
            view = {"name": wname, "description": desc or None, "parameters": tt.parameters,
                    "strict": is_strict}
            opaque = {id(tt.parameters)} if tt.parameters is not None else set()
            shaped = prune(prov.tool_shape(view), opaque)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            hit = cache[key] = (tt, json.dumps(shaped, ensure_ascii=False))
        return hit

    def _prepare_tools(self, prov: Provider, tools: tuple[Tool, ...], model: str | None,
                       strict: Any, names: dict[str, str] | None = None) -> list[Any]:
        """The wire tools (before the provider's `wrap`)."""
        if prov.max_tools and len(tools) > prov.max_tools:
            raise SchemaError(f"{len(tools)} tools; {prov.id} accepts at most {prov.max_tools} "
                              "per request (mask some with allowed_tools/denied_tools)")
        mode = self._strict_mode(prov, strict, model)
        strategy = self._strategy(model, prov)
        names = names if names is not None else self._name_map(prov, tools)
        return [json.loads(self._tool_entry(prov, t, names[t.name], mode, strategy)[1])
                for t in tools]

    def _wrap(self, prov: Provider, wire: list[Any]) -> Any:
        if prov.tool_wrap is None:
            return wire
        return prune(prov.tool_wrap(wire), {id(item) for item in wire})

    def translate_tools(self, tools: Any, provider: str, model: str | None = None, *,
                        strict: Any = None, allowed_tools: Any = None,
                        denied_tools: Any = None) -> Any:
        """Tools -> the provider's tools field (schemas through the provider's pipeline,
        plus the model's simplification strategy). `strict`: True, False or 'auto'
        (default: the provider's)."""
        prov = self.provider_rules(provider)
        tool_list = _mask(coerce_tools(tools), allowed_tools, denied_tools)
        return self._wrap(prov, self._prepare_tools(prov, tool_list, model, strict))

    # ------------------------------------------------------------ tool choice

    def tool_choice(self, choice: Any, provider: str, tools: Any = None, *,
                    model: str | None = None) -> Any:
        """The provider's wire value for `choice` (auto, none, required, a tool name), or
        None when the provider is to be sent no tool_choice."""

        prov = self.provider_rules(provider)
        norm = normalize_choice(choice)
        if norm is None:
            return None
        tool_list = coerce_tools(tools) if tools is not None else ()
        kind, name = norm
        self._check_choice(kind, name, tool_list, model, tools is not None)
        names = self._name_map(prov, tool_list)
        wname = names.get(name, wire_name(name, prov, set())) if name else None
        value, _entry = choice_value(prov, kind, wname, list(names.values()))
        return value

    def _check_choice(self, kind: str, name: str | None, tools: tuple[Tool, ...],
                      model: str | None, have_tools: bool) -> None:
        if kind == "named" and have_tools and name not in {t.name for t in tools}:
            raise UnknownRuleError("tool", name or "", [t.name for t in tools])
        if model is None or not self.engine.parse_model_id(model).known:
            return
        cap = self.engine.capability(model)
        if kind == "required" and not cap.supports_tool_choice_required:
            raise CapabilityError(f"model {model!r} does not accept tool_choice 'required'; "
                                  "use 'auto'")
        if kind == "named" and not cap.supports_forced_tool_choice:
            raise CapabilityError(f"model {model!r} cannot be forced to call a specific tool; "
                                  "use 'auto'")

    # ------------------------------------------------------------ requests

    def build_request(self, provider: str, model: str | None, messages: Any, tools: Any = None,
                      tool_choice: Any = None, *, rewrites: list[Any] | None = None,
                      **options: Any) -> dict[str, Any]:
        """A complete request body for `provider`.

        When the provider's server renders the model's own chat template (provider rule
        `renders_template`), the conversation is fitted to the model's turn constraints
        first (Engine.normalize_turns); `rewrites`, a list, receives each TurnRewrite.

        Options with a meaning here: strict, constrained (the grammar or schema of a valid
        call in the body, as the rule's `constrained:` section says), json_output
        ({schema, name}: an answer that is one JSON value, held to `schema` when given, as
        the rule's `json_output:` section asks for it), parallel_tool_calls,
        allowed_tools,
        denied_tools (masking: hidden tools are not sent), request_overrides (merged into
        the body; the provider's reserved fields are protected), transforms (extra named
        message transforms). Every other option is mapped through the provider's
        `request.options` table (max_tokens, temperature, stream ...).
        """

        prov = self.provider_rules(provider)
        strict = options.pop("strict", None)
        constrained = options.pop("constrained", None)
        json_output = options.pop("json_output", None)
        parallel = options.pop("parallel_tool_calls", None)
        allowed = options.pop("allowed_tools", None)
        denied = options.pop("denied_tools", None)
        overrides = options.pop("request_overrides", None)
        extra_transforms = tuple(options.pop("transforms", None) or ())
        msgs = locate_parts(coerce_messages(messages))
        self._check_media(msgs, model)
        all_tools = coerce_tools(tools)
        tool_list = _mask(all_tools, allowed, denied)
        norm = normalize_choice(tool_choice)
        if norm is not None:
            self._check_choice(norm[0], norm[1], tool_list, model, True)
        names = self._name_map(prov, all_tools)
        send, choice_wire, emulation = self._choose_tools(prov, model, msgs, tool_list, norm, names)
        constraint = None
        if constrained:
            from ._constrained import constraint_for

            strict, constraint = constraint_for(self.engine, prov, model, tool_list, norm,
                                                emulation is not None, strict)
        if emulation is not None:  # an emulated model sees its history as text too
            msgs = self.engine.emulate_history(msgs, tool_list, model)
        body: dict[str, Any] = {}
        if prov.model_path and model is not None:
            set_path(body, prov.model_path, model)
        history = self._place_system(prov, body, msgs, emulation)
        if prov.renders_template and model is not None:
            # the server renders the model's own chat template: fit its turn constraints
            turns = self.engine.normalize_turns(history, model, tools=tool_list)
            history = list(turns.messages)
            if rewrites is not None:
                rewrites.extend(turns.rewrites)

        def to_wire(name: str) -> str:
            return names.get(name) or wire_name(name, prov, set())

        prepared = prepare_history(prov, history, to_wire)
        set_path(body, prov.messages_path, write_messages(prov, prepared, extra_transforms))
        if send:
            wire = self._prepare_tools(prov, tuple(send), model, strict, names=names)
            set_path(body, prov.tools_path, self._wrap(prov, wire))
            if choice_wire is not None and prov.choice_path:
                set_path(body, prov.choice_path, choice_wire)
            if norm is None or norm[0] != "none":  # no calls at all: nothing to parallelize
                self._parallel(prov, body, parallel, model)
        for key, value in prov.defaults.items():
            if get_path(body, key) is None:
                set_path(body, key, _json_copy(value))
        for key, value in options.items():
            if value is None:
                continue
            path = prov.options.get(key)
            if path is None:
                err = UnknownRuleError(f"build_request option for provider {prov.id}", key,
                                       sorted(prov.options))
                err.args = (f"{err}; other body fields go in request_overrides={{...}}",)
                raise err
            set_path(body, path, value)
        if constraint is not None:
            set_path(body, constraint[0], constraint[1])
        if prov.renders_template and prov.template_kwargs_path and model is not None:
            # variables that keep the template's rendering of earlier turns as it was
            # (capability turn_template_kwargs); what the client set itself wins
            kwargs = self.engine.capability(model).template_kwargs
            if kwargs:
                given = get_path(body, prov.template_kwargs_path)
                set_path(body, prov.template_kwargs_path,
                         {**kwargs, **(given if isinstance(given, dict) else {})})
        if json_output is not None:
            _write_json_output(prov, body, json_output)
        if overrides:
            _apply_overrides(prov, body, overrides)
        return body

    def _check_media(self, msgs: list[Message], model: str | None) -> None:
        """Media the model's rules say it cannot take (capability input_media) are
        refused before anything is sent."""

        if model is None or not any(content_parts(m.content) for m in msgs) or \
                not self.engine.parse_model_id(model).known:
            return
        takes = self.engine.capability(model).input_media
        if takes is None:  # unknown: the upstream decides
            return
        for m in msgs:
            for p in content_parts(m.content) or ():
                if p.type != "text" and p.type not in takes:
                    what = f"only {', '.join(takes)} besides text" if takes else "text only"
                    raise UnsupportedContentError(
                        f"{p.where}: {describe_part(p)} cannot be sent: model {model!r} takes "
                        f"{what} (its rules' capability input_media). Remove the {p.type}, "
                        f"or route this request to a model that takes {p.type} input",
                        part_type=p.type, where=p.where)

    def _choose_tools(self, prov: Provider, model: str | None, msgs: list[Message],
                      tools: tuple[Tool, ...], norm: tuple[str, str | None] | None,
                      names: dict[str, str]) -> tuple[tuple[Tool, ...], Any, str | None]:
        """(tools to send, wire tool_choice, emulation prompt) for this model and choice."""

        if not tools:
            return (), None, None
        if not self._native(model, prov):
            if norm is not None and norm[0] == "none":
                return (), None, None
            render = self.engine.render_emulation  # None: emulation switched off on this engine
            if render is None:
                raise CapabilityError(
                    f"model {model!r} has no native tool calling and tool emulation is switched "
                    "off on this engine; send the request without tools, or use a model with "
                    "native tools")
            return (), None, render(list(tools), model=model)
        if norm is None:
            return tools, None, None
        kind, name = norm
        choice_wire, entry = choice_value(prov, kind, names.get(name or ""),
                                          [names[t.name] for t in tools])
        if entry.tools == "omit":  # the provider says "none" by sending no tools ...
            if prov.keep_for_history and _has_tool_turns(msgs):
                return tools, None, None  # ... unless the history cannot do without them
            return (), None, None
        if entry.tools == "only-named":
            return tuple(t for t in tools if t.name == name), choice_wire, None
        return tools, choice_wire, None

    def _place_system(self, prov: Provider, body: dict[str, Any], msgs: list[Message],
                      emulation: str | None) -> list[Message]:
        """System prompts (and an emulation prompt) where the provider wants them; returns
        the messages still to be written as the message list."""

        if prov.system_placement == "field":
            systems = [content_text(m.content, f"the {prov.id} system prompt") or ""
                       for m in msgs if m.role == "system"]
            if emulation:
                systems.append(emulation)
            if systems:
                text = "\n\n".join(systems)
                set_path(body, prov.system_path or "system",
                         prune(prov.system_shape({"text": text}), set()) if prov.system_shape else text)
            return [m for m in msgs if m.role != "system"]
        history = list(msgs)
        if emulation:
            if history and history[0].role == "system":
                text = "\n\n".join(x for x in (content_text(history[0].content), emulation) if x)
                history[0] = Message(role="system", content=text)
            else:
                history.insert(0, Message(role="system", content=emulation))
        return history

    def _parallel(self, prov: Provider, body: dict[str, Any], parallel: Any,
                  model: str | None) -> None:
        if not prov.parallel_path:
            return
        want = parallel
        if want is None and model is not None and self.engine.parse_model_id(model).known \
                and not self.engine.capability(model).parallel_tools:
            want = False
        if want is None:
            return
        expr = prov.parallel_enabled if want else prov.parallel_disabled
        if expr is None:
            return
        if prov.parallel_needs_choice and prov.choice_path and get_path(body, prov.choice_path) is None:
            value, _e = choice_value(prov, prov.parallel_needs_choice, None, [])
            if value is not None:
                set_path(body, prov.choice_path, value)
        set_path(body, prov.parallel_path, expr({}), f"provider {prov.id}: ")

    def tool_result_message(self, result: Any, provider: str) -> Any:
        """A tool result (ToolResult, tool Message or dict) as the provider's message."""

        prov = self.provider_rules(provider)
        m = coerce_message(result)
        if m.role != "tool":
            raise ParseError(f"a tool result message has role 'tool', not {m.role!r}")
        prepared = prepare_history(prov, [m], lambda n: wire_name(n, prov, set()))
        wires = write_messages(prov, prepared)
        return wires[0] if len(wires) == 1 else wires

    def parse_request(self, body: Any, provider: str, *, omitted: dict[str, str] | None = None
                      ) -> tuple[list[Message], list[Tool], Any]:
        """A request body in `provider`'s format -> (messages, tools, tool_choice), neutral values.

        tool_choice comes back as 'auto', 'none', 'required',
        {'type': 'function', 'function': {'name': ...}}, or None when the body has none.
        A tool entry the provider rule may omit (`tools.read.refuse` `omit`: a built-in
        tool the upstream cannot provide) is left out and recorded in `omitted` (label ->
        reason) when given; without it, such an entry refuses the request like any other
        (UnsupportedContentError): nothing is left out unseen.
        """

        prov = self.provider_rules(provider)
        data = coerce_body(body, prov.max_bytes, "request body")
        if not isinstance(data, dict):
            raise ParseError(f"a request body for provider {prov.id} is a JSON object")
        # a tool the request declares but the proxy cannot carry refuses it up front
        kept = refuse_tools(prov, get_path(data, prov.tools_path), omitted)
        if kept is not None:  # read the tools still offered, not the omitted entries
            data = copy.deepcopy(data)
            set_path(data, prov.tools_path, kept)
        msgs: list[Message] = []
        if prov.system_placement == "field" and prov.system_read is not None:
            text = _join_text(prov.system_read(data))
            if text:
                msgs.append(Message(role="system", content=text))
        wires = get_path(data, prov.messages_path)
        string_role = ((prov.data.get("messages") or {}).get("read") or {}).get("string_as")
        if isinstance(wires, str) and string_role:  # a bare text input: one message
            msgs.append(Message(role=string_role, content=wires))
            wires = []
        if not isinstance(wires, list):
            raise ParseError(f"not a request body for provider {prov.id}: no message list at "
                             f"{prov.messages_path!r}")
        history = read_history(prov, wires)
        msgs.extend(_unfold_signatures(history) if _folds(prov) else history)
        tools: list[Tool] = []
        read = prov.tools_read
        if "each" in read:
            for item in read["each"](data) or []:
                name = read["name"](item) if "name" in read else None
                if not isinstance(name, str) or not name:
                    raise ParseError(f"a tool in the {prov.id} request has no name")
                desc = read["description"](item) if "description" in read else None
                params = read["parameters"](item) if "parameters" in read else None
                if prov.tools_read_pipeline.steps and params is not None:
                    params = prov.tools_read_pipeline.run(name, desc or "", params).parameters
                tools.append(Tool(name=name, description=desc or "",
                                  parameters=params if isinstance(params, dict)
                                  else {"type": "object", "properties": {}}))
        choice = read_choice(prov, get_path(data, prov.choice_path)) if prov.choice_path else None
        named = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
        if kept is not None and named and all(t.name != named for t in tools):
            # the client forces a tool that was left out: it could never be called
            raise UnsupportedContentError(
                f"{prov.choice_path}: the tool choice names {named!r}, which is not offered "
                "to the model: " + "; ".join(f"{k} is omitted: {v}"
                                             for k, v in (omitted or {}).items()),
                part_type="tool_choice", where=prov.choice_path or "tool_choice")
        return msgs, tools, choice

    # ------------------------------------------------------------ responses

    def _restore_info(self, prov: Provider, tools: Any, model: str | None,
                      strict: Any) -> tuple[WireTools | None, set[str] | None]:
        if tools is None:
            return None, None
        tool_list = coerce_tools(tools)
        names = self._name_map(prov, tool_list)
        mode = self._strict_mode(prov, strict, model)
        strategy = self._strategy(model, prov)

        def transform(tool: Tool) -> TransformedTool:  # only the tools that were called
            return self._tool_entry(prov, tool, names[tool.name], mode, strategy)[0]

        wt = WireTools({names[t.name]: (t.name, t) for t in tool_list}, transform)
        return wt, set(names)

    def _content_parser(self, model: str | None, tools: Any, ids: str = "random",
                        dialect: str | None = None) -> Any:
        """The text parser for a response's content field. That field starts after the
        prompt, and a server that splits reasoning has already removed it: content never
        starts inside a reasoning block a template's generation prompt opened."""
        parser = self.engine.text_parser(model=model, tools=tools, ids=ids, dialect=dialect)
        if parser.starts_in_reasoning:
            parser = self.engine.text_parser(model=model, tools=tools, ids=ids,
                                             dialect=dialect, generation_prompt="")
        return parser

    def _fallback(self, prov: Provider, model: str | None, tools: Any = None
                  ) -> tuple[bool, str | None]:
        """Is the content read for calls too, and with which dialect (None: the model's
        own, `dialect_for`)? `dialect`: servers that may run without a tool-call parser
        hand a model's calls back as raw text in its trained format - or, for an id no
        family rule knows (sent its tools natively, its format unknown), in whatever
        shape: the rule's `unknown_dialect` reads it."""
        if prov.text_fallback == "never":
            return False, None
        if tools and prov.unknown_dialect and model is not None and \
                prov.text_fallback in ("dialect", "always"):
            res = self.engine.resolve_model(model)
            # no family rule, no dialect from an override either, and the tools went
            # natively (an emulated model answers in the format its prompt asked for)
            if not res.spec.known and not res.capability.dialect and self._native(model, prov):
                return True, prov.unknown_dialect
        if prov.text_fallback == "always":
            return True, None
        if model is None:
            return False, None
        cap = self.engine.capability(model)
        if prov.text_fallback == "dialect" and tools and cap.dialect:
            return True, None
        return not self._native(model, prov) or bool(cap.text_fallback), None

    def parse_response(self, body: Any, provider: str, tools: Any = None,
                       model: str | None = None, *, strict: Any = None,
                       ids: str = "random") -> ParsedResponse:
        """A provider response body (dict, JSON text or SDK object) -> ParsedResponse.

        With `tools`, calls come back under the original tool names with arguments in the
        original schema's shape (undoing strict-mode nulls, flattening, string enums ...),
        and calls to tools not in the list are flagged in `warnings`.
        """

        prov = self.provider_rules(provider)
        data = coerce_body(body, prov.max_bytes)
        wt, known = self._restore_info(prov, tools, model, strict)
        wires = prov.response_messages(data) if prov.response_messages else None
        finish_wire = prov.finish_reason(data) if prov.finish_reason else None
        if wires is None and finish_wire is None:
            where = prov.response_messages.src if prov.response_messages else "?"
            raise ParseError(f"not a response body for provider {prov.id}: {where!r} finds "
                             "no message and no finish reason")
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        warns: list[str] = []
        for wire in (wires if isinstance(wires, list) else [wires] if wires is not None else []):
            if not isinstance(wire, dict):
                raise ParseError(f"{prov.id} response: a message is a JSON object, not "
                                 f"{type(wire).__name__}")
            if prov.response_transforms:
                wire = _json_copy(wire)  # the transforms change it: `raw` stays as read
                for name in prov.response_transforms:
                    wire = MESSAGE_TRANSFORMS[name].run(wire)
            rm = read_wire_message(prov, wire)
            if rm.text:
                texts.append(rm.text)
            if rm.reasoning:
                reasoning.append(rm.reasoning)
            for raw_id, name, args, sig in rm.calls:
                call = decode_call(prov, raw_id, name, args, warns, sig)
                if call is not None:
                    calls.append(finish_call(call, wt, known, warns))
        finish = prov.finish(finish_wire, bool(calls))
        content = "".join(texts) or None
        reasoning_text = "".join(reasoning) or None
        repairs: tuple[str, ...] = ()
        reads, dialect = self._fallback(prov, model, tools) if content else (False, None)
        if reads:
            # Parsing hierarchy: native calls first; calls read from the text
            # follow, except those identical to a native one (a server that parsed the
            # calls and also left their text in the content).
            parsed = self._content_parser(model, tools, ids, dialect).parse(
                content, finish_reason=finish)
            content = parsed.content
            reasoning_text = "".join(x for x in (reasoning_text, parsed.reasoning_content) if x) or None
            calls = merge_calls(calls, parsed.tool_calls)
            repairs = tuple(parsed.repairs)
            warns.extend(parsed.warnings)
            if calls and finish == "stop":
                finish = "tool_calls"
        return ParsedResponse(content=content, reasoning_content=reasoning_text,
                              tool_calls=tuple(calls), finish_reason=finish, repairs=repairs,
                              raw=data, warnings=tuple(warns))

    def response_stream(self, provider: str, tools: Any = None, model: str | None = None, *,
                        strict: Any = None, ids: str = "random") -> Any:
        """A consumer of the provider's own stream events: `feed(event)` -> chunks,
        `close()` -> the rest, `result` -> the ParsedResponse (same as parse_response)."""

        prov = self.provider_rules(provider)
        if not prov.stream_rules:
            raise CapabilityError(f"provider {prov.id!r} has no stream rules")
        wt, known = self._restore_info(prov, tools, model, strict)
        text_stream = None
        reads, dialect = self._fallback(prov, model, tools)
        if reads:
            text_stream = self._content_parser(model, tools, ids, dialect).stream()
        return ProviderStream(prov, wt, known, text_stream)

    def build_response(self, parsed: Any, provider: str, model: str | None = None, *,
                       response_id: str | None = None, created: int | None = None,
                       usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """A ParsedResponse -> a response body in `provider`'s format (for proxies).
        `usage`: {input_tokens, cached_tokens, output_tokens} for the body's usage fields
        (`usage_view`: input_tokens counts cached tokens too)."""

        prov = self.provider_rules(provider)
        if isinstance(parsed, dict):
            parsed = ParsedResponse(content=parsed.get("content"),
                                    reasoning_content=parsed.get("reasoning_content"),
                                    tool_calls=coerce_message({"role": "assistant", **parsed}).tool_calls,
                                    finish_reason=parsed.get("finish_reason"))
        if not isinstance(parsed, ParsedResponse):
            raise ParseError(f"build_response takes a ParsedResponse, not {type(parsed).__name__}")
        # what ids are derived from, when the caller gave none (a response id, a call's)
        seed = "" if response_id and all(c.id is not None for c in parsed.tool_calls) else \
            json.dumps([parsed.content, parsed.reasoning_content,
                        [[c.id, c.name, c.arguments] for c in parsed.tool_calls]],
                       sort_keys=True, default=str)
        opaque: set[int] = set()
        calls = []
        rid = response_id or derived_id(seed, prov.id_prefix, len(prov.id_prefix) + 24)
        for i, c in enumerate(parsed.tool_calls):
            cid = wire_call_id(prov, c.id, f"{seed}:{i}")
            if signature_in_id(prov):  # no field for it: the signature rides in the id
                cid = fold_signature(cid, c.signature)
            opaque.add(id(c.arguments))
            calls.append({"id": cid, "name": c.name, "arguments": c.arguments,
                          "arguments_json": c.arguments_json(), "index": i,
                          "signature": c.signature})
        finish = parsed.finish_reason or ("tool_calls" if calls else "stop")
        calls_view = calls or None  # null, not [], so `tool_calls[].{...}` writes nothing
        when = int(time.time()) if created is None else int(created)
        view: dict[str, Any] = {
            "id": rid, "model": model, "created": when, "usage": usage_view(usage),
            "created_at": iso_time(when),
            "text": parsed.content or None, "reasoning": parsed.reasoning_content or None,
            "tool_calls": calls_view, "finish_reason": prov.wire_finish(finish),
        }
        writer = prov.response_message or prov.writers.get("assistant")
        if writer is None or prov.response_build is None:
            raise CapabilityError(f"provider {prov.id!r} has no response.build rule")
        message = prune(writer(view), opaque)
        view["message"] = message
        view["messages"] = message if isinstance(message, list) else [message]
        return prune(prov.response_build(view), opaque | {id(message)})


    def sends_native_tools(self, model: str | None, provider: str | None = None) -> bool:
        """Does build_request send `model` its tools natively (else: the emulation prompt)?
        `provider`: the API the request goes to (where its server renders the model's chat
        template, the template's tool placement counts)."""
        return self._native(model, self.provider_rules(provider) if provider else None)

    def simplify_tools(self, tools: Any, model: str | None = None, *,
                       strategy: str | None = None
                       ) -> tuple[tuple[Tool, ...], Callable[[ToolCall], ToolCall]]:
        """Tools through the model's schema strategy (or the named one): the simplified
        tools, and a function giving a call made against them back in the original
        schema's shape. No strategy: the tools unchanged and the identity."""
        from ._transforms import compile_pipeline

        tool_list = coerce_tools(tools)
        if strategy is None:
            _name, pipe = self._strategy(model)
        else:
            table = (self.ruleset.table("schema_strategies") or {}).get("strategies") or {}
            if strategy not in table:
                raise UnknownRuleError("schema strategy", strategy, list(table))
            pipe = compile_pipeline(table[strategy].get("pipeline"))
        if pipe is None or not pipe.steps:
            return tool_list, _same_call
        done = {t.name: pipe.run(t.name, t.description, t.parameters) for t in tool_list}
        simplified = tuple(Tool(name=t.name, description=done[t.name].description,
                                parameters=done[t.name].parameters or {"type": "object",
                                                                       "properties": {}})
                           for t in tool_list)

        def restore(call: ToolCall) -> ToolCall:
            tt = done.get(call.name)
            if tt is None or not tt.steps:
                return call
            return ToolCall(id=call.id, name=call.name, arguments=tt.restore(call.arguments),
                            signature=call.signature)

        return simplified, restore

    def front(self, provider: str) -> Front:
        """How a proxy serves `provider`'s API to clients (the rule's `serve:` section)."""

        prov = self.provider_rules(provider)
        cache: dict[str, Front] = self._cached("provider_fronts", dict)
        hit = cache.get(prov.id)
        if hit is None:
            hit = cache[prov.id] = compile_front(prov)
        return hit

    def response_usage(self, body: Any, provider: str) -> dict[str, Any] | None:
        """The token counts an answer reports - {input_tokens (every prompt token, cached
        ones included), cached_tokens (of those, read from the server's prompt cache),
        output_tokens}, the ones it has - where the rule says (`response.usage` over a
        body). `body` may also be the list of a streamed answer's events: each is read
        with `stream.usage` (default: `response.usage`), later events' counts over
        earlier ones (a last usage chunk, a closing event's totals)."""

        prov = self.provider_rules(provider)
        cache: dict[tuple[str, str], Expr | None] = self._cached("provider_usage", dict)
        kind = "stream" if isinstance(body, list) else "response"
        key = (prov.id, kind)
        if key not in cache:
            src = (prov.data.get("stream") or {}).get("usage") if kind == "stream" else None
            where = "stream.usage"
            if not (isinstance(src, str) and src):
                src, where = (prov.data.get("response") or {}).get("usage"), "response.usage"
            cache[key] = Expr(src, f"provider {prov.id} {where}") \
                if isinstance(src, str) and src else None
        expr = cache[key]
        if expr is None:
            return None
        out: dict[str, Any] = {}
        for item in body if isinstance(body, list) else (body,):
            value = expr(item) if isinstance(item, dict) else None
            if isinstance(value, dict):
                out.update((k, v) for k, v in value.items()
                           if isinstance(v, int) and not isinstance(v, bool) and v >= 0)
        return out or None


# ---------------------------------------------------------------- helpers

def _folds(prov: Provider) -> bool:
    return signature_in_id(prov)


def _unfold_signatures(msgs: list[Message]) -> list[Message]:
    """Calls and results whose ids carry a signature (`serve.signature_in_id`): the
    signature back on the call, the ids as they were."""
    import dataclasses


    out = []
    for m in msgs:
        if m.tool_calls:
            calls = []
            for c in m.tool_calls:
                cid, sig = unfold_signature(c.id)
                calls.append(c if sig is None else ToolCall(cid, c.name, c.arguments, sig))
            m = dataclasses.replace(m, tool_calls=tuple(calls))
        elif m.role == "tool" and m.tool_call_id:
            cid, sig = unfold_signature(m.tool_call_id)
            if sig is not None:
                m = dataclasses.replace(m, tool_call_id=cid)
        out.append(m)
    return out


def _same_call(call: ToolCall) -> ToolCall:
    return call


def _names(value: Any) -> set[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return {v.strip() for v in value.split(",") if v.strip()}
    return {v.name if isinstance(v, Tool) else str(v) for v in value}


def _mask(tools: tuple[Tool, ...], allowed: Any, denied: Any) -> tuple[Tool, ...]:
    """Tool masking (allow/deny lists): hidden tools are not sent at all."""
    allow = _names(allowed)
    deny = _names(denied) or set()
    return tuple(t for t in tools if (allow is None or t.name in allow) and t.name not in deny)


def _has_tool_turns(msgs: list[Message]) -> bool:
    return any(m.role == "tool" or m.tool_calls for m in msgs)


def _join_text(value: Any) -> str | None:
    if isinstance(value, list):
        return "\n\n".join(v for v in value if isinstance(v, str)) or None
    return value if isinstance(value, str) else None


def _write_json_output(prov: Provider, body: dict[str, Any], ask: Any) -> None:
    """build_request's `json_output` ({schema, name}) written as the rule's `json_output:`
    section says (body path -> expression over {schema, name}; a null value is left out)."""

    table = prov.data.get("json_output")
    if not isinstance(table, dict) or not table:
        raise CapabilityError(f"provider {prov.id!r} cannot be asked for a JSON answer: its "
                              "rule has no `json_output:` section")
    if not isinstance(ask, dict):
        raise ParseError("json_output is a mapping {schema, name}")
    view = {"schema": ask.get("schema") if isinstance(ask.get("schema"), dict) else None,
            "name": ask.get("name") or None}
    for path, src in table.items():
        value = Expr(src, f"provider {prov.id} json_output.{path}")(view)
        if value is not None:
            set_path(body, path, _json_copy(value))


def _apply_overrides(prov: Provider, body: dict[str, Any], overrides: Any) -> None:
    """`request_overrides`: merged into the body; reserved fields are ignored."""
    if not isinstance(overrides, dict):
        raise ParseError("request_overrides must be a mapping")
    ignored = sorted(k for k in overrides if k in prov.reserved)
    if ignored:
        warnings.warn(f"request_overrides: {', '.join(ignored)} reserved for toolrules in "
                      f"{prov.id} requests; ignored", stacklevel=3)

    def deep(dst: dict[str, Any], src: dict[str, Any]) -> None:
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                deep(dst[k], v)
            else:
                dst[k] = _json_copy(v)

    deep(body, {k: v for k, v in overrides.items() if k not in prov.reserved})



def _json_copy(value: Any) -> Any:
    """A copy of a JSON value (its objects and arrays new; a tuple becomes a list, as JSON
    would make it)."""
    if isinstance(value, dict):
        return {k: v if type(v) is str else _json_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [v if type(v) is str else _json_copy(v) for v in value]
    return value
