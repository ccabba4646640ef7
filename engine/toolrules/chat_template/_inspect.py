"""What a model's own chat template accepts, drops and writes, found by rendering probe
conversations through it in the server-like sandbox (`Engine.inspect_template`).

Every probe is a small conversation whose texts are unique words. A probe whose
rendering raises shows a constraint the template enforces (with the template's own
words); one that renders without some of its words shows text the template silently
drops. From them come the capability's turn constraints (`turn_*`), the same fields a
family rule sets by hand, so a template the rules have never seen configures a route.

The call format is found the way a server's output is read: a probe call (arguments of
every JSON type) is rendered as the assistant's turn, the text after the generation
prompt is read back with every dialect, and the one that returns exactly that call is
the template's dialect (ties go to the dialect whose generation prompt and markers the
template uses). Reasoning markers come from an assistant turn with reasoning; switches
(variables such as a thinking flag) from generation prompts that change with them.

Nothing here knows a model: what differs between templates is what they render.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import ParseError, ToolrulesError
from ._prefix import common_prefix
from ._render import (
    TemplateRaised,
    compile_chat_template,
    render_chat_template,
    template_environment,
)

__all__ = ["CallFormat", "PrefixCheck", "Probe", "ReasoningFormat", "TemplateReport",
           "TemplateSource", "inspect_template", "rule_stub"]

_MAX_TEMPLATE_CHARS = 1 << 20

# Probe words: lowercase letters only, so no template's trim, escaping or casing changes
# them, and unlike anything a template writes on its own.
# ids that carry the tool's name, for templates that write the id as the call's header
_NAMED_IDS = "functions.{name}:{index}"
_S1, _S2, _D1 = "zqxsystemone", "zqxsystemtwo", "zqxdeveloper"
_U1, _U2, _U3 = "zqxuserone", "zqxusertwo", "zqxuserthree"
_A0, _A1, _A2 = "zqxassistantzero", "zqxassistantone", "zqxassistanttwo"
_R1, _T1 = "zqxresultone", "zqxthinkingone"
_CALL_TEXT = "zqxbesidecall"
_TOOL_NAME, _TOOL_DOC, _ARG_TEXT = "zqx_lookup", "zqxtooldoc", "zqxargtext"
_ARGS: dict[str, Any] = {"text": _ARG_TEXT, "count": 42, "ratio": 0.5, "flag": True,
                         "items": ["zqxitem", 7], "options": {"depth": 2, "mode": "zqxmode"}}
# two calls in one turn: the second differs in one value
_TWO_CALLS: tuple[dict[str, Any], ...] = (_ARGS, {**_ARGS, "count": 43})
_TRICKY = {"text": 'say "hi" it\'s {x} <b>&amp;</b> [1]\nnext line ü'}
_SCHEMA = {"type": "object", "properties": {
    "text": {"type": "string", "description": "zqx text"},
    "count": {"type": "integer", "description": "zqx count"},
    "ratio": {"type": "number", "description": "zqx ratio"},
    "flag": {"type": "boolean", "description": "zqx flag"},
    "items": {"type": "array", "items": {}, "description": "zqx items"},
    "options": {"type": "object", "description": "zqx options"}}, "required": ["text", "count"]}
_TOOL = {"type": "function", "function": {"name": _TOOL_NAME, "description": _TOOL_DOC,
                                          "parameters": _SCHEMA}}
# Offered instead when a template cannot render the probe tool's schema (some break on
# schema shapes they did not expect): the calls read back against _SCHEMA all the same.
_PLAIN_TOOL = {"type": "function", "function": {
    "name": _TOOL_NAME, "description": _TOOL_DOC, "parameters": {
        "type": "object", "properties": {"text": {"type": "string", "description": "zqx"}},
        "required": ["text"]}}}
# Variables a server sets on its own; any other free variable of a template is a switch
# candidate (a thinking flag, a reasoning effort ...).
_STANDARD_VARS = frozenset({"messages", "tools", "add_generation_prompt", "bos_token",
                            "eos_token", "raise_exception", "strftime_now", "range",
                            "namespace", "dict", "lipsum", "cycler", "joiner", "true",
                            "false", "none", "True", "False", "None", "documents",
                            "tool_choice"})
_MAX_SWITCHES = 8
_NO_CONTENT = object()


# ---------------------------------------------------------------- the report

@dataclass(frozen=True, slots=True)
class TemplateSource:
    """A chat template and where it came from (a file, a GGUF, a server): what
    inspect_template takes."""

    text: str
    origin: str
    """The file's path or the URL the server answered at."""
    bos_token: str = ""
    eos_token: str = ""
    name: str | None = None
    """A name for the model (file stem, GGUF general.name, the server's model)."""
    note: str | None = None
    """Which of several templates it is, when the source had several."""


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe conversation rendered through the template, and what came of it."""

    name: str
    """A short id (e.g. system-later)."""
    question: str
    """What the probe asks, in words."""
    outcome: str
    """rendered (every text is in the prompt), raised (the template refused, its own
    raise_exception), failed (the template broke on the input, e.g. a missing field),
    dropped (it rendered without some texts) or skipped (a probe it depends on failed)."""
    message: str | None = None
    """The template's words when it raised or failed."""
    missing: tuple[str, ...] = ()
    """What the rendered prompt lacks (when dropped)."""

    @property
    def ok(self) -> bool:
        return self.outcome == "rendered"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "question": self.question, "outcome": self.outcome,
                "message": self.message, "missing": list(self.missing)}


