"""The JSON text a case's id hashes: specs as `dataclasses.asdict` would give them, less the fields each spec
class names in HASH_OMITTED_DEFAULTS while they hold their default (so adding such a field keeps every
existing id), written once per shared spec (`Caches.spec_texts`, `Caches.plain_specs`)."""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from rapidllm.caches import current


@functools.lru_cache(maxsize=None)
def key_text(name: str) -> str:
    """A field name as `case_id`'s JSON writes it before its value: `"name":` (one per field, kept)."""
    return json_text(name) + ":"


def json_text(value: Any) -> str:
    """The JSON text `case_id` hashes, of one value: `json.dumps(value, sort_keys=True, default=list,
    separators=(",", ":"))`, which builds this encoder on every call (a case writes ~6 values)."""
    return _ENCODER.encode(value)


_ENCODER = json.JSONEncoder(sort_keys=True, default=list, separators=(",", ":"))


def spec_json(spec: Any) -> str:
    """`json_text(plain(spec))` of a frozen spec, kept by identity (`Caches.spec_texts`): named specs are
    shared by every case of a sweep, and hashing them by value would cost what writing them does."""
    return current().spec_texts.of((spec,), lambda: json_text(plain(spec)))


def plain(obj: Any) -> Any:
    """What `dataclasses.asdict` gives as far as `json.dumps` can tell: dataclasses become dicts of their
    fields, lists and tuples lists (JSON writes both as arrays), dicts are converted key and value; other
    values are returned as they are (asdict deep-copies them, which JSON cannot see). Fields a spec names
    in HASH_OMITTED_DEFAULTS are left out while they hold their default, so adding such a field keeps the
    ids of every case that does not use it. Shared named specs reuse the plain form computed when they were
    built (callers never mutate it)."""
    if type(obj) in SCALARS:
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        shared = current().plain_specs.get((type(obj), getattr(obj, "name", None)))
        if shared is not None and shared[0] is obj:
            return shared[1]
        out = {}
        for name, default, omit in hash_fields(type(obj)):
            v = getattr(obj, name)
            if not (omit and v == default):
                out[name] = v if type(v) in SCALARS else plain(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, dict):
        return {plain(k): plain(v) for k, v in obj.items()}
    return obj


SCALARS = frozenset({str, int, float, bool, type(None)})     # returned as they are, without a call


@functools.lru_cache(maxsize=None)
def hash_fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, default, omitted at its default) of each field of a spec class, in declaration order."""
    omit = getattr(cls, "HASH_OMITTED_DEFAULTS", ())
    return tuple((f.name, f.default, f.name in omit) for f in dataclasses.fields(cls))
