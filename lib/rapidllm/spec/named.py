"""Resolve a spec given by name (config/{kind}s/NAME.yaml) or as an inline mapping, and validate it.

Named files are parsed and validated once per (path, `_stamp`): sweeps resolve the same few specs thousands
of times, and YAML parsing dominated expansion before this cache.
"""
from __future__ import annotations

import copy
import functools
import os
import re
import stat
from pathlib import Path
from typing import Any

from rapidllm.caches import current
from rapidllm.spec.errors import SpecError
from rapidllm.spec.paths import config_dir, display, known_names, schema_dir
from rapidllm.spec.schema import close_names, load_yaml, schema_of, short, valid_alone, validate

# A spec name is a file stem in config/<kind>/: no path separators, so a name never leaves that folder.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def resolve_named(kind: str, value: Any, source: str, key: str, copy_named: bool = True,
                  folder: str | Path | None = None) -> tuple[dict, str]:
    """Return (validated mapping, where it came from) for a name, an inline mapping, or a path to a spec file
    (`is_spec_path`) read relative to `folder` (`read_spec_file`; refused where no folder is given).

    copy_named=False returns a named spec's cached mapping itself (for callers that only read it, such
    as `resolve_case`); by default callers get their own deep copy. An inline mapping equal (same repr)
    to one already validated against the same schema is not validated again. A spec file's mapping is an
    inline mapping: its case id is its content's, wherever the file lies.
    """
    if is_spec_path(value):
        value = read_spec_file(kind, value, folder, source, key)
    if isinstance(value, str):
        path = _named_path(value, str(config_dir(kind)))   # one stat per lookup, no pathlib objects
        if path is None:
            raise SpecError.at(source, key, f"{short(value)} is not a {kind} name (letters, digits, '.', '_', '-'; "
                               f"names resolve only inside {_folder(kind)}/, which lists them); "
                               f"{_OWN_SPEC}")
        try:
            info = os.stat(path)
        except OSError:
            info = None
        if info is None or not stat.S_ISREG(info.st_mode):
            names = known_names(kind)
            raise SpecError.at(source, key, f"unknown {kind} {value!r}; known: {_known(kind, names)}"
                               + _suggest(value, names))
        mapping, where = _load_named(kind, value, path, _stamp(info))
        return (copy.deepcopy(mapping) if copy_named else mapping), where
    elif isinstance(value, dict):
        mapping, where = dict(value), f"{source}: {key}"
        mapping.setdefault("name", f"inline-{kind}")
    else:
        raise SpecError.at(source, key, f"{short(value)} is neither a {kind} name nor a mapping")
    try:
        _validate_inline(mapping, kind, where)
    except SpecError as err:
        raise SpecError([_nested(line, source, key) for line in err.lines]) from None
    return mapping, where


# Where a spec of the user's own goes (a name never leaves config/: docs/limits.md, "names").
_OWN_SPEC = ("a spec of your own: give a path to its file ending in .yaml (read relative to the case or experiment "
             "file's folder; on the command line, to the working directory), or give it inline as a mapping")

SPEC_FILE_SUFFIXES = (".yaml", ".yml")
NAMED_KINDS = ("model", "hardware", "network")


def is_spec_path(value: Any) -> bool:
    """Whether a model/hardware/network value is a path to a spec file rather than a name: it ends in
    .yaml/.yml (as `rapidllm collective --network` tells a file from a name). Only such files are read, and
    every one is validated as a spec of its kind: a value without the suffix stays a name, so
    `../../workflow/schemas/case.schema` or `/etc/passwd` is still no name (docs/limits.md, "names")."""
    return isinstance(value, str) and value.endswith(SPEC_FILE_SUFFIXES)


def read_spec_file(kind: str, value: str, folder: str | Path | None, source: str, key: str) -> dict:
    """The mapping of the spec file `value` names (relative to `folder`, or absolute), validated against the
    `kind` schema with the file named in any error, as an inline mapping of the caller's own (a copy).

    Paths are read only where a file or a command line gives them (`folder`: the file's folder, or the
    working directory): a mapping passed to the API or pasted into the explorer has no folder, and the
    explorer's server must not read its own files at a client's word, so there a path is refused."""
    if folder is None:
        raise SpecError.at(source, key, f"{short(value)} is a path; a path to a spec file is read from a case, "
                           f"experiment or search spec file (relative to its folder) or a command-line flag "
                           f"(relative to the working directory), not from a mapping (Python API, explorer): "
                           f"give the {kind} inline there (yaml.safe_load of its file)")
    path = Path(folder, value)
    try:
        stamp = _stamp(os.stat(path))
    except OSError:
        raise SpecError.at(source, key, f"{value}: file not found (a path is read relative to "
                           f"{Path(folder).resolve()})") from None
    return copy.deepcopy(_load_file(kind, str(path.resolve()), stamp))


