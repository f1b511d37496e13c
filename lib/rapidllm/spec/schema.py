"""JSON-schema validation of spec mappings with one readable line per error.

Quantities use custom formats (bytes, bandwidth, time, frequency, flops) checked by rapidllm.units, so a
wrong unit reads "hbm_bandwidth: '3.35 TB' is not a bandwidth; use a unit like '2.0 TB/s'". Numbers must be
finite (NaN and infinities satisfy no JSON-schema bound, so they are refused by type), and the keyword
`positive: true` asks a quantity to be > 0 and `at_least: "17 KiB"` at least that much. The bounds
themselves live in the schemas (docs/limits.md).

YAML is read with the C loader, refusing duplicate keys, files over MAX_SPEC_BYTES and documents whose
aliases expand past MAX_SPEC_VALUES values (an alias bomb is small on disk and exponential in memory).
"""
from __future__ import annotations

import copy
import difflib
import functools
import math
import numbers
import re
import reprlib
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from rapidllm import units
from rapidllm.spec.errors import SpecError
from rapidllm.spec.paths import KINDS, schema_dir

QUANTITY_FORMATS = ("bytes", "bandwidth", "time", "frequency", "flops")
MAX_SPEC_BYTES = 4 * 2**20        # spec files are hand-written: the largest in the project is 7 kB
MAX_SPEC_VALUES = 2**18           # values after alias expansion (the largest spec, sweep-1000, has 583)
MAX_DEPTH = 64                    # nesting of mappings and lists (a case is 4 deep)

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 60, 60, 6, 6, 2


