"""One proxied request: the client's conversation to the upstream and the answer back.

Native upstream: the request is translated and forwarded (`build_request` sends the
tools field), calls come back through the provider's rules - including calls a server
left as raw text in its content. Emulated upstream: `build_request` sends the emulation
prompt and the history rewritten as text; the answer is read with the model's dialect
(streamed through the incremental parser, so a call is only ever committed whole). For
an emulated model with a schema strategy the prompt shows the simplified schemas, and
the calls are restored to the original shape before anything else sees them.

A client that asks for a JSON answer (`json_output`: {schema, name}) has it asked of the
upstream in the upstream's own terms (its rule's `json_output:` section, e.g. a
json_schema response format) - or, when its API has none, by an instruction in the
prompt - and the answer is checked before the client sees it: the JSON value is taken
out of any prose or code fence around it and validated against the schema; an invalid
answer goes back once with what is wrong (or as often as the route's retries say).

Then, in order: the text fallback (prose read as a call, only when the route asks),
validation against the ORIGINAL schemas and, when the route allows retries, a retry:
the invalid calls go back upstream with the feedback template (valid ones with the
`held_call` text) until they validate or the retries are spent - before the client sees
a single call. A stream keeps its text flowing while calls wait for validation; the
text of a retry only reaches the client when no text was sent before.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import CapabilityError, ToolrulesError
from .._jsonutil import dumps_compact
from .._types import Message, ParsedResponse, StreamChunkType, Tool, ToolCall

__all__ = ["Exchange", "JsonTexts", "Outcome", "unwritable_options"]

_T = StreamChunkType


@dataclass
class Outcome:
    """What the exchange delivered, for the access log and the trace."""

    attempts: int = 0
    calls: int = 0
    invalid: int = 0
    native: bool = True
    usage: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    body: dict[str, Any] | None = None
    """The first request body sent upstream (the conversation's prompt, before any
    validation retry added to it)."""
    spans: list[tuple[float, float, float, str | None]] = field(default_factory=list)
    """Each attempt upstream: (perf_counter at its start, at its end, seconds spent
    parsing its answer, the server that answered) - for metrics and traces."""
    repairs: list[str] = field(default_factory=list)
    """The repairs every attempt's answer needed."""
    final: ParsedResponse | None = None
    """What the client got."""
    text_calls: int = 0
    """Calls the last attempt's answer held as raw text, read by `text_dialect`."""
    text_dialect: str | None = None


@dataclass(frozen=True)
class JsonTexts:
    """What the proxy writes to the upstream model about a JSON answer (the serve
    configuration's `messages`): `ask` when the upstream's API cannot be asked for JSON
    ({schema}: the schema, or "any JSON value"), `retry` after an invalid answer
    ({error}: what is wrong)."""

    ask: str = ("Answer with one JSON value and nothing else (no prose, no code fence). "
                "It must validate against this JSON Schema: {schema}")
    retry: str = ("That answer is not what was asked for: {error}. Answer again with the "
                  "JSON value alone, fixed.")


def _call_id(n: int | None = None) -> str:
    """A fresh call id (`n`: a numbered one, for reproducible output)."""
    return f"call_{n}" if n is not None else "call_" + uuid.uuid4().hex[:24]