@dataclass(frozen=True, slots=True)
class CallFormat:
    """How the template writes an assistant turn's tool call, and who reads it back."""

    dialect: str | None
    """The dialect that reads the probe call back exactly (None: none does)."""
    also: tuple[str, ...] = ()
    """Other dialects that read it back exactly (ranked lower)."""
    repairs: tuple[str, ...] = ()
    """Repairs the reading needed beyond the dialect's own (a rule's `quirks`)."""
    text: str = ""
    """The rendered call: the assistant turn after the generation prompt."""
    arguments: str = "object"
    """How the template takes arguments: object, or json-text (a JSON string)."""
    tricky_strings: bool | None = None
    """A string with quotes, markup, a newline and non-ASCII text reads back unchanged."""
    two_calls: bool | None = None
    """Two calls in one turn read back, in order."""
    call_ids: str | None = None
    """The call ids the call reads back with only (a turn_call_ids pattern: the template
    writes the id where the tool's name belongs); None: any id."""
    note: str | None = None
    """Why no dialect was named, or what else is worth knowing."""

    def as_dict(self) -> dict[str, Any]:
        return {"dialect": self.dialect, "also": list(self.also), "repairs": list(self.repairs),
                "text": self.text, "arguments": self.arguments,
                "tricky_strings": self.tricky_strings, "two_calls": self.two_calls,
                "call_ids": self.call_ids, "note": self.note}


@dataclass(frozen=True, slots=True)
class ReasoningFormat:
    """How the template writes reasoning, and what switches it."""

    field: str | None = None
    """The message field it renders reasoning from (reasoning_content, thinking ...);
    None: it renders none."""
    open: str | None = None
    close: str | None = None
    history: bool | None = None
    """Reasoning of earlier assistant turns is kept (most templates drop it)."""
    opened_by_prompt: bool = False
    """The generation prompt opens a reasoning block (output starts inside it)."""
    switches: tuple[tuple[str, str, str], ...] = ()
    """(variable, generation prompt when true, when false) for each variable that changes
    the generation prompt."""
    dialect_markers: bool | None = None
    """The named dialect reads these markers as reasoning (None: nothing to compare)."""

    @property
    def found(self) -> bool:
        return self.field is not None or bool(self.switches) or self.opened_by_prompt

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "open": self.open, "close": self.close,
                "history": self.history, "opened_by_prompt": self.opened_by_prompt,
                "switches": [{"variable": v, "true": t, "false": f}
                             for v, t, f in self.switches],
                "dialect_markers": self.dialect_markers}


@dataclass(frozen=True, slots=True)
class PrefixCheck:
    """A conversation extended by one turn, rendered again: does the new prompt start with
    the previous one (as a server's cache needs), and if not, what moved and what keeps
    it in place."""

    name: str
    """tool-turn (a call and its result appended) or user-turn (an answer and a new user
    prompt appended)."""
    question: str
    kept: float | None
    """The share of the previous prompt the new one keeps as its prefix (None: the
    conversation does not render)."""
    at: int | None = None
    """Where the two first differ, in the previous prompt (None: it is kept whole)."""
    previous: str = ""
    new: str = ""
    """About 60 characters around that position in each prompt."""
    moved: str | None = None
    """What the template rewrote there, in words."""
    fix: str | None = None
    """What keeps the prefix, as the capability field that asks for it (None: nothing
    found)."""
    message: str | None = None
    """Why it was not measured (a template error)."""

    @property
    def stable(self) -> bool:
        return self.kept == 1.0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "question": self.question, "kept": self.kept,
                "at": self.at, "previous": self.previous, "new": self.new,
                "moved": self.moved, "fix": self.fix, "message": self.message}


@dataclass(frozen=True, slots=True)
class TemplateReport:
    """What a chat template enforces, drops and writes (Engine.inspect_template)."""

    origin: str
    """Where the template came from (a file, a GGUF, a server), as given."""
    sha256: str
    """The template's sha256 (hex)."""
    variables: tuple[str, ...]
    """The free variables the template reads."""
    generation_prompt: str
    """What add_generation_prompt appends after the last message."""
    renders_tools: bool
    """The tool definitions appear in the prompt (the server can offer tools natively)."""
    probes: tuple[Probe, ...]
    call: CallFormat
    reasoning: ReasoningFormat
    tool_result: str | None
    """How a tool result is rendered ({result} stands for its text); None: it cannot be."""
    fields: tuple[tuple[str, Any], ...]
    """The capability fields derived (turn_*, native_tools, dialect, reasoning, quirks)."""
    notes: tuple[str, ...] = ()
    bos_token: str = ""
    eos_token: str = ""
    prefix: tuple[PrefixCheck, ...] = ()
    """Whether each next turn's prompt extends the previous one (a server's prompt cache)."""
    schema_fixes: tuple[tuple[str, str], ...] = ()
    """(template fix, what the template did without it) for each tool-schema shape it
    cannot render (rules/schema_strategies.yaml template_fixes)."""

    @property
    def capability(self) -> dict[str, Any]:
        """The derived capability fields, as a family rule or a route override sets them."""
        return {k: dict(v) if k == "turn_template_kwargs" else
                list(v) if isinstance(v, tuple) else v for k, v in self.fields}

    def probe(self, name: str) -> Probe | None:
        return next((p for p in self.probes if p.name == name), None)

    def as_dict(self) -> dict[str, Any]:
        return {"origin": self.origin, "sha256": self.sha256,
                "variables": list(self.variables), "bos_token": self.bos_token,
                "eos_token": self.eos_token, "generation_prompt": self.generation_prompt,
                "renders_tools": self.renders_tools,
                "probes": [p.as_dict() for p in self.probes], "call": self.call.as_dict(),
                "reasoning": self.reasoning.as_dict(), "tool_result": self.tool_result,
                "prefix": [c.as_dict() for c in self.prefix],
                "schema_fixes": [{"fix": f, "without": w} for f, w in self.schema_fixes],
                "capability": self.capability, "notes": list(self.notes)}


# ---------------------------------------------------------------- rendering probes

