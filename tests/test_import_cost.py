"""`import toolrules` stays cheap: public names load their modules on first use, and
`toolrules.load()` from the validated cache needs neither the runtime, the clients, the
proxy nor their dependencies. Each check runs a fresh interpreter and reads sys.modules
(how fast it is, is `toolrules bench --only import`'s business, not a test's)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import toolrules

# Dependencies a program pays for only when it uses the feature that needs them.
HEAVY = ("asyncio", "concurrent.futures", "ssl", "httpx", "jsonschema", "jinja2",
         "llama_cpp", "starlette", "uvicorn", "pydantic", "lark", "cerberus", "jmespath",
         "click", "rich", "yaml", "plotly", "prompt_toolkit", "prometheus_client",
         "opentelemetry", "orjson")
# toolrules' own subpackages that `import toolrules` and `load()` must not reach
LAZY_PACKAGES = ("runtime", "clients", "serve", "evals", "calls", "dialects", "emulation",
                 "providers", "models", "cli", "golden", "bench")


def _modules_after(code: str) -> set[str]:
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def _ours(modules: set[str]) -> list[str]:
    return sorted(m for m in modules
                  if any(m == f"toolrules.{p}" or m.startswith(f"toolrules.{p}.")
                         for p in LAZY_PACKAGES))


def test_import_toolrules_imports_no_heavy_module():
    mods = _modules_after("import toolrules")
    assert "toolrules" in mods
    assert _heavy(mods) == []
    assert _ours(mods) == []


def test_load_from_the_cache_imports_no_heavy_module(tmp_path):
    code = "import toolrules\ntoolrules.load()"
    env_code = (f"import os\nos.environ['TOOLRULES_CACHE_DIR'] = {str(tmp_path)!r}\n"
                "os.environ['TOOLRULES_CACHE'] = '1'\n")
    _modules_after(env_code + code)  # the first load validates and writes the cache
    mods = _modules_after(env_code + code)
    assert "toolrules._engine" in mods
    assert _heavy(mods) == []
    assert _ours(mods) == []


def test_a_public_name_imports_its_module_on_first_use():
    mods = _modules_after("import toolrules\ntoolrules.ToolLoop")
    assert "toolrules.runtime._loop" in mods
    assert "asyncio" in mods  # the loop needs it, and gets it when used
    assert "toolrules.serve" not in mods


@pytest.mark.parametrize("name", toolrules.__all__)
def test_every_public_name_resolves(name):
    assert getattr(toolrules, name) is not None
    assert name in dir(toolrules)


def test_a_subpackage_is_an_attribute_on_first_use():
    mods = _modules_after("import toolrules\nprint(toolrules.runtime.envelope_of)")
    assert "toolrules.runtime" in mods and "toolrules.serve" not in mods


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        toolrules.NoSuchThing  # noqa: B018


def test_the_default_engine_needs_no_prior_load():
    """Module-level helpers build the default engine themselves, even when the program
    imported them straight from their module and never touched `toolrules.load`."""
    out = subprocess.run([sys.executable, "-c",
                          "from toolrules.calls._part import validate_tool_call\n"
                          "tool = {'type': 'function', 'function': {'name': 'f', 'parameters':"
                          " {'type': 'object', 'properties': {'n': {'type': 'integer'}}}}}\n"
                          "print([e.error for e in validate_tool_call("
                          "{'name': 'f', 'arguments': {'n': 'x'}}, [tool])])"],
                         capture_output=True, text=True, timeout=120, check=True)
    assert "integer" in out.stdout