class Exchange:
    """The upstream side of one request. `complete()` -> the final ParsedResponse;
    `events()` -> ("text" | "reasoning", str), ("call", ToolCall), ("done",
    ParsedResponse) in order."""

    def __init__(self, *, route: Any, client: Any, messages: list[Message], tools: list[Tool],
                 choice: Any, options: dict[str, Any], held_call: str,
                 trace: Any = None, numbered_ids: bool = False,
                 rewrites: list[dict[str, Any]] | None = None,
                 json_output: dict[str, Any] | None = None,
                 json_texts: JsonTexts | None = None, clock: Any = None):
        self.route = route
        self.clock = clock  # parse_clock()'s ParseClock: what the parsers did
        self.engine = route.engine
        self.client = client
        self.model_id: str = client.as_model
        self.messages = messages
        self.tools = tools
        self.options = options
        self.held_call = held_call
        self.trace = trace
        self._numbered = 0 if numbered_ids else None
        self._parsed_before = 0.0
        self._calls_before = 0
        self.outcome = Outcome()
        self.prefixed = False  # the proxy's prompt-prefix bookkeeping was done
        # what was changed before the conversation reached the upstream client (client
        # metadata taken out: the front's serve.volatile)
        self.pre_rewrites = list(rewrites or ())
        self.outcome.rewrites = list(self.pre_rewrites)
        eng = self.engine
        self.native = eng.sends_native_tools(self.model_id, client.provider) if tools else True
        self.outcome.native = self.native
        self.sent_tools: list[Tool] | tuple[Tool, ...] = tools
        self._restore = None
        # Constrained decoding holds the model to the original schemas (the grammar is
        # built from what is sent): simplifying them would only loosen the grammar.
        if tools and not self.native and not route.tools.constrained:
            simplified, restore = eng.simplify_tools(tools, self.model_id)
            if simplified is not tools and tuple(simplified) != tuple(tools):
                self.sent_tools, self._restore = simplified, restore
        self.choice = self._choice(choice)
        retries = route.tools.validation_retries
        if retries is not None:  # the route's count
            self.validate = retries > 0
            self.max_attempts: int | None = max(0, int(retries)) + 1
        else:  # the model's rules (capability validate_retry, rules/validation.yaml)
            self.validate = bool(eng.capability(self.model_id).validate_retry)
            self.max_attempts = None
        self.text_fallback = bool(route.tools.text_fallback)
        self.json_output = json_output
        self.json_texts = json_texts or JsonTexts()
        self._json_native = False
        if json_output is not None:
            # asked in the upstream API's own terms when its rule says how, else by prompt
            rules = eng.provider_rules(client.provider).data.get("json_output")
            self._json_native = isinstance(rules, dict) and bool(rules)
            if not self._json_native:
                schema = json_output.get("schema")
                ask = self.json_texts.ask.replace("{schema}", json.dumps(
                    schema, ensure_ascii=False) if schema else "any JSON value")
                lead = 0
                while lead < len(messages) and messages[lead].role == "system":
                    lead += 1
                self.messages = [*messages[:lead], Message(role="system", content=ask),
                                 *messages[lead:]]

    # ------------------------------------------------------------ set-up

    def _choice(self, choice: Any) -> Any:
        """The client's tool choice, or 'auto' when the upstream model cannot honour it
        (a proxy degrades rather than refusing the client)."""
        if choice is None or not self.tools:
            return choice
        try:
            self.engine.tool_choice(choice, self.client.provider, self.sent_tools,
                                    model=self.model_id)
        except CapabilityError:
            return "auto"
        return choice

    # ------------------------------------------------------------ calls

    def _final_calls(self, parsed: ParsedResponse, taken: set[str]) -> list[ToolCall]:
        """Calls restored to the original schemas, inferred from prose when asked, each
        with a unique id."""
        calls = list(parsed.tool_calls)
        if self._restore is not None:
            calls = [self._restore(c) for c in calls]
        if not calls and self.text_fallback and self.tools and parsed.content:
            found = self.engine.text_parser(model=self.model_id, tools=self.tools,
                                            heuristics=True).parse(parsed.content)
            calls = list(found.tool_calls)
            if calls:
                self.outcome.warnings.append("calls-inferred-from-text")
        out = []
        for c in calls:
            cid = c.id
            while not cid or cid in taken:
                cid = _call_id(self._numbered)
                if self._numbered is not None:
                    self._numbered += 1
            taken.add(cid)
            out.append(c if cid == c.id else ToolCall(cid, c.name, c.arguments, c.signature))
        return out

    def _check(self, calls: list[ToolCall], attempt: int) -> list[Message] | None:
        """None when the calls go to the client; else the messages asking for a fix."""
        if not calls or not self.validate or not self.tools:
            return None
        feedback: list[str | None] = []
        due = False
        for c in calls:
            check = self.engine.check_tool_calls((c,), self.tools, self.model_id,
                                                 attempt=attempt, retry=True,
                                                 max_attempts=self.max_attempts)
            if not check.ok:
                self.outcome.invalid += 1
            if check.retry and check.feedback:
                due = True
            feedback.append(check.feedback if not check.ok else None)
        if not due:
            return None
        out = []
        for c, text in zip(calls, feedback, strict=True):
            out.append(Message(role="tool", tool_call_id=c.id, name=c.name, is_error=True,
                               content=text or self.held_call))
        return out

    # ------------------------------------------------------------ tracing

    def _turn(self, attempt: int, msgs: list[Message], parsed: ParsedResponse,
              started: float, streamed: bool) -> None:
        rewrites = [*self.pre_rewrites,
                    *(r.as_dict() for r in getattr(self.client, "last_rewrites", ()))]
        self.outcome.rewrites = rewrites
        if attempt == 1:
            self.outcome.body = getattr(self.client, "last_body", None)
        clock = self.clock
        parsing = 0.0
        if clock is not None:
            parsing = clock.seconds - self._parsed_before
            self._parsed_before = clock.seconds
            self.outcome.text_calls = clock.calls - self._calls_before
            self.outcome.text_dialect = clock.dialect
            self._calls_before = clock.calls
        self.outcome.spans.append((started, time.perf_counter(), parsing,
                                   getattr(self.client, "server", None)))
        if parsed.repairs:
            self.outcome.repairs.extend(parsed.repairs)
        if self.trace is None:
            return
        self.trace.add({"type": "turn", "round": attempt,
                        "request": {"history": len(self.messages), "messages": msgs[len(self.messages):],
                                    "tools": [t.name for t in self.sent_tools],
                                    "tool_choice": self.choice,
                                    **({"rewrites": rewrites} if rewrites else {})},
                        "response": parsed, "streamed": streamed,
                        "ms": round((time.perf_counter() - started) * 1000.0, 3)})

    def _count(self, parsed: ParsedResponse) -> None:
        """The token counts the upstream reported for this attempt (its body, or its
        stream's events), added to the earlier attempts' (a retry is paid for too)."""
        found = self.engine.response_usage(parsed.raw, self.client.provider)
        if not found:
            return
        total = self.outcome.usage or {}
        self.outcome.usage = {**total, **{k: total.get(k, 0) + v for k, v in found.items()}}

    def _retry_notice(self, attempt: int) -> None:
        if self.trace is not None:
            self.trace.add({"type": "notice", "round": attempt, "notice": "validation_retry",
                            "content": "invalid calls sent back with feedback"})

    # ------------------------------------------------------------ the two modes

    def _request_options(self) -> dict[str, Any]:
        opts = dict(self.options)
        if self.route.tools.constrained and self.tools:
            # the upstream rule's `constrained:` section: a grammar or schema of a valid
            # call for an emulated model, strict schemas for a native one
            opts["constrained"] = True
        if self._json_native and self.json_output is not None:
            opts["json_output"] = self.json_output
        return opts

    # ------------------------------------------------------------ JSON answers

    def _json_check(self, text: str | None, calls: list[ToolCall], attempt: int
                    ) -> tuple[str | None, list[Message] | None]:
        """(the answer's text - the JSON value alone when one was found -, the messages
        asking for a fix or None). Only a JSON answer without calls is checked."""
        if self.json_output is None or calls:
            return text, None
        value, clean, problem = read_json_answer(text, self.json_output.get("schema"),
                                                 self.engine)
        if problem is None:
            return clean, None
        self.outcome.invalid += 1
        retries = self.route.tools.validation_retries
        if attempt > (1 if retries is None else max(0, int(retries))):
            self.outcome.warnings.append(f"json-output-invalid: {problem}")
            return clean if value is not None else text, None
        return text, [Message(role="assistant", content=text or ""),
                      Message(role="user", content=self.json_texts.retry.replace(
                          "{error}", problem))]

    async def complete(self) -> ParsedResponse:
        """The whole answer, after any validation retries."""
        msgs = list(self.messages)
        attempt = 0
        content: str | None = None
        reasoning: str | None = None
        taken: set[str] = {c.id for m in msgs for c in m.tool_calls if c.id}
        while True:
            attempt += 1
            started = time.perf_counter()
            parsed = await self.client.generate(msgs, self.sent_tools or None, self.choice,
                                                **self._request_options())
            self._turn(attempt, msgs, parsed, started, False)
            self.outcome.attempts = attempt
            self._count(parsed)
            reasoning = reasoning or parsed.reasoning_content
            calls = self._final_calls(parsed, taken)
            text, json_fix = self._json_check(parsed.content, calls, attempt)
            if json_fix is not None:
                msgs = [*msgs, *json_fix]
                continue
            content = text if self.json_output is not None else content or parsed.content
            fix = self._check(calls, attempt)
            if fix is None:
                return self._done(content, reasoning, calls, parsed)
            self._retry_notice(attempt)
            msgs = [*msgs, Message(role="assistant", content=parsed.content,
                                   reasoning_content=parsed.reasoning_content,
                                   tool_calls=tuple(calls)), *fix]

    async def events(self) -> AsyncGenerator[tuple[str, Any], None]:
        """The answer as it happens: text and reasoning as they arrive, calls once
        validated, then ("done", ParsedResponse)."""
        msgs = list(self.messages)
        attempt = 0
        sent_text: list[str] = []
        sent_reasoning: list[str] = []
        taken: set[str] = {c.id for m in msgs for c in m.tool_calls if c.id}
        while True:
            attempt += 1
            started = time.perf_counter()
            client = self.client  # this request's own client view: its own last_response
            # a JSON answer is held back until it is checked
            had_text = bool(sent_text) or self.json_output is not None
            had_reasoning = bool(sent_reasoning)
            async for chunk in client.stream(msgs, self.sent_tools or None, self.choice,
                                             **self._request_options()):
                kind = chunk.type
                if kind is _T.TEXT and chunk.content and not had_text:
                    sent_text.append(chunk.content)
                    yield "text", chunk.content
                elif kind is _T.REASONING and chunk.content and not had_reasoning:
                    sent_reasoning.append(chunk.content)
                    yield "reasoning", chunk.content
            parsed = client.last_response or ParsedResponse()
            self._count(parsed)
            self._turn(attempt, msgs, parsed, started, True)
            self.outcome.attempts = attempt
            calls = self._final_calls(parsed, taken)
            if self.json_output is not None:
                text, json_fix = self._json_check(parsed.content, calls, attempt)
                if json_fix is not None:
                    msgs = [*msgs, *json_fix]
                    continue
                if text:
                    sent_text = [text]
                    yield "text", text
            fix = self._check(calls, attempt)
            if fix is None:
                for c in calls:
                    yield "call", c
                yield "done", self._done("".join(sent_text) or None,
                                         "".join(sent_reasoning) or None, calls, parsed)
                return
            self._retry_notice(attempt)
            msgs = [*msgs, Message(role="assistant", content=parsed.content,
                                   reasoning_content=parsed.reasoning_content,
                                   tool_calls=tuple(calls)), *fix]

    def _done(self, content: str | None, reasoning: str | None, calls: list[ToolCall],
              last: ParsedResponse) -> ParsedResponse:
        finish = last.finish_reason
        if calls and finish in (None, "stop"):
            finish = "tool_calls"
        elif not calls and finish == "tool_calls":
            finish = "stop"
        self.outcome.calls = len(calls)
        self.outcome.warnings.extend(last.warnings)
        final = ParsedResponse(content=content, reasoning_content=reasoning,
                               tool_calls=tuple(calls), finish_reason=finish or "stop",
                               repairs=last.repairs, raw=None, warnings=last.warnings)
        self.outcome.final = final
        if self.trace is not None:
            self.trace.add({"type": "done", "stopped": "done", "content": content,
                            "calls": list(calls), "finish_reason": final.finish_reason,
                            "attempts": self.outcome.attempts, "invalid": self.outcome.invalid})
        return final