def _call(content: Any = "", calls: Sequence[Mapping[str, Any]] = (_ARGS,), *,
          as_text: bool = False, named_ids: bool = False) -> dict[str, Any]:
    """An assistant message with a probe call for each arguments object of `calls`
    (content "" unless given; _NO_CONTENT leaves the key out). `named_ids`: call ids that
    carry the tool's name (functions.NAME:INDEX), for templates that write the id as the
    call's header."""
    tool_calls = []
    for i, args in enumerate(calls):
        a = copy.deepcopy(dict(args))
        call_id = _NAMED_IDS.replace("{name}", _TOOL_NAME).replace("{index}", str(i)) \
            if named_ids else f"call_zqx{i + 1}"
        tool_calls.append({"id": call_id, "type": "function",
                           "function": {"name": _TOOL_NAME,
                                        "arguments": json.dumps(a) if as_text else a}})
    msg: dict[str, Any] = {"role": "assistant", "tool_calls": tool_calls}
    if content is not _NO_CONTENT:
        msg["content"] = content
    return msg


def _m(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": text, **extra}


def _result(text: str = _R1, i: int = 1) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_zqx{i}", "name": _TOOL_NAME,
            "content": text}


class _Renderer:
    def __init__(self, template: Any, bos: str, eos: str, source: str = ""):
        self.template = template
        self.source = source
        self.bos = bos
        self.eos = eos
        self.tool: dict[str, Any] = _TOOL

    def render(self, messages: Sequence[Mapping[str, Any]], *, gen: bool = True,
               tools: bool = True, **extra: Any) -> tuple[str | None, TemplateRaised | None]:
        context = {"messages": copy.deepcopy(list(messages)), "add_generation_prompt": gen,
                   "tools": [copy.deepcopy(self.tool)] if tools else None,
                   "bos_token": self.bos, "eos_token": self.eos, **extra}
        try:
            return render_chat_template(self.template, context), None
        except TemplateRaised as exc:
            return None, exc


class _Prober:
    def __init__(self, r: _Renderer, as_text: bool):
        self.r = r
        self.as_text = as_text
        self.probes: list[Probe] = []

    def get(self, name: str) -> Probe | None:
        return next((p for p in self.probes if p.name == name), None)

    def call(self, content: Any = "") -> dict[str, Any]:
        return _call(content, as_text=self.as_text)

    def run(self, name: str, question: str, messages: Sequence[Mapping[str, Any]],
            expect: Mapping[str, str], *, gen: bool = True,
            after: str | None = None) -> tuple[Probe, str | None]:
        """Render `messages`; the probe is dropped when a text of `expect` (label -> text)
        is missing (after the first occurrence of `after`, when given)."""
        text, err = self.r.render(messages, gen=gen)
        if err is not None:
            p = Probe(name, question, "raised" if err.raised else "failed", err.message)
        else:
            assert text is not None
            start = text.find(after) if after else 0
            hay = text[max(start, 0):]
            missing = tuple(label for label, t in expect.items() if t not in hay)
            p = Probe(name, question, "dropped" if missing else "rendered", None, missing)
        self.probes.append(p)
        return p, text

    def skip(self, name: str, question: str, why: str) -> Probe:
        p = Probe(name, question, "skipped", why)
        self.probes.append(p)
        return p


# ---------------------------------------------------------------- inspecting

def inspect_template(engine: Any, source: str, *, bos_token: str = "", eos_token: str = "",
                     origin: str = "template") -> TemplateReport:
    """See Engine.inspect_template."""
    if not isinstance(source, str):
        raise ParseError(f"{origin}: a chat template must be text, not {type(source).__name__}")
    if len(source) > _MAX_TEMPLATE_CHARS:
        raise ParseError(f"{origin}: the template is {len(source)} characters; the limit is "
                         f"{_MAX_TEMPLATE_CHARS}")
    env = template_environment()
    template = compile_chat_template(source, env)
    variables = _variables(env, source)
    r = _Renderer(template, bos_token, eos_token, source)
    p_gen, err = r.render([_m("user", _U1)])
    notes: list[str] = []
    if err is not None and r.render([_m("user", _U1)], tools=False)[1] is None:
        r.tool = _PLAIN_TOOL
        p_gen, plain_err = r.render([_m("user", _U1)])
        if plain_err is None:
            notes.append("the template does not render a tool whose parameters have several "
                         f"types ({err.message}); probed with a one-string-parameter tool")
            err = None
    if err is not None:
        raise TemplateRaised(f"it does not render a conversation of one user message "
                             f"({err.message})", raised=err.raised)
    assert p_gen is not None
    if _U1 not in p_gen:
        raise TemplateRaised("it does not render the text of a one-message conversation "
                             "(the user's words are not in the prompt)", raised=False)
    p_nogen = r.render([_m("user", _U1)], gen=False)[0] or ""
    gen_prompt = _gen_prompt(r) or ""
    plain = r.render([_m("user", _U1)], tools=False)[0]
    renders_tools = _TOOL_DOC in p_gen or (_TOOL_NAME in p_gen and plain is not None
                                           and _TOOL_NAME not in plain)
    as_text = _arguments_as_text(r)
    pr = _Prober(r, as_text)
    _turn_probes(pr)
    call = _call_format(engine, r, p_gen, p_nogen, notes, as_text)
    if call.dialect is None and plain is not None:
        # the tool list may sit between the conversation and the generation prompt: read
        # the call from renders without it
        plain_nogen = r.render([_m("user", _U1)], gen=False, tools=False)[0]
        if plain_nogen is not None:
            bare = _call_format(engine, r, plain, plain_nogen, notes, as_text, tools=False)
            if bare.dialect is not None:
                call = bare
    reasoning = _reasoning(engine, r, variables, p_gen, p_nogen, gen_prompt, call.dialect,
                           as_text)
    tool_result = _tool_result_text(r, pr, gen_prompt, call.text)
    fields = _derive(engine, pr, call, reasoning, renders_tools, notes)
    if not renders_tools:
        notes.append("the template does not write the tool definitions into the prompt: "
                     "tools are offered by the emulation prompt (native_tools: false)")
    switches = {v for v, _t, _f in reasoning.switches}
    prefix = _prefix_checks(r, pr.as_text, variables, switches, reasoning, renders_tools)
    _derive_prefix(engine, prefix, call, renders_tools, fields, notes)
    fixes = _schema_fixes(engine, r)
    if fixes:
        fields["turn_tool_schema"] = tuple(f for f, _w in fixes)
    return TemplateReport(origin, hashlib.sha256(source.encode("utf-8")).hexdigest(),
                          variables, gen_prompt, renders_tools, tuple(pr.probes), call,
                          reasoning, tool_result, tuple(fields.items()), tuple(notes),
                          bos_token, eos_token, prefix, fixes)


