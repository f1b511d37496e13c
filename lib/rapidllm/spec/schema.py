"""JSON-schema validation of spec mappings with one readable line per error.

Quantities use custom formats (bytes, bandwidth, time, frequency, flops) checked by rapidllm.units, so a
wrong unit reads "hbm_bandwidth: '3.35 TB' is not a bandwidth; use a unit like '2.0 TB/s'".
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

from rapidllm import units
from rapidllm.spec.errors import SpecError
from rapidllm.spec.paths import schema_dir

QUANTITY_FORMATS = ("bytes", "bandwidth", "time", "frequency", "flops")


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker()
    for kind in QUANTITY_FORMATS:
        def check(value: Any, kind: str = kind) -> bool:
            units.parse_quantity(value, kind)
            return True
        checker.checks(kind, raises=units.UnitError)(check)
    return checker


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _schemas(folder: Path) -> tuple[dict[str, Any], Registry]:
    """Every schema of the folder parsed once (C YAML loader), and the registry `$ref`s resolve in: a
    command validating a case, a model, a device and a fabric parsed all of them four times before."""
    schemas = {p.name: yaml.load(p.read_text(), Loader=_LOADER) for p in sorted(folder.glob("*.schema.yaml"))}
    registry = Registry().with_resources([(name, Resource.from_contents(s)) for name, s in schemas.items()])
    return schemas, registry


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    schemas, registry = _schemas(schema_dir())
    schema = schemas[f"{kind}.schema.yaml"]
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, registry=registry, format_checker=_format_checker())


def _key(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _describe(error: jsonschema.ValidationError) -> str:
    v = error.validator
    if v == "required":
        missing = error.message.split("'")[1]
        return f"missing key '{missing}'"
    if v == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"unknown key(s) {', '.join(map(repr, extra))}; allowed: {', '.join(allowed)}"
    if v == "enum":
        return f"{error.instance!r} is not allowed; allowed: {', '.join(map(str, error.validator_value))}"
    if v == "const":
        return f"{error.instance!r} is not allowed; allowed: {error.validator_value!r}"
    if v == "format":
        cause = error.cause
        return str(cause) if cause else error.message
    if v == "type":
        return f"{error.instance!r} is not of type {error.validator_value}"
    if v in ("oneOf", "anyOf") and error.context:
        return _describe(_branch_error(error))
    return error.message


def _branch_error(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """The error to report for a oneOf/anyOf: from the one branch whose discriminating `const` (such as the
    workload's `mode`) matched, so an inference workload is not judged against the training branch; else
    jsonschema's best match over all branches."""
    branches: dict[Any, list[jsonschema.ValidationError]] = {}
    for e in error.context:
        branches.setdefault(e.relative_schema_path[0] if e.relative_schema_path else None, []).append(e)
    live = [errs for errs in branches.values() if not any(e.validator == "const" for e in errs)]
    return jsonschema.exceptions.best_match(live[0] if len(live) == 1 else error.context)


def validate(mapping: Any, kind: str, source: str) -> None:
    """Raise SpecError listing every schema violation of `mapping` against workflow/schemas/{kind}."""
    errors = sorted(_validator(kind).iter_errors(mapping), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        lines = []
        for error in errors:
            if error.validator in ("oneOf", "anyOf") and error.context:
                deepest = _branch_error(error)
                lines.append(f"{source}: {_key(deepest) or '(top level)'}: {_describe(deepest)}")
            else:
                lines.append(f"{source}: {_key(error) or '(top level)'}: {_describe(error)}")
        raise SpecError(list(dict.fromkeys(lines)))


def load_yaml(path: Path) -> Any:
    """Read a YAML file; a syntax error becomes one SpecError line naming the file."""
    from rapidllm.spec.paths import display

    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise SpecError.at(display(path), "", "file not found") from None
    try:
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(parse)"
        raise SpecError.at(display(path), where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
