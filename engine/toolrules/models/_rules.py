"""Model ids and capabilities: rules/ids.yaml normalizes, rules/models/*.yaml decide.

Parsing an id:
  1. provider prefixes (ids.yaml `providers`) are removed, possibly naming an org;
  2. `org/name` splits off the organisation (custom unless in `vendor_orgs`);
  3. the name is lowercased, `strip` patterns remove tags, quantization and dates
     (a `date` group is kept as written; `year`/`month`/`day` groups are kept in that
     order, so `-08-2024` becomes 202408), `rewrites` normalize separators (3_1 -> 3.1);
  4. family patterns (highest priority first) match at the start; what follows the
     match is split into tokens: sizes (70b, 8x7b), active sizes (a3b), versions
     (v0.3, 3.2) when none was captured, the rest joins the variant;
  5. no anchored match: a family pattern found inside the name makes it a custom
     derivative of that family; nothing at all: an unknown family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from .._types import Capability, ModelSpec
from ..rules._loader import RuleSet

__all__ = ["ModelRules", "Resolution", "check_rules"]

MAX_ID_CHARS = 512
_CAP_FIELDS = {f.name for f in fields(Capability)}
_OPS = ("<=", ">=", "==", "!=", "<", ">")
_SIZE_UNITS = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def parse_version(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    parts = re.split(r"[._-]", str(text).strip().lstrip("vV"))
    out = []
    for p in parts:
        if not p.isdigit():
            break
        out.append(int(p))
    return tuple(out)


def parse_size(text: str | None) -> int | None:
    """'70B' -> 70e9, '8x7b' -> 56e9, '1.5b' -> 1.5e9, '135m' -> 135e6."""
    if not text:
        return None
    m = re.fullmatch(r"(?:(\d+)x)?(\d+(?:\.\d+)?)([kmbt])?", str(text).strip().lower())
    if not m:
        return None
    count = int(m.group(1) or 1)
    unit = _SIZE_UNITS[m.group(3) or "b"]
    return round(count * float(m.group(2)) * unit)


def _compare(op: str, left: Any, right: Any) -> bool:
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right,
            "==": left == right, "!=": left != right}[op]


def _split_op(expr: str) -> tuple[str, str]:
    expr = expr.strip()
    for op in _OPS:
        if expr.startswith(op):
            return op, expr[len(op):].strip()
    return "==", expr


@dataclass(frozen=True, slots=True)
class Resolution:
    """A resolved id: the spec, the capability, and which rule lines decided it."""

    spec: ModelSpec
    capability: Capability
    trace: tuple[str, ...]
    overridden: bool = False
    """An explicit override (`overrides:` in a model file) applied to this id."""


@dataclass(slots=True)
class _Family:
    name: str
    file: str
    priority: int
    patterns: list[tuple[re.Pattern[str], re.Pattern[str], int]]  # anchored, search, index
    defaults: dict[str, Any]
    clauses: list[tuple[dict[str, Any], dict[str, Any], int]]     # when, set, index
    assume: dict[str, Any]
    rule: Any = None
    _marked: Any = None

    def line(self, *path: Any) -> int:
        """1-based line of a node of this family's file (read again if the data came
        from the disk cache, which keeps no marks)."""
        from ..rules._yaml import MarkedDict, load_yaml, mark_of

        if self._marked is None:
            data = self.rule.data
            self._marked = data if isinstance(data, MarkedDict) else load_yaml(self.rule.text)[0]
        return mark_of(self._marked, path)[0]


def _capability_values(block: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(block or {})
    for key in ("quirks", "decline_calls", "input_media", "turn_roles", "turn_tool_schema"):
        if key in out and out[key] is not None:
            out[key] = tuple(out[key])
    kwargs = out.get("turn_template_kwargs")
    if isinstance(kwargs, dict):  # a mapping in the rule; hashable pairs in the Capability
        out["turn_template_kwargs"] = tuple(sorted(kwargs.items()))
    return out


class ModelRules:
    """Compiled id normalization and family rules (built once per engine)."""

    def __init__(self, rs: RuleSet):
        ids = rs.table("ids") or {}
        self._providers = [(re.compile(p["pattern"], re.I), p["provider"])
                           for p in ids.get("providers", [])]
        self._vendor_orgs = {o.lower() for o in ids.get("vendor_orgs", [])}
        self._rewrites = [(re.compile(r["pattern"]), r["replace"]) for r in ids.get("rewrites", [])]
        self._strip = [re.compile(p) for p in ids.get("strip", [])]
        self._size_token = re.compile(ids.get("size_token") or r"^(?:\d+x)?\d+(?:\.\d+)?[kmbt]$")
        self._active_token = re.compile(ids.get("active_token") or r"^a(\d+(?:\.\d+)?[kmbt])$")
        self._ignore = set(ids.get("ignore_tokens", []))
        self._fallback = re.compile(ids.get("fallback_family") or r"^[a-z]+")
        self._families: list[_Family] = []
        self._overrides: list[tuple[str | None, re.Pattern[str] | None, dict[str, Any], str]] = []
        models = rs.files.get("model", {})
        for rid in sorted(models):
            rf = models[rid]
            data = rf.data or {}
            for i, ov in enumerate(data.get("overrides", []) or []):
                pat = re.compile(ov["pattern"], re.I) if ov.get("pattern") else None
                where = f"{rf.display} overrides[{i}]"
                self._overrides.append((ov.get("id"), pat, _capability_values(ov.get("set")),
                                        where))
            if not data.get("match"):
                continue
            defaults = _capability_values(data.get("defaults"))
            for key, field_name in (("dialect", "dialect"), ("schema", "schema_strategy")):
                if data.get(key) is not None:
                    defaults.setdefault(field_name, data[key])
            if data.get("quirks"):
                defaults.setdefault("quirks", tuple(data["quirks"]))
            pats = []
            for j, pat in enumerate(data["match"]):
                body = pat[1:] if pat.startswith("^") else pat
                pats.append((re.compile(pat), re.compile(r"(?:^|(?<=[-_/. ]))" + body), j))
            clauses = []
            for j, cl in enumerate(data.get("capabilities", []) or []):
                clauses.append((cl["when"], _capability_values(cl["set"]), j))
            self._families.append(_Family(
                name=data.get("family", rid), file=rf.display, priority=data.get("priority", 0),
                patterns=pats, defaults=defaults, clauses=clauses,
                assume=dict(data.get("assume") or {}),
                rule=rf))
        self._families.sort(key=lambda f: (-f.priority, f.name))
        self._by_name = {f.name: f for f in self._families}

    # ------------------------------------------------------------ parsing

    def family_names(self) -> list[str]:
        return sorted(self._by_name)

    def parse(self, model_id: Any) -> ModelSpec:
        return self._parse(model_id)[0]

    def _parse(self, model_id: Any) -> tuple[ModelSpec, _Family | None, str]:
        raw = model_id if isinstance(model_id, str) else str(model_id)
        text = raw.strip()[:MAX_ID_CHARS]
        provider = org = None
        for _ in range(3):
            for pat, name in self._providers:
                m = pat.match(text)
                if m:
                    provider = provider or name
                    if m.groupdict().get("org"):
                        org = m.group("org")
                    text = text[m.end():]
                    break
            else:
                break
        if "/" in text:
            parts = [p for p in text.split("/") if p]
            if len(parts) >= 2:
                org = org or parts[0]
                text = parts[-1]
            elif parts:
                text = parts[0]
        custom = bool(org) and str(org).lower() not in self._vendor_orgs
        name = text.lower()
        date = None
        for _ in range(4):
            before = name
            for pat in self._strip:
                m = pat.search(name)
                if m:
                    if date is None:
                        date = _date_of(m)
                    name = name[:m.start()] + name[m.end():]
            if name == before:
                break
        for pat, repl in self._rewrites:
            name = pat.sub(repl, name)
        name = name.strip("-_:. ")
        for fam in self._families:
            for anchored, _search, j in fam.patterns:
                m = anchored.match(name)
                if m:
                    spec = self._spec(fam, m, name, m.end(), raw, provider, org, custom, date)
                    return (spec, fam,
                            f"{fam.file}:{fam.line('match', j)}: match {anchored.pattern!r}")
        for fam in self._families:
            for anchored, search, j in fam.patterns:
                m = search.search(name)
                if m:
                    spec = self._spec(fam, m, name, m.end(), raw, provider, org, True, date)
                    return (spec, fam, f"{fam.file}:{fam.line('match', j)}: found "
                            f"{anchored.pattern!r} inside the id")
        m = self._fallback.search(name)
        family = m.group(0) if m else "unknown"
        return (ModelSpec(family=family or "unknown", provider=provider, org=org, custom=True,
                          date=date, known=False, model_id=raw), None,
                "no family rule matched: conservative defaults")

    def _spec(self, fam: _Family, m: re.Match[str], name: str, end: int, raw: str,
              provider: str | None, org: str | None, custom: bool, date: str | None) -> ModelSpec:
        g = {k: v for k, v in m.groupdict().items() if v}
        version = parse_version(g.get("version"))
        size = parse_size(g.get("size"))
        active = parse_size(g.get("active"))
        variant_parts = [g["variant"]] if g.get("variant") else []
        date = g.get("date", date)
        for tok in re.split(r"[-_:\s]+", name[end:]):
            if not tok or tok in self._ignore:
                continue
            am = self._active_token.match(tok)
            if am and active is None:
                active = parse_size(am.group(1))
            elif self._size_token.match(tok) and size is None:
                size = parse_size(tok)
            elif re.fullmatch(r"v?\d{1,3}(?:\.\d+)*", tok) and not version:
                version = parse_version(tok)
            elif re.fullmatch(r"\d{4}|\d{6}|\d{8}", tok) and date is None:
                date = tok
            else:
                variant_parts.append(tok)
        variant = "-".join(variant_parts) or None
        return ModelSpec(family=g.get("family", fam.name), version=version, variant=variant,
                         size=size, provider=provider, org=org, custom=custom, date=date,
                         active_size=active, known=True, model_id=raw)

    # ------------------------------------------------------------ capabilities

    def resolve(self, model_id: Any) -> Resolution:
        spec, fam, why = self._parse(model_id)
        trace = [why]
        values: dict[str, Any] = {}
        if fam is not None:
            values.update(fam.defaults)
            if fam.defaults:
                trace.append(f"{fam.file}:{fam.line('defaults')}: family defaults")
            for when, setv, j in fam.clauses:
                if self._matches(when, spec, fam):
                    values.update(setv)
                    trace.append(f"{fam.file}:{fam.line('capabilities', j)}: when {dict(when)}")
                    break
        raw = spec.model_id.strip()
        overridden = False
        for exact, pat, setv, where in self._overrides:
            if (exact is not None and exact.lower() == raw.lower()) or \
                    (pat is not None and pat.search(raw)):
                values.update(setv)
                trace.append(f"{where}: override")
                overridden = True
        return Resolution(spec, Capability(**{k: v for k, v in values.items()
                                              if k in _CAP_FIELDS}), tuple(trace), overridden)

    def _matches(self, when: dict[str, Any], spec: ModelSpec, fam: _Family) -> bool:
        for key, want in when.items():
            if key == "version":
                have = spec.version or parse_version(fam.assume.get("version"))
                op, ref = _split_op(str(want))
                if not have or not _compare(op, _pad(have), _pad(parse_version(ref))):
                    return False
            elif key in ("size", "active_size"):
                size = getattr(spec, key) or (parse_size(fam.assume.get("size"))
                                              if key == "size" else None)
                op, ref = _split_op(str(want))
                ref_size = parse_size(ref)
                if size is None or ref_size is None or not _compare(op, size, ref_size):
                    return False
            elif key == "date":
                op, ref = _split_op(str(want))
                if not spec.date or not spec.date.isdigit() or not ref.isdigit():
                    return False
                if not _compare(op, int(spec.date), int(ref)):
                    return False
            elif key == "custom":
                if bool(spec.custom) != bool(want):
                    return False
            else:
                text = {"variant": spec.variant, "provider": spec.provider, "org": spec.org,
                        "family": spec.family, "id": spec.model_id}.get(key)
                if not _text_matches(want, text, tokens=(key == "variant")):
                    return False
        return True


def _date_of(m: re.Match[str]) -> str | None:
    """The date a strip match names: group `date` as written (dashes dropped), or groups
    `year`, `month`, `day` joined in that order (so `08-2024` can become `202408`)."""
    g = m.groupdict()
    if g.get("date"):
        return g["date"].replace("-", "")
    if g.get("year"):
        return g["year"] + (g.get("month") or "") + (g.get("day") or "")
    return None


def _pad(v: tuple[int, ...], n: int = 4) -> tuple[int, ...]:
    return v + (0,) * (n - len(v))


def _text_matches(want: Any, have: str | None, tokens: bool = False) -> bool:
    options = want if isinstance(want, list) else [want]
    value = (have or "").lower()
    for opt in options:
        opt = str(opt)
        if opt.startswith("~"):
            if re.search(opt[1:], value):
                return True
        elif opt.lower() == value or (tokens and opt.lower() in value.split("-")):
            return True
    return False



# ---------------------------------------------------------------- lint cross-checks

def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    from ..rules._lint import check_regex

    ids = rs.get("table", "ids")
    if ids is not None and ("table", "ids") not in failed:
        for i, p in enumerate(ids.data.get("providers", []) or []):
            check_regex(rep, ids, ("providers", i, "pattern"), p.get("pattern"))
        for i, p in enumerate(ids.data.get("rewrites", []) or []):
            check_regex(rep, ids, ("rewrites", i, "pattern"), p.get("pattern"))
        for i, p in enumerate(ids.data.get("strip", []) or []):
            check_regex(rep, ids, ("strip", i), p)
        for key in ("size_token", "active_token", "fallback_family"):
            if key in ids.data:
                check_regex(rep, ids, (key,), ids.data[key])
    elif ids is None:
        rep.problems.append(_missing_table("ids"))
    dialects = set(rs.ids("dialect"))
    have_dialects = bool(dialects)
    families: dict[str, str] = {}
    for rid, rf in sorted(rs.files.get("model", {}).items()):
        if rf.yaml_problem is not None or not isinstance(rf.data, dict):
            continue
        data = _Tolerant(rf.data)
        fam = data.get("family")
        if data.get("match") and fam is None:
            rep.error(rf, (), "a model file with `match` patterns needs `family:` "
                      f"(for example `family: {rid}`)", "model-family")
        if fam is not None and fam != rid:
            rep.error(rf, ("family",), f"family {fam!r} must equal the file stem {rid!r} "
                      f"(rename the file to {fam}.yaml)", "rule-id")
        if fam is not None:
            if fam in families:
                rep.error(rf, ("family",), f"family {fam!r} is also defined in "
                          f"{families[fam]}", "duplicate-family")
            families[fam] = rf.display
        if not data.get("match") and not data.get("overrides"):
            rep.error(rf, (), "a model file needs `match` patterns (a family) or `overrides`",
                      "model-empty")
        for j, pat in enumerate(data.get("match")):
            compiled = check_regex(rep, rf, ("match", j), pat)
            if compiled is not None:
                bad = set(compiled.groupindex) - {"family", "version", "size", "active",
                                                  "variant", "date"}
                if bad:
                    rep.error(rf, ("match", j), f"unknown named group(s) {sorted(bad)}; use "
                              "family, version, size, active, variant, date", "model-groups")
        for j, ov in enumerate(data.get("overrides", []) or []):
            if not ov.get("id") and not ov.get("pattern"):
                rep.error(rf, ("overrides", j), "an override needs `id` or `pattern`",
                          "model-override")
            if ov.get("pattern"):
                check_regex(rep, rf, ("overrides", j, "pattern"), ov["pattern"])
        for j, cl in enumerate(data.get("capabilities", []) or []):
            when = cl.get("when") or {}
            for key in ("version", "size", "active_size", "date"):
                if key in when:
                    _op, ref = _split_op(str(when[key]))
                    ok = (parse_version(ref) if key == "version" else
                          parse_size(ref) if key.endswith("size") else ref.isdigit())
                    if not ok:
                        rep.error(rf, ("capabilities", j, "when", key),
                                  f"cannot read {key} condition {when[key]!r}; write it like "
                                  + {"version": "'>=3.1'", "size": "'<70B'",
                                     "active_size": "'<=3B'", "date": "'>=2506'"}[key],
                                  "model-condition")
            for key in ("variant", "id"):
                value = when.get(key)
                for opt in (value if isinstance(value, list) else [value]):
                    if isinstance(opt, str) and opt.startswith("~"):
                        check_regex(rep, rf, ("capabilities", j, "when", key), opt[1:])
        _check_turns(rep, rf, data)
        # dialect references
        refs: list[tuple[tuple[Any, ...], str]] = []
        if data.get("dialect"):
            refs.append((("dialect",), data["dialect"]))
        if (data.get("defaults") or {}).get("dialect"):
            refs.append((("defaults", "dialect"), data["defaults"]["dialect"]))
        for j, cl in enumerate(data.get("capabilities", []) or []):
            if (cl.get("set") or {}).get("dialect"):
                refs.append((("capabilities", j, "set", "dialect"), cl["set"]["dialect"]))
        for j, ov in enumerate(data.get("overrides", []) or []):
            if (ov.get("set") or {}).get("dialect"):
                refs.append((("overrides", j, "set", "dialect"), ov["set"]["dialect"]))
        for path, name in refs:
            if isinstance(name, str) and name not in dialects:
                level = "error" if have_dialects else "warning"
                rep.add(rf, path, f"dialect {name!r} is not defined in rules/dialects/",
                        "missing-dialect", level)


def _check_turns(rep: Any, rf: Any, data: Any) -> None:
    """Turn constraints that say nothing as written: a byte-stable system prefix where
    system messages may stand anywhere (nothing is moved, so nothing needs keeping)."""
    defaults = data.get("defaults") or {}
    clauses: list[tuple[tuple[Any, ...], Any]] = [(("defaults",), {})] + [
        ((section, j, "set"), cl.get("set") or {})
        for section in ("capabilities", "overrides")
        for j, cl in enumerate(data.get(section, []) or []) if isinstance(cl, dict)]
    for path, setv in clauses:
        if not isinstance(setv, dict):
            continue
        merged = {**defaults, **setv}
        if merged.get("turn_system_stable") and \
                merged.get("turn_system", "anywhere") == "anywhere" and \
                ("turn_system_stable" in setv or path == ("defaults",)):
            where = path + ("turn_system_stable",) if "turn_system_stable" in setv else \
                ("defaults", "turn_system_stable")
            rep.warning(rf, where, "turn_system_stable has no effect while turn_system is "
                        "anywhere (no system text is moved); set turn_system (first, leading "
                        "or none) or drop it", "turn-constraints")


class _Tolerant(dict):
    """A view of possibly schema-invalid data where wrongly typed parts read as empty."""

    _LISTS = ("match", "capabilities", "overrides")
    _DICTS = ("defaults", "assume")

    def get(self, key: Any, default: Any = None) -> Any:
        value = super().get(key, default)
        if key in self._LISTS:
            return [_Tolerant(v) if isinstance(v, dict) else v
                    for v in value] if isinstance(value, list) else []
        if key in self._DICTS or key in ("when", "set"):
            return _Tolerant(value) if isinstance(value, dict) else {}
        return value

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)


def _missing_table(name: str) -> Any:
    from .._errors import Problem

    return Problem(f"rules/{name}.yaml", 1, 1, "error", f"the {name} table is missing",
                   "missing-table")


def spec_dict(spec: ModelSpec) -> dict[str, Any]:
    """A ModelSpec as a plain dict without empty fields (for golden files and JSON)."""
    out: dict[str, Any] = {"family": spec.family}
    if spec.version:
        out["version"] = ".".join(map(str, spec.version))
    for key in ("variant", "size", "active_size", "provider", "org", "date"):
        value = getattr(spec, key)
        if value is not None:
            out[key] = value
    if spec.custom:
        out["custom"] = True
    if not spec.known:
        out["known"] = False
    return out