def _variables(env: Any, source: str) -> tuple[str, ...]:
    from jinja2 import meta

    try:
        return tuple(sorted(meta.find_undeclared_variables(env.parse(source))))
    except Exception:  # the compiled template rendered; its variables are a detail
        return ()


def _arguments_as_text(r: _Renderer) -> bool:
    """Does the template take a call's arguments as a JSON string rather than an object
    (it renders only that way)? Servers pass objects; a template that concatenates the
    arguments to text needs a string."""
    for as_text in (False, True):
        text, _ = r.render([_m("user", _U1), _call(as_text=as_text)], gen=False)
        if text is not None and _ARG_TEXT in text:
            return as_text
    return False


def _turn_probes(pr: _Prober) -> None:
    S1, S2 = _m("system", _S1), _m("system", _S2)
    U1, U2, U3 = _m("user", _U1), _m("user", _U2), _m("user", _U3)
    A1, A2 = _m("assistant", _A1), _m("assistant", _A2)
    pr.run("system", "a system message first", [S1, U1], {"the system text": _S1})
    pr.run("two-systems", "two system messages before the first user message",
           [S1, S2, U1], {"the first system text": _S1, "the second system text": _S2})
    pr.run("system-later", "a system message after the conversation started",
           [S1, U1, A1, S2, U2], {"the later system text": _S2, "the first system text": _S1})
    pr.run("developer", "a developer message", [_m("developer", _D1), U1],
           {"the developer text": _D1})
    pr.run("unknown-role", "a message of a role no template knows (does it write any role "
           "name it is given?)", [_m("zqxrole", _D1), U1], {"its text": _D1})
    pr.run("consecutive-users", "two user messages in a row", [S1, U1, U2],
           {"the first user text": _U1, "the second user text": _U2})
    pr.run("consecutive-assistants", "two assistant messages in a row", [U1, A1, A2, U2],
           {"the first assistant text": _A1, "the second assistant text": _A2})
    pr.run("assistant-first", "an assistant message before the first user message",
           [S1, _m("assistant", "zqxassistantzero"), U1],
           {"the assistant text": _A0})
    tool, _ = pr.run("tool-result", "a tool result after the call",
                     [U1, pr.call(), _result()], {"the tool result": _R1})
    # what follows a call: its result where the template takes one, else the user
    follow = [_result()] if tool.ok else [U2]
    base, _ = pr.run("call", "an assistant message with a call, content \"\"",
                     [U1, pr.call(), *follow], {"the call's arguments": _ARG_TEXT})
    if base.ok or base.outcome == "dropped":
        pr.run("call-without-content", "an assistant message with a call and no content "
               "field", [U1, pr.call(_NO_CONTENT), *follow], {"the call's arguments": _ARG_TEXT})
        pr.run("call-with-null-content", "an assistant message with a call and content null "
               "(as chat-completions clients send it)", [U1, pr.call(None), *follow],
               {"the call's arguments": _ARG_TEXT})
        pr.run("text-with-call", "assistant text beside a call",
               [U1, pr.call(_CALL_TEXT), *follow], {"the text beside the call": _CALL_TEXT})
        pr.run("call-in-history", "a call (with text beside it) two turns back",
               [U1, pr.call(_CALL_TEXT), *follow, A2, U3],
               {"the earlier call": _ARG_TEXT, "the text beside the earlier call": _CALL_TEXT,
                "the later assistant text": _A2})
    else:
        for name, q in (("call-without-content", "an assistant message with a call and no "
                         "content field"),
                        ("call-with-null-content", "an assistant message with a call and "
                         "content null (as chat-completions clients send it)"),
                        ("text-with-call", "assistant text beside a call"),
                        ("call-in-history", "a call two turns back")):
            pr.skip(name, q, "an assistant message with a call does not render")
    if tool.ok:
        pr.run("result-apart", "a tool result that does not directly follow its call",
               [U1, pr.call(), U2, _result()], {"the tool result": _R1})
    else:
        pr.skip("result-apart", "a tool result that does not directly follow its call",
                "the template renders no tool results")
    two = _call(calls=_TWO_CALLS, as_text=pr.as_text)
    pr.run("two-calls", "an assistant message with two calls",
           [U1, two, *([_result(), _result("zqxresulttwo", 2)] if tool.ok else [U2])],
           {"the second call": '43'})


# ---------------------------------------------------------------- the call format

