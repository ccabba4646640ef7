"""Finding rule files, layering overlays, parsing YAML and validating the set.

A *layer* is a directory laid out like the bundled `rules/`:

    <layer>/models/*.yaml      model families          (kind "model")
    <layer>/providers/*.yaml   provider wire formats    (kind "provider")
    <layer>/dialects/*.yaml    raw-text call formats    (kind "dialect")
    <layer>/policies/*.yaml    execution policies       (kind "policy")
    <layer>/tools/*.yaml       tool definitions         (kind "toolset")
    <layer>/scenarios/*.yaml   evaluation scenarios     (kind "scenario")
    <layer>/serve/*.yaml       proxy configurations     (kind "serve")
    <layer>/mcp/*.yaml         MCP servers              (kind "mcp")
    <layer>/*.yaml             cross-cutting tables     (kind "table", id = file stem)
    <layer>/templates/**       Jinja templates          (bundled: the repo's templates/)
    <layer>/grammars/*.lark    Lark grammars            (bundled: the repo's grammars/)

Layers apply in order (bundled, then TOOLRULES_PATH entries, then load(paths=...)):
a file with the same kind and id replaces the earlier one, a new id adds one.
"""

from __future__ import annotations

import hashlib
import marshal
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import Problem
from .._version import __version__
from ._yaml import YamlProblem, load_yaml, plain

__all__ = ["Asset", "Layer", "RuleFile", "RuleSet", "bundled_layer", "discover", "layers_for",
           "merge"]

KIND_DIRS = {"models": "model", "providers": "provider", "dialects": "dialect",
             "policies": "policy", "tools": "toolset", "scenarios": "scenario",
             "serve": "serve", "mcp": "mcp"}
MAX_RULE_FILE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Layer:
    """One directory of rules (plus where its templates and grammars live)."""

    rules: Path
    templates: Path
    grammars: Path
    bundled: bool = False


@dataclass(slots=True)
class RuleFile:
    """One rule file: its kind, id (the file stem), where it is, and its parsed data."""

    kind: str
    id: str
    path: Path
    display: str
    layer: int
    text: str
    data: Any = None
    yaml_problem: YamlProblem | None = None
    yaml_warnings: list[YamlProblem] = field(default_factory=list)


@dataclass(slots=True)
class Asset:
    """A template or grammar file."""

    name: str
    path: Path
    display: str
    layer: int
    text: str


@dataclass(slots=True)
class RuleSet:
    """Everything a set of layers defines, after overlaying."""

    layers: tuple[Layer, ...]
    files: dict[str, dict[str, RuleFile]]
    templates: dict[str, Asset]
    grammars: dict[str, Asset]
    replaced: list[tuple[RuleFile, RuleFile]] = field(default_factory=list)
    digest: str = ""

    def get(self, kind: str, rule_id: str) -> RuleFile | None:
        return self.files.get(kind, {}).get(rule_id)

    def ids(self, kind: str) -> list[str]:
        return sorted(self.files.get(kind, {}))

    def all_files(self) -> list[RuleFile]:
        return [f for kind in sorted(self.files) for _, f in sorted(self.files[kind].items())]

    def table(self, name: str) -> Any:
        f = self.get("table", name)
        return f.data if f is not None else None


def _package_root() -> Path:
    return Path(__file__).resolve().parent.parent


def bundled_layer() -> Layer:
    """The rules shipped with toolrules: inside the wheel, or the repo for editable installs."""
    data = _package_root() / "_data"
    if (data / "rules").is_dir():
        return Layer(data / "rules", data / "templates", data / "grammars", bundled=True)
    repo = _package_root().parent.parent
    return Layer(repo / "rules", repo / "templates", repo / "grammars", bundled=True)


def _user_layer(path: Path) -> Layer:
    return Layer(path, path / "templates", path / "grammars")


def layers_for(paths: Sequence[str | os.PathLike[str]] | None = None,
               use_env: bool = True, include_bundled: bool = True) -> tuple[Layer, ...]:
    """Bundled layer, then TOOLRULES_PATH entries, then `paths`."""
    layers: list[Layer] = [bundled_layer()] if include_bundled else []
    if use_env:
        for entry in os.environ.get("TOOLRULES_PATH", "").split(os.pathsep):
            if entry.strip():
                layers.append(_user_layer(Path(entry.strip()).expanduser()))
    for p in paths or ():
        layers.append(_user_layer(Path(p).expanduser()))
    return tuple(layers)