_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.S)


def read_json_answer(text: str | None, schema: Any, engine: Any
                     ) -> tuple[Any, str | None, str | None]:
    """(value, its JSON text, problem) for an answer that should be one JSON value: the
    value is taken from the whole text, else from a code fence, else from the first `{`
    or `[` on; `problem` says what is wrong (no JSON, or where it breaks the schema)."""
    from ..calls._validation import path_text, validation_rules

    raw = (text or "").strip()
    candidates = [raw, *(m.group(1).strip() for m in _FENCE.finditer(raw))]
    starts = [i for i in (raw.find("{"), raw.find("[")) if i >= 0]
    if starts:
        candidates.append(raw[min(starts):])
    decoder = json.JSONDecoder()
    found: tuple[Any, str] | None = None
    for cand in candidates:
        try:
            value, end = decoder.raw_decode(cand)
        except ValueError:
            continue
        if cand is raw and cand[end:].strip():
            continue  # the whole text is more than one value: look inside it
        found = (value, cand[:end])
        break
    if found is None:
        return None, None, "it holds no JSON value" if raw else "it is empty"
    value, clean = found
    if isinstance(schema, dict) and schema:
        try:
            validator = validation_rules(engine).validator(schema)
        except ToolrulesError:
            return value, clean, None  # a schema jsonschema cannot use: the value stands
        errors = sorted(validator.iter_errors(value), key=lambda e: len(list(e.path)))
        if errors:
            err = errors[0]
            where = path_text(err.absolute_path) or "the value"
            return value, clean, f"at {where}: {err.message[:300]}"
    return value, clean, None