def _segment(text: str, p_gen: str, p_nogen: str, tail: str) -> tuple[str, str]:
    """The assistant turn's own text in `text` (after where it leaves the generation
    prompt, without the end-of-turn `tail`), and the part of the generation prompt the
    model would have seen before it."""
    at = common_prefix(text, p_gen)
    # diverging inside the generation prompt: step back to a whole marker (the turn
    # may share a marker's first character with what the prompt writes there)
    while len(p_nogen) < at < len(p_gen) and not text[at - 1].isspace() \
            and text[at - 1] not in ">]}|)":
        at -= 1
    prime = p_gen[len(p_nogen):at] if at >= len(p_nogen) else ""
    seg = text[at:]
    if tail.strip() and seg.endswith(tail):
        seg = seg[:len(seg) - len(tail)]
    return seg, prime


def _turn_tail(r: _Renderer, tools: bool = True) -> str:
    """What the template writes after an assistant turn's text (its end-of-turn marks)."""
    text, _ = r.render([_m("user", _U1), _m("assistant", _A1)], gen=False, tools=tools)
    if not text or _A1 not in text:
        return ""
    return text[text.rindex(_A1) + len(_A1):]


def _same(calls: Sequence[Any], expected: Sequence[Mapping[str, Any]]) -> bool:
    def key(name: str, args: Any) -> str:
        return json.dumps([name, args], sort_keys=True)

    return [key(c.name, c.arguments) for c in calls] == [key(_TOOL_NAME, a) for a in expected]


def _reads(engine: Any, dialect: str, seg: str, prime: str,
           expected: Sequence[Mapping[str, Any]], repairs: Any = None) -> Any:
    """The parsed turn when `dialect` reads `seg` as exactly the expected calls (no text,
    no reasoning), else None."""
    try:
        parser = engine.text_parser(dialect=dialect, tools=[_TOOL], generation_prompt=prime,
                                    ids="sequential", repairs=repairs)
        parsed = parser.parse(seg, finish_reason="stop")
    except ToolrulesError:
        return None
    if not _same(parsed.tool_calls, expected) or (parsed.content or "").strip() \
            or (parsed.reasoning_content or "").strip():
        return None
    return parsed


def _dialect_markers(data: Any) -> set[str]:
    """The literal markers of a dialect rule (open/close/drop ... strings of 3+ chars)."""
    out: set[str] = set()
    keys = {"open", "close", "drop", "until", "value_open", "start", "header_end", "end"}

    def walk(node: Any, key: str | None) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif isinstance(node, str) and key in keys and len(node.strip()) >= 3:
            out.add(node.strip())

    walk(data, None)
    return out


