"""Engine.inspect_template: probe conversations rendered through a chat template find what
it enforces (raises, in its own words), what it drops, the dialect its calls read back in,
its reasoning markers and switches, and how it renders tool results.

Every template here is written for these tests: each reproduces one behaviour public
templates show (a system-position guard, single-system rendering, an alternation guard,
no tool role, a content attribute read, text beside calls or calls in the history not
rendered, a known call format, reasoning markers), in the smallest Jinja that does it.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from toolrules.chat_template._inspect import rule_stub
from toolrules.chat_template._render import TemplateRaised


def t(source: str) -> str:
    return textwrap.dedent(source).strip("\n")


# A permissive ChatML-style template: every role, tool results in their own turn, calls
# as JSON in <tool_call> beside the text. The baseline the others differ from.
PERMISSIVE = t("""
    {%- for m in messages %}
    <|im_start|>{{ m.role }}
    {% if m.content %}{{ m.content }}{% endif %}
    {%- for c in m.tool_calls or [] %}
    <tool_call>
    {"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
    </tool_call>
    {%- endfor %}<|im_end|>
    {% endfor %}
    {%- if tools %}<|im_start|>tools
    {{ tools | tojson }}<|im_end|>
    {% endif %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""")

# The same, with the tool list first (in its own turn before the conversation).
TOOLS_FIRST = t("""
    {%- if tools %}<|im_start|>tools
    {{ tools | tojson }}<|im_end|>
    {% endif %}
    {%- for m in messages %}
    <|im_start|>{{ m.role }}
    {% if m.content %}{{ m.content }}{% endif %}
    {%- for c in m.tool_calls or [] %}
    <tool_call>
    {"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
    </tool_call>
    {%- endfor %}<|im_end|>
    {% endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""")

# System only at the beginning: a later system message raises.
SYSTEM_GUARD = t("""
    {%- for m in messages %}
    {%- if m.role == 'system' and not loop.first %}{{ raise_exception('System message must be at the beginning.') }}{% endif %}
    <|im_start|>{{ m.role }}
    {{ m.content }}<|im_end|>
    {% endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""")

# Any number of system messages before the first other message; a later one raises.
LEADING_GUARD = t("""
    {%- set ns = namespace(started=false) %}
    {%- for m in messages %}
    {%- if m.role == 'system' and ns.started %}{{ raise_exception('System messages go before the conversation.') }}{% endif %}
    {%- if m.role != 'system' %}{% set ns.started = true %}{% endif %}
    <|im_start|>{{ m.role }}
    {{ m.content }}<|im_end|>
    {% endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""")

# Only the first message, if a system one, becomes the system prompt; other system
# messages are skipped without a word.
SINGLE_SYSTEM = t("""
    {%- if messages[0].role == 'system' %}[SYS]{{ messages[0].content }}[/SYS]{% endif %}
    {%- for m in messages %}
    {%- if m.role in ['user', 'assistant', 'tool'] %}[{{ m.role }}]{{ m.content }}[/{{ m.role }}]{% endif %}
    {%- endfor %}
    {%- if add_generation_prompt %}[assistant]{% endif %}
""")

# Roles must alternate user/assistant after an optional system message, which is folded
# into the first user turn; there is no tool role.
ALTERNATING = t("""
    {%- if messages[0].role == 'system' %}{% set first = messages[0].content + '\n\n' %}{% set rest = messages[1:] %}
    {%- else %}{% set first = '' %}{% set rest = messages %}{% endif %}
    {%- for m in rest %}
    {%- if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Roles must alternate user/assistant.') }}{% endif %}
    <turn>{{ 'model' if m.role == 'assistant' else m.role }}
    {{ first if loop.first else '' }}{{ m.content | trim }}</turn>
    {% endfor %}
    {%- if add_generation_prompt %}<turn>model
    {% endif %}
""")

# Tool results have no place: a tool message raises.
NO_TOOL_ROLE = t("""
    {%- for m in messages %}
    {%- if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('Unexpected message role.') }}{% endif %}
    <|im_start|>{{ m.role }}
    {{ m.content }}
    {%- for c in m.tool_calls or [] %}<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>
    {% endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""")

# The call message's content is read as an attribute and added to text: a message with
# calls and no content field fails.
CONTENT_ATTRIBUTE = t("""
    {%- for m in messages %}
    {%- if m.role == 'assistant' and m.tool_calls %}<A>{{ m.content + '<calls>' }}
    {%- for c in m.tool_calls %}{{ c.function.name }}:{{ c.function.arguments | tojson }};{% endfor %}</calls></A>
    {%- else %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endif %}
    {%- endfor %}
    {%- if add_generation_prompt %}<A>{% endif %}
""")

# An assistant message with calls renders its calls only: the text beside them vanishes.
CALLS_WITHOUT_TEXT = t("""
    {%- for m in messages %}
    {%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant
    {% for c in m.tool_calls %}<tool_call>
    {"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
    </tool_call>{% endfor %}<|im_end|>
    {% else %}<|im_start|>{{ m.role }}
    {{ m.content }}<|im_end|>
    {% endif %}
    {%- endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""")

# Messages render as role and text only: calls in the history vanish.
TEXT_ONLY = t("""
    {%- for m in messages %}<|{{ m.role }}|>{{ m.content or '' }}<|end|>{% endfor %}
    {%- if add_generation_prompt %}<|assistant|>{% endif %}
""")

# Tool results must directly follow the message that made the calls.
RESULTS_FOLLOW = t("""
    {%- for m in messages %}
    {%- if m.role == 'tool' and messages[loop.index0 - 1].role not in ['assistant', 'tool'] %}{{ raise_exception('A tool result must follow its call.') }}{% endif %}
    <|im_start|>{{ m.role }}
    {{ m.content or '' }}
    {%- for c in m.tool_calls or [] %}<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>
    {% endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""")

# Tagged parameters (the qwen3-coder shape): <function=NAME><parameter=KEY>VALUE...;
# reasoning_content in <think>, and a switch whose off position closes an empty block.
TAGGED_REASONING = t("""
    {%- for m in messages %}
    {%- if m.role == 'assistant' %}<|im_start|>assistant
    {% if m.reasoning_content %}<think>
    {{ m.reasoning_content }}
    </think>

    {% endif %}{{ m.content or '' }}
    {%- for c in m.tool_calls or [] %}
    <tool_call>
    <function={{ c.function.name }}>
    {% for k, v in c.function.arguments | items %}<parameter={{ k }}>
    {{ v if v is string else v | tojson }}
    </parameter>
    {% endfor %}</function>
    </tool_call>
    {%- endfor %}<|im_end|>
    {% elif m.role == 'tool' %}<|im_start|>user
    <tool_response>
    {{ m.content }}
    </tool_response><|im_end|>
    {% else %}<|im_start|>{{ m.role }}
    {{ m.content }}<|im_end|>
    {% endif %}
    {%- endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% if enable_thinking is defined and not enable_thinking %}<think>

    </think>

    {% else %}<think>
    {% endif %}{% endif %}
""")

# The Mistral v3 shape: [TOOL_CALLS] followed by a JSON array of calls.
CALL_ARRAY = t("""
    {%- for m in messages %}
    {%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]
    {%- elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS][{% for c in m.tool_calls %}{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}{{ ', ' if not loop.last }}{% endfor %}]</s>
    {%- elif m.role == 'assistant' %}{{ m.content }}</s>
    {%- elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]
    {%- else %}{{ m.content }}{% endif %}
    {%- endfor %}
""")

# Arguments concatenated as text: only a JSON string renders.
TEXT_ARGUMENTS = t("""
    {%- for m in messages %}
    {%- if m.role == 'assistant' %}<A>{{ m.content or '' }}{% for c in m.tool_calls or [] %}<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ '' + c.function.arguments }}}</tool_call>{% endfor %}</A>
    {%- else %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endif %}
    {%- endfor %}
    {%- if add_generation_prompt %}<A>{% endif %}
""")

# A developer role of its own (rendered apart from system), unknown roles dropped.
DEVELOPER_ROLE = t("""
    {%- for m in messages %}
    {%- if m.role in ['system', 'developer', 'user', 'assistant', 'tool'] %}<|start|>{{ m.role }}<|message|>{{ m.content or '' }}<|end|>{% endif %}
    {%- endfor %}
    {%- if add_generation_prompt %}<|start|>assistant{% endif %}
""")

# One call a message: a second call raises.
ONE_CALL = t("""
    {%- for m in messages %}
    {%- if m.tool_calls and m.tool_calls | length > 1 %}{{ raise_exception('One call per message.') }}{% endif %}
    <|im_start|>{{ m.role }}
    {{ m.content or '' }}
    {%- for c in m.tool_calls or [] %}<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>
    {% endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""")


def probe(report, name):
    p = report.probe(name)
    assert p is not None, name
    return p


def test_permissive_template_sets_the_defaults(engine):
    r = engine.inspect_template(PERMISSIVE, origin="permissive")
    cap = r.capability
    assert cap["turn_system"] == "anywhere"
    assert cap["turn_alternate"] is False
    assert cap["turn_content_required"] is False
    assert cap["turn_text_with_calls"] is True
    assert cap["turn_history_calls"] is True
    assert cap["turn_results_follow_calls"] is False
    assert cap["native_tools"] is True and r.renders_tools
    assert "tool" in cap["turn_roles"]
    # a template that writes any role name it is given does not know developer
    assert probe(r, "unknown-role").ok and "developer" not in cap["turn_roles"]
    assert r.generation_prompt == "<|im_start|>assistant\n"
    assert r.call.dialect == "hermes"
    assert r.tool_result == "<|im_start|>tool\n{result}<|im_end|>\n"


def test_system_position_guard(engine):
    r = engine.inspect_template(SYSTEM_GUARD)
    later = probe(r, "system-later")
    assert later.outcome == "raised"
    assert later.message == "System message must be at the beginning."
    assert probe(r, "two-systems").outcome == "raised"
    assert probe(r, "system").ok
    assert r.capability["turn_system"] == "first"


def test_leading_system_messages(engine):
    r = engine.inspect_template(LEADING_GUARD)
    assert probe(r, "two-systems").ok
    assert probe(r, "system-later").message == "System messages go before the conversation."
    assert r.capability["turn_system"] == "leading"


def test_single_system_rendering_is_a_silent_drop(engine):
    r = engine.inspect_template(SINGLE_SYSTEM)
    two = probe(r, "two-systems")
    assert two.outcome == "dropped" and two.missing == ("the second system text",)
    assert probe(r, "system-later").outcome == "dropped"
    assert probe(r, "developer").outcome == "dropped"
    assert r.capability["turn_system"] == "first"
    assert "developer" not in r.capability["turn_roles"]


def test_alternation_guard_and_folded_system(engine):
    r = engine.inspect_template(ALTERNATING)
    users = probe(r, "consecutive-users")
    assert users.outcome == "raised" and users.message == "Roles must alternate user/assistant."
    assert probe(r, "assistant-first").outcome == "raised"
    assert probe(r, "system").ok  # folded into the first user turn, not lost
    cap = r.capability
    assert cap["turn_alternate"] is True
    assert cap["turn_system"] == "first"
    assert cap["turn_roles"] == []
    assert r.tool_result is None
    assert r.capability["native_tools"] is False  # the tool list is never written


def test_missing_tool_role(engine):
    r = engine.inspect_template(NO_TOOL_ROLE)
    tool = probe(r, "tool-result")
    assert tool.outcome == "raised" and tool.message == "Unexpected message role."
    assert probe(r, "result-apart").outcome == "skipped"
    assert "tool" not in r.capability["turn_roles"]
    assert r.tool_result is None
    # what follows a call is then a user turn, and the call itself still renders
    assert probe(r, "call").ok


def test_content_attribute_access(engine):
    r = engine.inspect_template(CONTENT_ATTRIBUTE)
    without = probe(r, "call-without-content")
    assert without.outcome == "failed"
    assert "content" in (without.message or "")
    assert probe(r, "call-with-null-content").outcome == "failed"
    assert probe(r, "call").ok
    assert r.capability["turn_content_required"] is True


def test_content_null_alone_is_enough(engine):
    # a missing field reads as empty here, but null content is searched like text
    src = t("""
        {%- for m in messages %}<{{ m.role }}>{% if m.content is defined and '<x>' in m.content %}!{% endif %}{{ m.content or '' }}
        {%- for c in m.tool_calls or [] %}<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}</{{ m.role }}>{% endfor %}
        {%- if add_generation_prompt %}<assistant>{% endif %}
    """)
    r = engine.inspect_template(src)
    assert probe(r, "call-without-content").ok
    assert probe(r, "call-with-null-content").outcome == "failed"
    assert r.capability["turn_content_required"] is True


def test_text_beside_calls_not_rendered(engine):
    r = engine.inspect_template(CALLS_WITHOUT_TEXT)
    beside = probe(r, "text-with-call")
    assert beside.outcome == "dropped" and beside.missing == ("the text beside the call",)
    assert r.capability["turn_text_with_calls"] is False
    assert r.capability["turn_history_calls"] is True
    assert r.call.dialect == "hermes"


def test_calls_in_history_not_rendered(engine):
    r = engine.inspect_template(TEXT_ONLY)
    hist = probe(r, "call-in-history")
    assert hist.outcome == "dropped" and "the earlier call" in hist.missing
    assert r.capability["turn_history_calls"] is False
    assert r.call.dialect is None
    assert "does not contain the call" in (r.call.note or "")


def test_results_must_follow_calls(engine):
    r = engine.inspect_template(RESULTS_FOLLOW)
    apart = probe(r, "result-apart")
    assert apart.outcome == "raised" and apart.message == "A tool result must follow its call."
    assert probe(r, "tool-result").ok
    assert r.capability["turn_results_follow_calls"] is True


def test_tagged_parameter_format_and_reasoning_markers(engine):
    r = engine.inspect_template(TAGGED_REASONING)
    assert r.call.dialect == "qwen3-coder"
    assert r.capability["dialect"] == "qwen3-coder"
    assert r.call.tricky_strings is True and r.call.two_calls is True
    assert "<parameter=count>\n42\n</parameter>" in r.call.text
    rs = r.reasoning
    assert (rs.field, rs.open, rs.close) == ("reasoning_content", "<think>", "</think>")
    assert rs.dialect_markers is True
    assert rs.opened_by_prompt is True  # the generation prompt ends inside <think>
    assert rs.history is True
    [(var, on, off)] = rs.switches
    assert var == "enable_thinking"
    assert on == "<|im_start|>assistant\n<think>\n"
    assert off == "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert r.capability["reasoning"] is True
    assert r.tool_result == "<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n"


def test_json_array_format_reads_as_its_dialect(engine):
    r = engine.inspect_template(CALL_ARRAY)
    assert r.call.dialect == "mistral-v3"
    assert r.call.text.startswith("[TOOL_CALLS][{")
    assert r.generation_prompt == ""
    # the template never renders the tools: they go in an emulation prompt that asks for
    # the format the template writes
    assert r.capability["native_tools"] is False
    assert r.capability["emulation_style"] == "dialect"
    assert "quirks" not in r.capability  # read back with no repair


def test_a_template_that_renders_the_tools_keeps_them_native(engine):
    r = engine.inspect_template(TOOLS_FIRST)
    assert r.capability["native_tools"] is True
    assert r.capability["dialect"] == "hermes"
    assert "emulation_style" not in r.capability and "turn_tools" not in r.capability


def test_tools_written_after_the_conversation_move_every_turn(engine):
    """PERMISSIVE writes the tool list after the last message: each turn pushes it on,
    so a server would process it again every turn - the tools go in the system prompt,
    in the template's own call format."""
    r = engine.inspect_template(PERMISSIVE)
    assert r.capability["native_tools"] is True
    assert all(not c.stable and c.fix == "turn_tools: system" for c in r.prefix)
    assert r.capability["turn_tools"] == "system"
    assert r.capability["emulation_style"] == "dialect"


def test_arguments_taken_as_json_text(engine):
    r = engine.inspect_template(TEXT_ARGUMENTS)
    assert r.call.arguments == "json-text"
    assert r.call.dialect is not None
    assert "JSON string" in (r.call.note or "")
    # the probes use the form the template takes: the call renders in them
    assert probe(r, "call").ok


def test_developer_role_of_its_own(engine):
    r = engine.inspect_template(DEVELOPER_ROLE)
    assert probe(r, "developer").ok
    assert probe(r, "unknown-role").outcome == "dropped"
    # developer messages are read as system messages: the role is noted, not a field
    assert r.capability["turn_roles"] == ["tool"]
    assert any("developer role" in n for n in r.notes)


def test_one_call_per_message(engine):
    r = engine.inspect_template(ONE_CALL)
    two = probe(r, "two-calls")
    assert two.outcome == "raised" and two.message == "One call per message."
    assert r.capability["parallel_tools"] is False
    assert r.capability["turn_calls_per_message"] == 1
    assert any("two calls" in n for n in r.notes)


def test_a_template_that_does_not_render_is_an_error(engine):
    with pytest.raises(TemplateRaised) as err:
        engine.inspect_template("{{ raise_exception('No conversations today.') }}")
    assert "No conversations today." in str(err.value)
    with pytest.raises(TemplateRaised) as err:
        engine.inspect_template("{% for m in messages %}{{ m.content }\n")
    assert err.value.raised is False
    assert "line 1" in err.value.message and "SyntaxError" in err.value.message


def test_a_template_that_breaks_on_rich_schemas_is_probed_with_a_plain_tool(engine):
    # renders a type name from a map that knows only strings
    src = t("""
        {%- set names = {'string': 'str'} %}
        {%- for tool in tools or [] %}{{ tool.function.name }}
        {% for k, v in tool.function.parameters.properties | items %}{{ k }}: {{ names[v.type] + '' }}
        {% endfor %}{% endfor %}
        {%- for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}
        {%- if add_generation_prompt %}<assistant>{% endif %}
    """)
    r = engine.inspect_template(src)
    assert r.renders_tools
    assert any("one-string-parameter tool" in n for n in r.notes)


def test_report_is_json_and_a_lintable_rule(engine, tmp_path):
    from toolrules._engine import lint_rules
    from toolrules.rules._loader import discover, layers_for

    r = engine.inspect_template(SYSTEM_GUARD, origin="tests/system_guard.jinja")
    data = json.loads(json.dumps(r.as_dict()))
    assert data["capability"]["turn_system"] == "first"
    assert data["origin"] == "tests/system_guard.jinja"
    text = rule_stub(r, "guarded-chat", "2026-01-01")
    assert text.startswith("# Derived by `toolrules inspect` from tests/system_guard.jinja")
    assert "system-later: raised - System message must be at the beginning." in text
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "guarded-chat.yaml").write_text(text, encoding="utf-8")
    rs = discover(layers_for([str(tmp_path)], use_env=False))
    assert [p for p in lint_rules(rs) if p.level == "error"] == []
    import toolrules

    overlaid = toolrules.load(paths=[str(tmp_path)], use_env=False, cache=False)
    cap = overlaid.capability("guarded-chat-7b")
    assert cap.turn_system == "first" and cap.native_tools is False
    with pytest.raises(Exception, match="family name"):
        rule_stub(r, "Bad Name", "2026-01-01")


def test_untrusted_template_stays_in_the_sandbox(engine):
    with pytest.raises(TemplateRaised) as err:
        engine.inspect_template("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    assert err.value.raised is False


# a template that writes each call's id as its header (as Kimi-K2-Thinking's does): the
# probe call reads back only when its id carries the tool's name
ID_AS_HEADER = """
{%- for m in messages -%}
<|im_{{ m.role }}|>{{ m.content if m.content is string else '' }}
{%- if m.tool_calls is defined and m.tool_calls -%}
<|tool_calls_section_begin|>
{%- for c in m.tool_calls -%}
<|tool_call_begin|>{{ c.id }}<|tool_call_argument_begin|>{{ c.function.arguments | tojson }}<|tool_call_end|>
{%- endfor -%}
<|tool_calls_section_end|>
{%- endif -%}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_assistant|>{% endif -%}
"""


def test_ids_written_as_headers_ask_for_named_ids(engine):
    r = engine.inspect_template(ID_AS_HEADER)
    assert r.call.dialect == "kimi-k2"
    assert r.capability["turn_call_ids"] == "functions.{name}:{index}"
    assert any("turn_call_ids" in n for n in r.notes)


# ---------------------------------------------------------------- the prompt prefix

BENCH = __import__("pathlib").Path(__file__).resolve().parent.parent / "templates" / "bench"


def bench_template(name: str) -> str:
    return (BENCH / f"{name}.jinja").read_text(encoding="utf-8")


def checks(report):
    return {c.name: c for c in report.prefix}


def test_a_template_whose_prompts_only_grow_asks_for_nothing(engine):
    r = engine.inspect_template(TOOLS_FIRST, origin="tools-first")
    assert [(c.name, c.kept) for c in r.prefix] == [("tool-turn", 1.0), ("user-turn", 1.0)]
    cap = r.capability
    assert not {"turn_tools", "turn_template_kwargs", "turn_tool_schema"} & set(cap)
    assert r.schema_fixes == ()


def test_earlier_thinking_dropped_unless_a_variable_is_set(engine):
    r = engine.inspect_template(bench_template("drop-thinking"), origin="drop-thinking")
    c = checks(r)["user-turn"]
    assert checks(r)["tool-turn"].stable and not c.stable and 0 < c.kept < 1
    assert "<think>" in c.previous and "<think>" not in c.new
    assert c.moved == '"<think>\\n\\n</think>\\n\\n" of an earlier turn, left out'
    assert c.fix == "turn_template_kwargs: {preserve_thinking: true}"
    assert r.capability["turn_template_kwargs"] == {"preserve_thinking": True}
    assert "turn_tools" not in r.capability


def test_a_tool_list_that_moves_goes_into_the_system_prompt(engine):
    r = engine.inspect_template(bench_template("tools-before-last-user"), origin="tblu")
    c = checks(r)["user-turn"]
    assert c.kept is not None and c.kept < 0.5
    assert c.moved.startswith("the tool definitions") and "[AVAILABLE_TOOLS]" in c.previous
    assert c.fix == "turn_tools: system"
    cap = r.capability
    assert cap["turn_tools"] == "system" and cap["native_tools"] is True
    # its calls are Mistral's: the tools go in that trained format
    assert cap["dialect"] == "mistral-v3" and cap["emulation_style"] == "dialect"


def test_a_template_that_reads_every_property_type_needs_the_types_fix(engine):
    r = engine.inspect_template(bench_template("property-type"), origin="property-type")
    assert [f for f, _w in r.schema_fixes] == ["property-types"]
    assert "'type'" in r.schema_fixes[0][1]
    assert r.capability["turn_tool_schema"] == ["property-types"]
    # the others render an untyped property as it is
    assert engine.inspect_template(bench_template("chatml-tools")).schema_fixes == ()


def test_a_break_nothing_fixes_is_said_plainly(engine):
    # the message count is written first: every turn changes the prompt's first line
    counting = "Conversation of {{ messages | length }} messages\n" + TOOLS_FIRST
    r = engine.inspect_template(counting, origin="counting")
    for c in r.prefix:
        assert c.kept is not None and c.kept < 0.1 and c.at is not None and c.fix is None
        assert c.previous.startswith("Conversation of")
    assert any("no variable of the template or tool placement keeps it" in n
               for n in r.notes)
    assert "turn_tools" not in r.capability


def test_a_variable_that_changes_the_generation_prompt_is_not_used_as_a_fix(engine):
    """A thinking switch changes what the model does: it is never turned off to keep a
    prefix (only variables that leave the generation prompt alone are tried)."""
    source = t("""
        {%- for m in messages %}
        <|im_start|>{{ m.role }}
        {% if m.role == 'assistant' and not enable_thinking is false %}<think></think>{% endif %}{{ m.content or '' }}<|im_end|>
        {% endfor %}
        {%- if add_generation_prompt %}<|im_start|>assistant
        {% if enable_thinking is false %}<think></think>{% endif %}{% endif %}
    """)
    r = engine.inspect_template(source, origin="switch")
    assert any(v == "enable_thinking" for v, _a, _b in r.reasoning.switches)
    assert all(not (c.fix or "").startswith("turn_template_kwargs") for c in r.prefix)


def test_the_fields_a_template_needs_for_its_prefix_make_a_lintable_rule(engine, tmp_path):
    from toolrules._engine import lint_rules
    from toolrules.rules._loader import discover, layers_for

    r = engine.inspect_template(bench_template("drop-thinking"), origin="drop-thinking")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "thinker.yaml").write_text(rule_stub(r, "thinker", "2026-11-28"),
                                                      encoding="utf-8")
    rs = discover(layers_for([str(tmp_path)], use_env=False))
    assert [p for p in lint_rules(rs) if p.level == "error"] == []
    import toolrules

    cap = toolrules.load(paths=[str(tmp_path)], use_env=False, cache=False).capability(
        "thinker-7b")
    assert cap.template_kwargs == {"preserve_thinking": True}
    r2 = engine.inspect_template(bench_template("property-type"), origin="property-type")
    (tmp_path / "models" / "typed.yaml").write_text(rule_stub(r2, "typed", "2026-11-28"),
                                                    encoding="utf-8")
    cap2 = toolrules.load(paths=[str(tmp_path)], use_env=False, cache=False).capability(
        "typed-7b")
    assert cap2.turn_tool_schema == ("property-types",)