Stamp = tuple[int, int, int, int]


def _stamp(info: os.stat_result) -> Stamp:
    """What a cached spec file is keyed on besides its path: modification and change times, size and inode.
    The modification time alone kept a stale spec in a long-lived process (explorer, notebook) when a file
    was rewritten within the filesystem's timestamp granularity or replaced by `cp -p`/rsync, which keep it
    (review 17, finding 8); the change time is set by every write and no copy can set it, and an editor that
    saves by renaming gives a new inode. One stat, as before: no read of the file per lookup."""
    return info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino


@functools.lru_cache(maxsize=256)
def _load_file(kind: str, path: str, stamp: Stamp) -> Any:
    """Parse and validate one spec file given by path; the `_stamp` in the key invalidates edits."""
    mapping = load_yaml(Path(path))
    validate(mapping, kind, display(path))
    return mapping


def inline_spec_files(mapping: Any, folder: str | Path, source: str, at: str = "") -> Any:
    """A copy of a case (or an experiment's base, a `cases` entry, a search spec or one of its `systems`)
    whose model, hardware and network paths (`is_spec_path`, a value or list items) are replaced by their
    files' mappings (`read_spec_file`, relative to `folder`): what follows, sweep rows' case JSON included,
    sees inline specs, so a case id depends on a file's content and never on where it lies. Anything else as
    it is. `at` prefixes the key an error names (`systems.1.` for a search spec's second system)."""
    if not isinstance(mapping, dict) or not any(_has_path(mapping.get(k)) for k in NAMED_KINDS):
        return mapping
    out = dict(mapping)
    for kind in NAMED_KINDS:
        value = out.get(kind)
        if isinstance(value, list):
            out[kind] = [read_spec_file(kind, v, folder, source, f"{at}{kind}.{i}") if is_spec_path(v) else v
                         for i, v in enumerate(value)]
        elif is_spec_path(value):
            out[kind] = read_spec_file(kind, value, folder, source, f"{at}{kind}")
    return out


def _has_path(value: Any) -> bool:
    return is_spec_path(value) or (isinstance(value, list) and any(is_spec_path(v) for v in value))


def spec_file_paths(mapping: Any, folder: str | Path) -> list[Path]:
    """The resolved paths of the spec files `inline_spec_files(mapping, folder, ...)` reads (model, hardware
    and network values, or list items, that `is_spec_path`): once inlined, a mapping no longer says which
    files it came from, and the pipeline must rerun a study when one of them changes (review 17, finding 3)."""
    if not isinstance(mapping, dict):
        return []
    values = [v for kind in NAMED_KINDS
              for v in (mapping.get(kind) if isinstance(mapping.get(kind), list) else [mapping.get(kind)])]
    return [Path(folder, v).resolve() for v in values if is_spec_path(v)]


def _folder(kind: str) -> str:
    """config/<kind> as a message shows it: relative to the working directory when under it, else absolute,
    so a user running from elsewhere sees where the folder is (`display` would give it relative to the root)."""
    folder = config_dir(kind)
    try:
        return str(folder.relative_to(Path.cwd()))
    except ValueError:
        return str(folder)


def _nested(line: str, source: str, key: str) -> str:
    """An inline spec's schema error with its key under the case's: 'case.yaml: model.moe.experts: ...' and
    'case.yaml: model: unknown key(s) ...' rather than 'case.yaml: model: (top level): unknown key(s) ...'."""
    head = f"{source}: {key}: "
    if not line.startswith(head) or not re.fullmatch(r"[\w.]+", key):
        return line
    rest = line[len(head):]
    return head + rest.removeprefix("(top level): ") if rest.startswith("(top level): ") else f"{source}: {key}.{rest}"


# Longest list of names a message spells out; a longer library is pointed at, so the message stays one line
# a terminal shows whole (the model library holds over 40 names).
_LISTED_CHARS = 300


def _known(kind: str, names: list[str]) -> str:
    """The known names, comma-joined, or where they are listed when that would be too long."""
    listed = ", ".join(names)
    return listed if len(listed) <= _LISTED_CHARS else f"{len(names)} names, the files of {_folder(kind)}/"


def _suggest(value: str, names: list[str]) -> str:
    """' (did you mean X?)' for a misspelt name (`schema.close_names`); '' when nothing is close."""
    close = close_names(value, names)
    return f" (did you mean {' or '.join(close[:4])}?)" if close else ""