def _rank(engine: Any, ids: Sequence[str], vocabulary: str, gen_prompt: str,
          needs: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Dialects that read the call, best first: no extra repairs, then the generation
    prompt the dialect expects, then the share of its markers the template uses."""
    def score(d: str) -> tuple[Any, ...]:
        rf = engine.ruleset.get("dialect", d)
        data = rf.data if rf is not None and isinstance(rf.data, dict) else {}
        prompt = str(data.get("default_prompt") or "")
        fits = bool(prompt) and bool(gen_prompt) and (gen_prompt.startswith(prompt)
                                                      or prompt.startswith(gen_prompt))
        markers = _dialect_markers(data)
        share = sum(m in vocabulary for m in markers) / len(markers) if markers else 0.0
        return (len(needs[d]), not fits, -share, d)

    return sorted(ids, key=score)


def _call_format(engine: Any, r: _Renderer, p_gen: str, p_nogen: str,
                 notes: list[str], as_text: bool, tools: bool = True) -> CallFormat:
    from ..rules._schemas_dialects import REPAIRS

    dialects = [d for d in engine.ruleset.ids("dialect")]
    tail = _turn_tail(r, tools)
    gen_prompt = p_gen[len(p_nogen):]
    why = "the template does not render an assistant message with a call"
    forms = [(as_text, False), (not as_text, False), (as_text, True), (not as_text, True)]
    rendered = False
    for text_args, named_ids in forms:
        mode = "json-text" if text_args else "object"
        text, err = r.render([_m("user", _U1), _call(as_text=text_args, named_ids=named_ids)],
                             gen=False, tools=tools)
        if err is not None:
            if not rendered:
                why = f"an assistant message with a call does not render: {err.message}"
            continue
        rendered = True
        assert text is not None
        seg, prime = _segment(text, p_gen, p_nogen, tail)
        if _ARG_TEXT not in seg:
            why = "the rendered assistant turn does not contain the call"
            continue
        needs: dict[str, tuple[str, ...]] = {}
        for d in dialects:
            if _reads(engine, d, seg, prime, [_ARGS]) is not None:
                needs[d] = ()
                continue
            parsed = _reads(engine, d, seg, prime, [_ARGS], repairs=list(REPAIRS))
            if parsed is not None:
                own = engine.dialect(d).repairs
                needs[d] = tuple(x for x in parsed.repairs if x not in own)
        if not needs:
            if not named_ids:
                why = ("no dialect reads the rendered call back as the call it was given "
                       f"(arguments as {'a JSON string' if text_args else 'an object'})")
            continue
        vocabulary = text + "\n" + r.source
        ranked = _rank(engine, list(needs), vocabulary, gen_prompt, needs)
        best = ranked[0]
        form = (text_args, named_ids)
        tricky = _reads_rendered(engine, r, best, p_gen, p_nogen, tail, [_TRICKY], form,
                                 needs[best], tools)
        two = _reads_rendered(engine, r, best, p_gen, p_nogen, tail, _TWO_CALLS, form,
                              needs[best], tools)
        said = []
        if text_args:
            said.append("the template writes arguments given as a JSON string, not as an "
                        "object")
        if named_ids:
            said.append("the template writes a call's id where the tool's name belongs: the "
                        "call reads back only when ids carry the name (functions.NAME:INDEX)")
            notes.append("call ids in the history must carry the tool's name "
                         "(functions.NAME:INDEX), as the model writes them; other ids make "
                         "earlier calls read as calls of another tool: turn_call_ids")
        if tricky is False:
            notes.append(f"a string argument with quotes, markup and a newline does not read "
                         f"back unchanged through {best}")
        return CallFormat(best, tuple(ranked[1:]), needs[best], seg.strip(), mode, tricky,
                          two, _NAMED_IDS if named_ids else None, "; ".join(said) or None)
    return CallFormat(None, note=why)


def _reads_rendered(engine: Any, r: _Renderer, dialect: str, p_gen: str, p_nogen: str,
                    tail: str, args: Sequence[Mapping[str, Any]], form: tuple[bool, bool],
                    repairs: tuple[str, ...], tools: bool = True) -> bool | None:
    text_args, named_ids = form
    msg = _call(calls=args, as_text=text_args, named_ids=named_ids)
    text, err = r.render([_m("user", _U1), msg], gen=False, tools=tools)
    if text is None or err is not None:
        return None
    seg, prime = _segment(text, p_gen, p_nogen, tail)
    return _reads(engine, dialect, seg, prime, args, repairs=list(repairs) or None) is not None


# ---------------------------------------------------------------- reasoning

def _reasoning(engine: Any, r: _Renderer, variables: Sequence[str], p_gen: str, p_nogen: str,
               gen_prompt: str, dialect: str | None, as_text: bool) -> ReasoningFormat:
    field = open_ = close = None
    history = None
    tries = [(name, beside) for name in ("reasoning_content", "thinking", "reasoning")
             for beside in (False, True)]
    for name, beside in tries:
        # reasoning of a plain answer, else of a turn with a call (some templates keep it
        # only while the calls' results are pending)
        msg = _m("assistant", _A1, **{name: _T1})
        if beside:
            msg = {**_call(_A1, as_text=as_text), name: _T1}
        text, _ = r.render([_m("user", _U1), msg], gen=False)
        if not text or _T1 not in text or _A1 not in text:
            continue
        field = name
        at = common_prefix(text, p_nogen)
        full = text[at:]
        i = full.find(_T1)
        j = full.find(_A1, i)
        before = full[:i]
        before = before[common_prefix(before, gen_prompt):] if gen_prompt else before
        lines = [ln for ln in before.strip().splitlines() if ln.strip()]
        open_ = lines[-1].strip() if lines else (gen_prompt.strip().splitlines() or [""])[-1]
        close = full[i + len(_T1):j].strip() if j > i else None
        later, _ = r.render([_m("user", _U1), msg, *([_result()] if beside else []),
                             _m("assistant", _A2), _m("user", _U2)])
        history = bool(later and _T1 in later)
        break
    switches = []
    for var in [v for v in variables if v not in _STANDARD_VARS][:_MAX_SWITCHES]:
        prompts = [_gen_prompt(r, **{var: value}) for value in (True, False)]
        if None not in prompts and prompts[0] != prompts[1]:
            switches.append((var, str(prompts[0]), str(prompts[1])))
    opened = False
    markers_known = None
    if dialect is not None:
        try:
            opened = engine.text_parser(dialect=dialect,
                                        generation_prompt=gen_prompt).starts_in_reasoning
        except ToolrulesError:
            opened = False
        rf = engine.ruleset.get("dialect", dialect)
        pairs = [(str(x.get("open")), str(x.get("close")))
                 for x in (rf.data.get("reasoning") or []) if isinstance(x, Mapping)] \
            if rf is not None and isinstance(rf.data, dict) else []
        if field is not None and open_ and close and pairs:
            markers_known = (open_, close) in pairs
    else:
        opened = open_ is not None and bool(open_) and gen_prompt.rstrip().endswith(open_)
    return ReasoningFormat(field, open_ or None, close or None, history, opened,
                           tuple(switches), markers_known)


def _gen_prompt(r: _Renderer, tools: bool = True, **extra: Any) -> str | None:
    """What add_generation_prompt appends to a one-message conversation (with `extra`
    variables set)."""
    on, _ = r.render([_m("user", _U1)], tools=tools, **extra)
    off, _ = r.render([_m("user", _U1)], gen=False, tools=tools, **extra)
    if on is None or off is None:
        return None
    return on[len(off):] if on.startswith(off) else on[common_prefix(on, off):]


# ---------------------------------------------------------------- tool results

def _tool_result_text(r: _Renderer, pr: _Prober, gen_prompt: str,
                      call_text: str) -> str | None:
    """How the template renders a tool result after its call ({result} for its text)."""
    p = pr.get("tool-result")
    if p is None or not p.ok:
        return None
    # without the tool list, which some templates write after the conversation
    text, _ = r.render([_m("user", _U1), pr.call(), _result()], tools=False)
    tail = _turn_tail(r, tools=False)
    if not text or _R1 not in text:
        text, _ = r.render([_m("user", _U1), pr.call(), _result()])
        tail = _turn_tail(r)
        gen_prompt = _gen_prompt(r) or ""
    else:
        gen_prompt = _gen_prompt(r, tools=False) or ""
    if not text:
        return None
    at = text.find(_R1)
    last = "zqxmode"  # the value of the call's last argument
    start = text.rfind(last, 0, at)
    start = start + len(last) if start >= 0 else 0
    closer = call_text[call_text.rfind(last) + len(last):].strip() if last in call_text else ""
    if closer:  # the rest of the call as the template writes it
        k = text.find(closer, start, at)
        if k >= 0:
            start = k + len(closer)
    if tail.strip() and text.startswith(tail, start):
        start += len(tail)
    else:
        lead = len(text[start:at]) - len(text[start:at].lstrip())
        if tail.strip() and text.startswith(tail.strip(), start + lead):
            start += lead + len(tail.strip())
    end = len(text) - len(gen_prompt) if gen_prompt and text.endswith(gen_prompt) else len(text)
    return text[start:end].replace(_R1, "{result}")


# ---------------------------------------------------------------- the prompt prefix

_AROUND = 30  # characters shown on each side of a first difference
_TOOL_PROMPT = "zqxtoolprompt"  # stands for tool definitions written into the system text


def _stages(as_text: bool, *, tools_in_system: bool = False
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Three prompts of one conversation as an agent's turns make them: a prompt; the
    model's call and its result appended; its answer and the user's next prompt
    appended. `tools_in_system`: the tool definitions stand in the system text instead
    of the tools variable."""
    system = _S1 + (f"\n\n{_TOOL_PROMPT}" if tools_in_system else "")
    first = [_m("system", system), _m("user", _U1)]
    second = [*first, _call(as_text=as_text), _result()]
    third = [*second, _m("assistant", _A2), _m("user", _U2)]
    return first, second, third


def _extends(r: _Renderer, prev: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]],
             *, tools: bool = True, **extra: Any) -> tuple[str, str] | str:
    """(previous prompt, new prompt), or the template's message when one does not render."""
    a, err = r.render(prev, tools=tools, **extra)
    if err is not None or a is None:
        return err.message if err is not None else "it does not render"
    b, err = r.render(new, tools=tools, **extra)
    if err is not None or b is None:
        return err.message if err is not None else "it does not render"
    return a, b