def short(value: Any) -> str:
    """A value's repr cut for one error line (a bad value may be a whole file)."""
    text = _REPR.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def json_safe(value: Any) -> Any:
    """`value` ready for strict JSON: numpy scalars as Python ones, NaN and infinities as None (null), in
    nested dicts and lists too. Every JSON rapidllm writes goes through this (JSON has no NaN)."""
    if hasattr(value, "item") and not isinstance(value, (dict, list, tuple)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _finite_number(checker: Any, instance: Any) -> bool:
    """JSON-schema `number`, finite: NaN and infinities pass every bound, so they are not numbers here."""
    return isinstance(instance, numbers.Real) and not isinstance(instance, bool) and math.isfinite(instance)


def _integer(checker: Any, instance: Any) -> bool:
    """JSON-schema `integer`, strictly: jsonschema also takes 8.0, which a case would then carry as a float
    (a world of "64.0 GPUs" and a case id of its own), so a count written with a decimal point is refused."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def _positive(validator: Any, value: bool, instance: Any, schema: dict) -> Any:
    """`positive: true` on a quantity: its SI value must be > 0 (the format already checked the unit)."""
    kind = schema.get("format")
    if not value or kind not in QUANTITY_FORMATS:
        return
    try:
        si = units.parse_quantity(instance, kind)
    except units.UnitError:
        return
    if si <= 0:
        yield jsonschema.ValidationError(f"{short(instance)} is out of range; allowed: a {units.NOUN[kind]} > 0")


def _at_least(validator: Any, value: str, instance: Any, schema: dict) -> Any:
    """`at_least: "17 KiB"` on a quantity: its SI value must be >= that quantity of the key's format."""
    kind = schema.get("format")
    if kind not in QUANTITY_FORMATS:
        return
    try:
        si, low = units.parse_quantity(instance, kind), units.parse_quantity(value, kind)
    except units.UnitError:
        return
    if si < low:
        bare = isinstance(instance, (int, float)) or not re.search(r"[A-Za-z]", str(instance))
        hint = (f" (a number without a unit is in {units.SI_UNIT[kind]}: write e.g. {units.KIND_EXAMPLES[kind]})"
                if bare else "")
        yield jsonschema.ValidationError(
            f"{short(instance)} is out of range; allowed: a {units.NOUN[kind]} >= {value}{hint}")


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker()
    for kind in QUANTITY_FORMATS:
        def check(value: Any, kind: str = kind) -> bool:
            units.parse_quantity(value, kind)
            return True
        checker.checks(kind, raises=units.UnitError)(check)
    return checker


@functools.cache
def _schemas(folder: Path) -> tuple[dict[str, Any], Registry]:
    """Every schema of the folder parsed once (C YAML loader), and the registry `$ref`s resolve in: a
    command validating a case, a model, a device and a fabric parsed all of them four times before."""
    schemas = {p.name: yaml.load(p.read_text(), Loader=_Loader) for p in sorted(folder.glob("*.schema.yaml"))}
    # A `$ref` to a whole file (hardware's `cost.schema.yaml`) made jsonschema pick the validator class anew
    # from that file's `$schema`: the stock one, without the finite number type and `positive`, so NaN passed
    # under it. The registry's copies drop `$schema` (every schema here is draft 2020-12), keeping ours.
    registry = Registry().with_resources(
        [(name, DRAFT202012.create_resource({k: v for k, v in s.items() if k != "$schema"}))
         for name, s in schemas.items()])
    return schemas, registry


def schema_of(kind: str) -> dict[str, Any]:
    """The parsed workflow/schemas/{kind}.schema.yaml (shared: do not mutate)."""
    return _schemas(schema_dir())[0][f"{kind}.schema.yaml"]


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    schemas, registry = _schemas(schema_dir())
    schema = schemas[f"{kind}.schema.yaml"]
    base = jsonschema.validators.validator_for(schema)
    types = base.TYPE_CHECKER.redefine_many({"number": _finite_number, "integer": _integer})
    cls = jsonschema.validators.extend(base, validators={"positive": _positive, "at_least": _at_least},
                                       type_checker=types)
    return cls(schema, registry=registry, format_checker=_format_checker())


def valid_alone(kind: str, path: tuple[str, ...], value: Any) -> bool:
    """Whether `value` passes the subschema of the `kind` schema at `path` (one property name per level),
    judged by `kind`'s own validator (its types, keywords and formats) on that subschema alone. False where
    the subschema refers elsewhere (`$ref`): only a subschema that stands alone is judged here. A per-key
    schema (spec/named.py: validate_by_key) accepts a mapping exactly when each value passes its own."""
    sub = _sub_validator(kind, str(schema_dir()), path)
    return sub is not None and sub.is_valid(value)


@functools.lru_cache(maxsize=256)
def _sub_validator(kind: str, folder: str, path: tuple[str, ...]) -> jsonschema.protocols.Validator | None:
    """`_validator(kind)` evolved onto the subschema at `path` (`folder`: the schema directory it was read
    from), or None when the subschema holds a `$ref`."""
    schema: Any = schema_of(kind)
    for name in path:
        schema = schema.get("properties", {}).get(name) if isinstance(schema, dict) else None
    if not isinstance(schema, (dict, bool)) or "$ref" in repr(schema):
        return None
    return _validator(kind).evolve(schema=schema)


def _key(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _describe(error: jsonschema.ValidationError) -> str:
    v = error.validator
    if v in ("oneOf", "anyOf", "not") and "errorMessage" in error.schema:
        return error.schema["errorMessage"]       # a schema's own words for a combination rule
    if v == "required":
        missing = error.message.split("'")[1]
        return f"missing key '{missing}'"
    if v == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        meant = [m for k in extra for m in close_names(str(k), allowed)[:1]]     # global_bacth -> global_batch
        hint = f" (did you mean {', '.join(meant)}?)" if meant else ""
        return f"unknown key(s) {', '.join(map(repr, extra))}{hint}; allowed: {', '.join(allowed)}"
    if v == "enum":
        return f"{short(error.instance)} is not allowed; allowed: {', '.join(map(str, error.validator_value))}"
    if v == "const":
        return f"{short(error.instance)} is not allowed; allowed: {error.validator_value!r}"
    if v == "format":
        cause = error.cause
        return str(cause) if cause else error.message
    if v == "type":
        kinds = error.validator_value
        finite = " (finite)" if "number" in kinds or "integer" in kinds else ""
        if "integer" in kinds and isinstance(error.instance, float) and error.instance.is_integer():
            if not error.schema.get("minimum", -math.inf) <= error.instance <= error.schema.get("maximum", math.inf):
                return f"{short(error.instance)} is out of range; allowed: {_range(error.schema)}"
            finite = f" (write {int(error.instance)}, without a decimal point)"
        if finite and isinstance(error.instance, str) and _numeric_text(error.instance):
            value = float(error.instance)
            if not error.schema.get("minimum", -math.inf) <= value <= error.schema.get("maximum", math.inf):
                return f"{short(error.instance)} is out of range; allowed: {_range(error.schema)}"  # not "write 1e30"
            spelt = int(value) if "number" not in kinds and value.is_integer() else _yaml_number(error.instance)
            finite += f"; YAML reads it as text: write {spelt}"
        return f"{short(error.instance)} is not of type {kinds}{finite}"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{short(error.instance)} is out of range; allowed: {_range(error.schema)}"
    if v in ("minItems", "maxItems", "minProperties"):
        return f"{len(error.instance)} entries; allowed: {_length(error.schema)}"
    if v == "pattern":
        return f"{short(error.instance)} is not allowed; allowed: text matching {error.validator_value}"
    if v in ("oneOf", "anyOf") and error.context:
        return _describe(_branch_error(error))
    return error.message


def close_names(value: str, names: list[str]) -> list[str]:
    """The names a misspelt `value` probably meant (for "did you mean"): those it begins (h100 ->
    h100-sxm5-80gb), else those it extends (mixtral-8x7b-instruct -> mixtral-8x7b), else the closest by
    difflib's ratio (gpt3-175b -> gpt-175b, global_bacth -> global_batch); none when nothing is close."""
    low = value.lower()
    return ([n for n in names if n.startswith(low)] or [n for n in names if low.startswith(n)]
            or difflib.get_close_matches(low, names, n=2, cutoff=0.75))


def _numeric_text(text: str) -> bool:
    """Whether YAML left a number as a string: PyYAML (YAML 1.1) reads 7.0e10 and 1e30 as text, since its
    float pattern wants a dot and a signed exponent (7.0e+10)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _yaml_number(text: str) -> str:
    """The spelling of `text` YAML reads as a number: 7.0e10 -> 7.0e+10, 1e30 -> 1.0e+30."""
    mantissa, _, exponent = text.lower().partition("e")
    if not exponent:
        return text
    mantissa = mantissa if "." in mantissa else f"{mantissa}.0"
    return f"{mantissa}e{exponent if exponent[0] in '+-' else '+' + exponent}"


def _range(schema: dict) -> str:
    """'integer 1 to 1048576', 'number > 0 and <= 1': the bounds a numeric key's schema states."""
    lo = (f">= {schema['minimum']}" if "minimum" in schema else
          f"> {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else "")
    hi = (f"<= {schema['maximum']}" if "maximum" in schema else
          f"< {schema['exclusiveMaximum']}" if "exclusiveMaximum" in schema else "")
    if "minimum" in schema and "maximum" in schema:
        return f"{schema.get('type', 'number')} {schema['minimum']} to {schema['maximum']}"
    return f"{schema.get('type', 'number')} {' and '.join(b for b in (lo, hi) if b)}"


def _length(schema: dict) -> str:
    lo = schema.get("minItems", schema.get("minProperties"))
    hi = schema.get("maxItems")
    if lo is not None and hi is not None:
        return f"{lo} to {hi} entries"
    return f"at least {lo} entries" if lo is not None else f"at most {hi} entries"


def _branch_error(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """The error to report for a oneOf/anyOf: from the one branch whose discriminating `const` (such as the
    workload's `mode`) matched, so an inference workload is not judged against the training branch; else
    jsonschema's best match over all branches."""
    branches: dict[Any, list[jsonschema.ValidationError]] = {}
    for e in error.context:
        branches.setdefault(e.relative_schema_path[0] if e.relative_schema_path else None, []).append(e)
    live = [errs for errs in branches.values() if not any(e.validator == "const" for e in errs)]
    consts = [e for errs in branches.values() for e in errs if e.validator == "const" and e.relative_path]
    if not live and len(consts) == len(branches):    # the discriminator matched no branch: name its values
        wrong = copy.copy(consts[0])                  # (else "mode: train" read as unknown training keys)
        wrong.validator, wrong.validator_value = "enum", [e.validator_value for e in consts]
        return wrong
    if len(live) > 1:                   # a branch of the value's own type (an integer, not a list of them;
        # a mapping, not one of the names an `enum` branch lists)
        typed = [errs for errs in live if not any(e.validator in ("type", "enum") and not e.relative_path for e in errs)]
        live = typed or live
    return jsonschema.exceptions.best_match(live[0] if len(live) == 1 else error.context)


def validate(mapping: Any, kind: str, source: str) -> None:
    """Raise SpecError listing every schema violation of `mapping` against workflow/schemas/{kind}."""
    if mapping is None:
        article = "an" if kind[0] in "aeiou" else "a"
        raise SpecError(f"{source}: (top level): empty; {article} {kind} spec is a mapping of keys")
    errors = sorted(_validator(kind).iter_errors(mapping), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        lines = []
        for error in errors:
            if error.validator in ("oneOf", "anyOf") and error.context and "errorMessage" not in error.schema:
                deepest = _branch_error(error)
                lines.append(f"{source}: {_key(deepest) or '(top level)'}: {_describe(deepest)}")
            else:
                lines.append(f"{source}: {_key(error) or '(top level)'}: {_describe(error)}")
        other = _other_kind(mapping, kind) if any(not e.absolute_path for e in errors) else None
        if other is not None:
            article = "an" if kind[0] in "aeiou" else "a"
            raise SpecError(f"{source}: (top level): this is {_OTHER_KINDS[other]}, not {article} {kind} spec")
        raise SpecError(list(dict.fromkeys(lines)))


# What each kind of spec file is and where it goes, for a file given where another kind is expected (a
# model file to `rapidllm predict`, a case to `rapidllm sweep`: a screenful of "missing key" and "unknown
# key(s)" lines that never said the file was the wrong kind).
_OTHER_KINDS = {
    "case": "a case file (rapidllm predict CASE, rapidllm.predict)",
    "experiment": "an experiment file (rapidllm sweep EXPERIMENT, rapidllm.sweep)",
    "search": "a search spec (rapidllm search SPEC, rapidllm.search)",
    **{kind: f"a {kind} spec (a case names it under `{kind}:` by its file stem in config/{KINDS[kind]}/, or "
       "inline)" for kind in ("model", "hardware", "network")},
}


def _other_kind(mapping: Any, kind: str) -> str | None:
    """The other kind of spec whose top level `mapping` has, when some key of `mapping` is not `kind`'s: every
    key one of its keys and every key it requires present (`name` aside for named specs, whose file stem
    gives it); None when there is none."""
    if not isinstance(mapping, dict) or not mapping or set(mapping) <= set(schema_of(kind).get("properties", {})):
        return None         # every key is one of `kind`'s: a key left out (a search spec without gpus), not a mix-up
    for other in _OTHER_KINDS:
        if other == kind:
            continue
        schema = schema_of(other)
        required = set(schema.get("required", ())) - ({"name"} if other in ("model", "hardware", "network") else set())
        if set(mapping) <= set(schema.get("properties", {})) and required <= set(mapping):
            return other
    return None


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The C safe loader, refusing a key given twice in one mapping (YAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {short(key_node.value)}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _expanded_size(value: Any, memo: dict[int, int], depth: int = 0) -> int:
    """Values in `value` once every alias is expanded, counted without expanding (memoised by identity,
    which the loader shares between an anchor and its aliases)."""
    if depth > MAX_DEPTH:
        raise SpecError(f"nested more than {MAX_DEPTH} levels deep")
    if not isinstance(value, (dict, list)):
        return 1
    hit = memo.get(id(value))
    if hit is None:
        items = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
        hit = 1 + sum(_expanded_size(v, memo, depth + 1) for _, v in items)
        memo[id(value)] = hit
    return hit


def read_text(path: Path, what: str = "file", limit: int = MAX_SPEC_BYTES) -> str:
    """A text file's contents, or one SpecError line naming the file and what is wrong with it."""
    from rapidllm.spec.paths import display

    where = display(path)
    try:
        size = Path(path).stat().st_size
        if Path(path).is_dir():
            raise SpecError(f"{where}: is a directory; a {what} must be a file")
        if not Path(path).is_file():          # a FIFO or device would block or never end
            raise SpecError(f"{where}: is not a regular file; a {what} must be a file")
        if size > limit:
            raise SpecError(f"{where}: is {size} bytes; a {what} is at most {limit} bytes")
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise SpecError(f"{where}: file not found") from None
    except OSError as exc:
        raise SpecError(f"{where}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def load_yaml(path: Path) -> Any:
    """Read a YAML file; a syntax error, a duplicate key, an unreadable or oversized file, or an alias bomb
    becomes one SpecError line naming the file."""
    from rapidllm.spec.paths import display

    text = read_text(path, "spec file")
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(parse)"
        raise SpecError.at(display(path), where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:
        raise SpecError(f"{display(path)}: nested more than {MAX_DEPTH} levels deep") from None
    try:
        size = _expanded_size(data, {})
    except SpecError as err:
        raise SpecError(f"{display(path)}: {err}") from None
    if size > MAX_SPEC_VALUES:
        raise SpecError(f"{display(path)}: expands to {size} values (YAML aliases included); a spec file "
                        f"holds at most {MAX_SPEC_VALUES}")
    return data


@functools.cache
def _raw_schema(name: str) -> dict:
    return yaml.safe_load((schema_dir() / name).read_text())


def knows_key(kind: str, dotted: str, named: tuple[str, ...] = ("model", "hardware", "network")) -> bool:
    """Whether a dotted key ("parallelism.tp") can name something in workflow/schemas/{kind}: a typo that
    matches nothing would make every sweep row invalid, so it is a file-level error instead. The top-level
    keys in `named` (a name or an inline spec) are followed into their own schemas."""
    keys = dotted.split(".")
    if kind == "case" and keys[0] in named and len(keys) > 1:
        return _knows(_raw_schema(f"{keys[0]}.schema.yaml"), keys[1:], f"{keys[0]}.schema.yaml")
    return _knows(_raw_schema(f"{kind}.schema.yaml"), keys, f"{kind}.schema.yaml")


def close_keys(kind: str, dotted: str) -> list[str]:
    """Dotted keys `knows_key` accepts that differ from `dotted` in its last part only, by a spelling
    difflib finds close among the property names of the schemas (`hardware.hbm_bandwith` ->
    `hardware.hbm_bandwidth`), for a "did you mean" on a key that matches nothing."""
    parent, _, last = dotted.rpartition(".")
    names = sorted({k for f in schema_dir().glob("*.schema.yaml") for k in _property_names(_raw_schema(f.name))})
    near = difflib.get_close_matches(last.lower(), names, n=10, cutoff=0.75)   # then only those valid here
    return [key for key in (f"{parent}.{n}" if parent else n for n in near) if knows_key(kind, key)]


def _property_names(node: Any) -> set[str]:
    """Every key under a `properties` anywhere in a parsed schema."""
    if isinstance(node, list):
        return set().union(*map(_property_names, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    own = set(node["properties"]) if isinstance(node.get("properties"), dict) else set()
    return own.union(*map(_property_names, node.values()))


def _knows(node: Any, keys: list[str], file: str) -> bool:
    if not keys:
        return True
    if not isinstance(node, dict) or any(k in node for k in ("enum", "const", "format")):
        return False                    # a leaf value has no keys below it
    types = node.get("type", [])
    if types and not {"object", "array"} & set([types] if isinstance(types, str) else types):
        return False
    if "$ref" in node:
        ref_file, _, pointer = node["$ref"].partition("#")
        file = ref_file or file
        target: Any = _raw_schema(file)
        for part in pointer.strip("/").split("/") if pointer.strip("/") else []:
            target = target[part]
        return _knows(target, keys, file)
    if any(_knows(b, keys, file) for b in node.get("oneOf", []) + node.get("anyOf", [])):
        return True
    props = node.get("properties", {})
    if keys[0] in props:
        return _knows(props[keys[0]], keys[1:], file)
    for pattern, sub in node.get("patternProperties", {}).items():
        if re.search(pattern, keys[0]):
            return _knows(sub, keys[1:], file)
    extra = node.get("additionalProperties", True if not props else False)
    if isinstance(extra, dict):
        return _knows(extra, keys[1:], file)
    if "items" in node and keys[0].isdigit():
        return _knows(node["items"], keys[1:], file)
    return extra is True and not props and "oneOf" not in node