# what sizes a value orjson cannot write (json.dumps, str() of what is not JSON)
_SIZER = json.JSONEncoder(ensure_ascii=False, default=str)


def estimate_tokens(value: Any, chars_per_token: float) -> int:
    """A token estimate from the JSON size of `value` (messages, tools, text)."""
    if value is None:
        return 0
    if isinstance(value, str):
        n = len(value)
    else:
        try:  # the compact JSON (orjson's: an agent's 100 KB request is sized often)
            n = len(dumps_compact(value))
        except (TypeError, ValueError):
            try:
                n = len(_SIZER.encode(value))
            except (TypeError, ValueError):
                n = 0
    return max(1, int(n / chars_per_token + 0.5)) if n else 0


def options_for(front: Any, upstream_options: Mapping[str, Any], body: Mapping[str, Any],
                asked: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The client's options the upstream's rule can write (a proxy cannot send an option
    the upstream API has no field for: `unwritable_options` names those for the access
    log and the trace). `asked`: `front.read_options(body)` when the caller has it."""
    if asked is None:
        asked = front.read_options(body)
    out = {k: v for k, v in asked.items() if k in upstream_options}
    parallel = front.read_parallel(body)
    if parallel is not None:
        out["parallel_tool_calls"] = parallel
    return out


def unwritable_options(asked: Mapping[str, Any], upstream_options: Mapping[str, Any],
                       upstream: str) -> dict[str, str]:
    """The client's options (`asked`: the front's `read_options`) the upstream's rule
    has no field for: field -> why it is ignored (for the access log and the trace - not
    dropped unseen)."""
    return {name: f"the upstream API ({upstream}) has no field for `{name}`"
            for name in asked if name not in upstream_options}


def safe_error(exc: ToolrulesError) -> str:
    return str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