def _what_moved(prev: str, new: str, at: int, reasoning: ReasoningFormat) -> str:
    """In words: what stands at the first difference of the previous prompt."""
    rest = prev[at:]
    if _TOOL_DOC in rest and _TOOL_DOC in new[at:]:
        return "the tool definitions (written at a place that moves with the conversation)"
    if reasoning.open and rest.lstrip().startswith(reasoning.open.strip()) and \
            not new[at:].lstrip().startswith(reasoning.open.strip()):
        return "the reasoning block of an earlier assistant turn (dropped once a newer " \
               "user message exists)"
    # text of the previous prompt that the new one leaves out: what follows it is there
    # (from the start of the marker or word the two part in)
    while at > 0 and not prev[at - 1].isspace() and prev[at - 1] not in ">]}|)":
        at -= 1
    follow = new[at:at + 20]
    k = prev.find(follow, at + 1) if follow else -1
    if k > at:
        return f"{json.dumps(prev[at:k], ensure_ascii=False)} of an earlier turn, left out"
    return "the text at that position"


def _prefix_checks(r: _Renderer, as_text: bool, variables: Sequence[str],
                   switches: set[str], reasoning: ReasoningFormat,
                   renders_tools: bool) -> tuple[PrefixCheck, ...]:
    """Each next turn rendered again: the prompt must start with the previous one. Where
    it does not, the template's own variables (not those that change the generation
    prompt: they change what the model does) are tried, then the tool definitions in the
    system text instead of where the template writes them."""
    first, second, third = _stages(as_text)
    candidates = [v for v in variables if v not in _STANDARD_VARS and v not in switches]
    out = []
    for name, question, prev, new in (
            ("tool-turn", "the model's call and its result appended", first, second),
            ("user-turn", "the model's answer and a new user prompt appended", second, third)):
        got = _extends(r, prev, new)
        if isinstance(got, str):
            out.append(PrefixCheck(name, question, None, message=got))
            continue
        a, b = got
        at = common_prefix(a, b)
        if at == len(a):
            out.append(PrefixCheck(name, question, 1.0))
            continue
        fix = None
        for var in candidates[:_MAX_SWITCHES]:
            for value in (True, False):
                again = _extends(r, prev, new, **{var: value})
                if not isinstance(again, str) and again[1].startswith(again[0]) \
                        and _U1 in again[1] and _A2 in again[1]:
                    fix = f"turn_template_kwargs: {{{var}: {json.dumps(value)}}}"
                    break
            if fix:
                break
        moved = _what_moved(a, b, at, reasoning)
        if fix is None and renders_tools and moved.startswith("the tool definitions"):
            k = 0 if name == "tool-turn" else 1
            staged = _stages(as_text, tools_in_system=True)
            again = _extends(r, staged[k], staged[k + 1], tools=False)
            if not isinstance(again, str) and again[1].startswith(again[0]):
                fix = "turn_tools: system"
        out.append(PrefixCheck(name, question, at / len(a) if a else 1.0, at, a[max(0, at - _AROUND):at + _AROUND],
                               b[max(0, at - _AROUND):at + _AROUND], moved, fix))
    return tuple(out)


def _derive_prefix(engine: Any, checks: Sequence[PrefixCheck], call: CallFormat,
                   renders_tools: bool, out: dict[str, Any], notes: list[str]) -> None:
    """The capability fields that keep each next prompt an extension of the last."""
    kwargs: dict[str, Any] = {}
    for c in checks:
        if c.stable or c.kept is None:
            continue
        if c.fix and c.fix.startswith("turn_template_kwargs:"):
            var, _sep, value = c.fix[len("turn_template_kwargs: {"):-1].partition(": ")
            kwargs[var] = json.loads(value)
        elif c.fix == "turn_tools: system":
            out["turn_tools"] = "system"
            trained = {st.dialect for st in engine.emulation_styles() if st.trained}
            if call.dialect in trained:
                out["emulation_style"] = "dialect"
            notes.append("the template moves its tool definitions as the conversation grows: "
                         "the tools go in the leading system prompt, in the model's trained "
                         "format (turn_tools: system)")
        else:
            notes.append(f"after {c.question}, the prompt keeps {100 * (c.kept or 0):.1f} % of "
                         f"the previous one ({c.moved}); no variable of the template or tool "
                         "placement keeps it: a server processes the rest again")
    if kwargs:
        out["turn_template_kwargs"] = tuple(sorted(kwargs.items()))
        notes.append("the template rewrites earlier turns unless its variables "
                     + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(kwargs.items()))
                     + " are passed (turn_template_kwargs: the proxy sends them as the "
                     "server's chat_template_kwargs)")