@functools.lru_cache(maxsize=1024)
def _named_path(value: str, folder: str) -> str | None:
    """`folder`/<value>.yaml (folder: config/<kind>) for a well-formed name (`NAME`), else None."""
    return os.path.join(folder, f"{value}.yaml") if NAME.fullmatch(value) else None


def _validate_inline(mapping: dict, kind: str, where: str) -> None:
    """`validate`, skipped for a mapping whose repr already passed the same schema (sweep rows carry the
    same inlined specs thousands of times; `Caches.inline_specs`). The schema directory is part of the key,
    so another project root validates again."""
    key = (kind, str(schema_dir()), repr(mapping))
    seen = current().inline_specs
    if key in seen:
        return
    validate(mapping, kind, where)
    seen.put(key, True)


# Top-level keywords of a schema that judges each key of a mapping on its own: nothing relates two keys.
_PER_KEY = {"$schema", "$id", "$comment", "title", "description", "type", "required", "properties",
            "additionalProperties"}


def validate_by_key(mapping: Any, kind: str, source: str) -> None:
    """`validate`, skipped when the schema judges every top-level key on its own (only type: object,
    required, properties and additionalProperties: false at the top) and every value of `mapping` already
    passed, under the same key, in a valid mapping of this kind (`Caches.valid_values`). A sweep's
    thousands of case mappings are built from a few hundred distinct values (sweep-1000: 184 layouts);
    validating each whole mapping was a third of expansion. A key whose own schema is of that per-key form
    too (the case's parallelism) is judged by its values one level down: a mapping of allowed keys with the
    required ones, each value of which passed under the same two keys, so a new layout built from known
    sizes and settings is not validated again (sweep-1000: 188 -> 20 validations). A value not seen yet is
    judged alone against its own subschema (`schema.valid_alone`; sweep-1000: no case is validated whole);
    a mapping with a value that fails there, or with a key out of place, is validated in full, so errors
    and their messages are the ones `validate` gives."""
    folder = str(schema_dir())
    per_key = _per_key_schema(kind, folder)
    if per_key is None or not isinstance(mapping, dict):
        validate(mapping, kind, source)
        return
    properties, required, nested = per_key
    seen = current().valid_values
    keys = []                               # (memo key, path of the value in the schema, value)
    for k, v in mapping.items():
        inner = nested.get(k)
        if inner is not None and type(v) is dict and all(sk in inner[0] for sk in v) and all(r in v for r in inner[1]):
            keys.extend(((kind, folder, k, sk, repr(sv)), (k, sk), sv) for sk, sv in v.items())
        else:
            keys.append(((kind, folder, k, repr(v)), (k,), v))
    if all(k in properties for k in mapping) and all(r in mapping for r in required):
        if all(key in seen or valid_alone(kind, path, v) for key, path, v in keys):
            for key, _, _ in keys:
                seen.put(key, True)
            return
    validate(mapping, kind, source)
    for key, _, _ in keys:
        seen.put(key, True)


@functools.lru_cache(maxsize=64)
def _per_key_schema(kind: str, folder: str) -> tuple[frozenset[str], tuple[str, ...], dict] | None:
    """(property names, required keys, {key: (names, required) of its own schema where that is per-key
    too}) of the `kind` schema in `folder` when it judges every top-level key on its own
    (`validate_by_key`), else None. `folder` is the schema directory the schema was read from."""
    schema = schema_of(kind)
    if not _judges_per_key(schema):
        return None
    properties = schema.get("properties", {})
    nested = {k: (frozenset(sub.get("properties", {})), tuple(sub.get("required", ())))
              for k, sub in properties.items() if _judges_per_key(sub)}
    return frozenset(properties), tuple(schema.get("required", ())), nested


def _judges_per_key(schema: Any) -> bool:
    """Whether a schema is an object of known keys, each judged on its own (no keyword relates two keys)."""
    return (isinstance(schema, dict) and set(schema) <= _PER_KEY and schema.get("type") == "object"
            and schema.get("additionalProperties") is False)


@functools.lru_cache(maxsize=256)
def _load_named(kind: str, name: str, path: str, stamp: Stamp) -> tuple[Any, str]:
    """Parse and validate one named spec file; the `_stamp` in the key invalidates edits."""
    mapping = load_yaml(Path(path))
    where = display(path)
    mapping = {"name": name, **(mapping or {})} if isinstance(mapping, dict) else mapping
    validate(mapping, kind, where)
    return mapping, where