def _display(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # pragma: no cover - other drive on Windows
        return str(path)


def _read(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_RULE_FILE_BYTES:
        raise YamlProblem(f"file is {size} bytes; rule files are limited to "
                          f"{MAX_RULE_FILE_BYTES} bytes", 1, 1, check="file-size")
    return path.read_text(encoding="utf-8")


def _rule_files(layer: Layer, index: int) -> Iterable[RuleFile]:
    root = layer.rules
    if root.is_file():  # a single file given directly: kind from its parent directory
        kind = KIND_DIRS.get(root.parent.name, "table")
        yield _make_rule_file(kind, root, index)
        return
    if not root.is_dir():
        return
    for sub, kind in KIND_DIRS.items():
        d = root / sub
        if d.is_dir():
            for p in sorted(d.glob("*.yaml")):
                yield _make_rule_file(kind, p, index)
    for p in sorted(root.glob("*.yaml")):
        yield _make_rule_file("table", p, index)


def _make_rule_file(kind: str, path: Path, index: int) -> RuleFile:
    rf = RuleFile(kind=kind, id=path.stem, path=path, display=_display(path), layer=index, text="")
    try:
        rf.text = _read(path)
    except (OSError, UnicodeDecodeError) as exc:
        rf.yaml_problem = YamlProblem(f"cannot read file: {exc}", 1, 1, check="file-read")
    except YamlProblem as exc:
        rf.yaml_problem = exc
    return rf


def _assets(root: Path, pattern: str, index: int) -> Iterable[Asset]:
    if not root.is_dir():
        return
    for p in sorted(root.rglob(pattern)):
        if p.is_file():
            name = p.relative_to(root).as_posix()
            try:
                text = _read(p)
            except (OSError, UnicodeDecodeError, YamlProblem):
                text = ""
            yield Asset(name=name, path=p, display=_display(p), layer=index, text=text)


def discover(layers: Sequence[Layer]) -> RuleSet:
    """Read every file of every layer (no parsing yet) and overlay them."""
    files: dict[str, dict[str, RuleFile]] = {}
    templates: dict[str, Asset] = {}
    grammars: dict[str, Asset] = {}
    replaced: list[tuple[RuleFile, RuleFile]] = []
    h = hashlib.sha256(__version__.encode())
    for index, layer in enumerate(layers):
        for rf in _rule_files(layer, index):
            bucket = files.setdefault(rf.kind, {})
            if rf.id in bucket:
                replaced.append((bucket[rf.id], rf))
            bucket[rf.id] = rf
        for a in _assets(layer.templates, "*.j2", index):
            templates[a.name] = a
        for a in _assets(layer.grammars, "*.lark", index):
            grammars[a.name] = a
    for kind in sorted(files):
        for rid, rf in sorted(files[kind].items()):
            h.update(f"\0{kind}\0{rid}\0{rf.display}\0".encode())
            h.update(rf.text.encode())
    for assets in (templates, grammars):
        for name, a in sorted(assets.items()):
            h.update(f"\0asset\0{name}\0".encode())
            h.update(a.text.encode())
    return RuleSet(tuple(layers), files, templates, grammars, replaced, h.hexdigest())


def parse_all(rs: RuleSet) -> None:
    """Parse the YAML of every winning file, keeping line marks."""
    for rf in rs.all_files():
        if rf.yaml_problem is not None or rf.data is not None:
            continue
        try:
            rf.data, rf.yaml_warnings = load_yaml(rf.text)
        except YamlProblem as exc:
            rf.yaml_problem = exc


# ---------------------------------------------------------------- disk cache

def _cache_dir() -> Path | None:
    if os.environ.get("TOOLRULES_CACHE", "1").lower() in ("0", "false", "no", "off"):
        return None
    base = os.environ.get("TOOLRULES_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "toolrules"


def cache_read(rs: RuleSet) -> bool:
    """Fill `rs` from a validated snapshot with the same content digest, if one exists."""
    d = _cache_dir()
    if d is None:
        return False
    try:
        blob = (d / f"rules-{rs.digest[:32]}.marshal").read_bytes()
        snapshot = marshal.loads(blob)
    except (OSError, ValueError, EOFError, TypeError):
        return False
    if not isinstance(snapshot, dict) or snapshot.get("digest") != rs.digest:
        return False
    data = snapshot.get("data", {})
    for rf in rs.all_files():
        key = f"{rf.kind}/{rf.id}"
        if key not in data:
            return False
        rf.data = data[key]
    return True


def cache_write(rs: RuleSet) -> None:
    """Store the validated data of `rs` (plain values only) under its digest."""
    d = _cache_dir()
    if d is None:
        return
    snapshot = {"digest": rs.digest,
                "data": {f"{rf.kind}/{rf.id}": plain(rf.data) for rf in rs.all_files()}}
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".rules-{rs.digest[:32]}.{os.getpid()}.tmp"
        tmp.write_bytes(marshal.dumps(snapshot))
        tmp.replace(d / f"rules-{rs.digest[:32]}.marshal")
    except (OSError, ValueError):
        pass


def yaml_problems(rs: RuleSet) -> list[Problem]:
    out: list[Problem] = []
    for rf in rs.all_files():
        if rf.yaml_problem is not None:
            p = rf.yaml_problem
            out.append(Problem(rf.display, p.line, p.col, "error", p.message, p.check))
        for w in rf.yaml_warnings:
            out.append(Problem(rf.display, w.line, w.col, "warning", w.message, w.check))
    return out


def merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """A rule's data over the one it `extends:` (providers, policies, serve configs): mappings
    merge, lists and values replace, null removes."""
    out = dict(base)
    for k, v in child.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out