def _schema_fixes(engine: Any, r: _Renderer) -> tuple[tuple[str, str], ...]:
    """The template fixes (rules/schema_strategies.yaml template_fixes) for tool schema
    shapes the template cannot render but renders once fixed."""
    from ..providers._transforms import compile_pipeline

    table = (engine.ruleset.table("schema_strategies") or {}).get("template_fixes") or {}
    out = []
    for name, entry in table.items():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("probe"), Mapping):
            continue
        fn = {"name": _TOOL_NAME, "description": _TOOL_DOC, "parameters": entry["probe"]}
        _text, err = _with_tool(r, fn)
        if err is None:
            continue
        fixed = compile_pipeline(entry.get("pipeline")).run(_TOOL_NAME, _TOOL_DOC,
                                                            entry["probe"])
        _, again = _with_tool(r, {**fn, "parameters": fixed.parameters})
        if again is None:
            out.append((str(name), err.message))
    return tuple(out)


def _with_tool(r: _Renderer, fn: Mapping[str, Any]) -> tuple[str | None, TemplateRaised | None]:
    saved = r.tool
    r.tool = {"type": "function", "function": dict(fn)}
    try:
        return r.render([_m("user", _U1)])
    finally:
        r.tool = saved


# ---------------------------------------------------------------- the capability fields

def _derive(engine: Any, pr: _Prober, call: CallFormat, reasoning: ReasoningFormat,
            renders_tools: bool, notes: list[str]) -> dict[str, Any]:
    def ok(name: str) -> bool:
        p = pr.get(name)
        return p is not None and p.ok

    def failed(name: str) -> bool:
        p = pr.get(name)
        return p is not None and p.outcome in ("raised", "failed", "dropped")

    def broke(name: str) -> bool:
        p = pr.get(name)
        return p is not None and p.outcome in ("raised", "failed")

    out: dict[str, Any] = {"native_tools": renders_tools}
    if call.dialect is not None:
        out["dialect"] = call.dialect
        if call.repairs:
            out["quirks"] = tuple(call.repairs)
        trained = {st.dialect for st in engine.emulation_styles() if st.trained}
        if not renders_tools and call.dialect in trained:
            # the tools go in an emulation prompt: ask for the format the template writes
            out["emulation_style"] = "dialect"
    if call.call_ids is not None:
        out["turn_call_ids"] = call.call_ids
    if reasoning.found:
        out["reasoning"] = True
    if not ok("system"):
        system = "none"
    elif ok("system-later") and ok("two-systems"):
        system = "anywhere"
    elif ok("two-systems"):
        system = "leading"
    else:
        system = "first"
    out["turn_system"] = system
    out["turn_alternate"] = any(failed(n) for n in ("consecutive-users",
                                                    "consecutive-assistants",
                                                    "assistant-first"))
    roles = []
    if ok("tool-result"):
        roles.append("tool")
    if ok("developer") and not ok("unknown-role"):
        # (a template that writes any role name it is given does not know developer)
        notes.append("the template knows a developer role; toolrules reads developer "
                     "messages as system messages, so turn_system covers them")
    if failed("two-calls") and ok("call"):
        out["parallel_tools"] = False
        out["turn_calls_per_message"] = 1
        how = "refuses" if broke("two-calls") else "drops the second of"
        notes.append(f"the template {how} two calls in one assistant message: "
                     "parallel_tools false, and a history with parallel calls is written one "
                     "call a message (turn_calls_per_message: 1)")
    out["turn_roles"] = tuple(roles)
    out["turn_content_required"] = (broke("call-without-content")
                                    or broke("call-with-null-content")) and not broke("call")
    history = pr.get("call-in-history")
    lost = set(history.missing) if history is not None else set()
    out["turn_text_with_calls"] = not failed("text-with-call") \
        and "the text beside the earlier call" not in lost
    out["turn_history_calls"] = not (broke("call-in-history") or "the earlier call" in lost)
    out["turn_results_follow_calls"] = failed("result-apart")
    if not ok("call") and not renders_tools:
        notes.append("the template renders no tool calls; turn_text_with_calls and "
                     "turn_history_calls describe what it does with them once written as text")
    return out


# ---------------------------------------------------------------- a rule stub

def rule_stub(report: TemplateReport, family: str, when: str) -> str:
    """A model-family rule (rules/models/<family>.yaml) holding what `report` derived,
    with a comment saying where it came from and when."""
    import yaml

    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", family):
        raise ParseError(f"family name {family!r} must be lowercase letters, digits, '.' and "
                         "'-' (starting with a letter or digit)")
    cap = report.capability
    dialect = cap.pop("dialect", None)
    body: dict[str, Any] = {
        "family": family,
        "description": f"{family}: turn constraints, call format and reasoning derived from "
                       "its chat template",
        "examples": [family],
        "match": [f"^{family.replace('.', chr(92) + '.')}(?=$|[-_:.])"],
    }
    if dialect is not None:
        body["dialect"] = dialect
    body["defaults"] = cap
    lines = [f"# Derived by `toolrules inspect` from {report.origin}",
             f"# (chat template sha256 {report.sha256[:16]}) on {when}.",
             "# What the template raised on or dropped when probed, and the dialect its calls",
             "# read back in; review before relying on it."]
    for p in report.probes:
        if p.outcome in ("raised", "failed", "dropped"):
            why = p.message or ("drops " + ", ".join(p.missing))
            lines.append(f"#   {p.name}: {p.outcome} - {_one_line(why, 90)}")
    text = yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=88)
    return "\n".join(lines) + "\n" + text


def _one_line(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."
