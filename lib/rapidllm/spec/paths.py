"""Where named specs and schemas live: config/ and workflow/schemas/ of the project root.

The root is found from RAPIDLLM_ROOT, else from the package location (lib/rapidllm/..), so an editable
install and a checkout behave the same.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

from rapidllm.spec.errors import SpecError

KINDS = {"model": "models", "hardware": "hardware", "network": "networks", "experiment": "experiments",
         "process": "process"}


def project_root() -> Path:
    """The project root; resolved once per RAPIDLLM_ROOT value (and working directory, for a relative
    value): `Path.resolve()` on every call cost sweeps seconds."""
    env = os.environ.get("RAPIDLLM_ROOT")
    if env:
        return _resolved(env, "" if os.path.isabs(env) else os.getcwd())
    return _package_root()


@functools.lru_cache(maxsize=64)
def _resolved(env: str, cwd: str) -> Path:
    return Path(env).resolve()


@functools.lru_cache(maxsize=1)
def _package_root() -> Path:
    return Path(__file__).resolve().parents[3]


def schema_dir() -> Path:
    return _schema_dir(project_root())


@functools.lru_cache(maxsize=64)
def _schema_dir(root: Path) -> Path:
    """One Path per root: spec validation asks for it per key of every case (10^4 joins a sweep)."""
    return root / "workflow" / "schemas"


def config_dir(kind: str) -> Path:
    return _config_dir(project_root(), kind)


@functools.lru_cache(maxsize=64)
def _config_dir(root: Path, kind: str) -> Path:
    return root / "config" / KINDS[kind]


def known_names(kind: str) -> list[str]:
    return sorted(p.stem for p in config_dir(kind).glob("*.yaml"))


def pipeline_input(path: Path) -> str:
    """A spec file as a study's pipeline input (workflow/rules/common.smk, run from the root): relative to
    the project root when inside it, else absolute."""
    p, root = path.resolve(), project_root().resolve()
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(p)


def display(path: Path | str) -> str:
    """Path relative to the project root (or cwd) for messages; the path as given when it is that folder
    itself (`rapidllm predict /tmp/x` run in /tmp/x said '.: is a directory', naming nothing given)."""
    p = Path(path).resolve()
    for base in (Path.cwd(), project_root()):
        try:
            rel = p.relative_to(base)
        except ValueError:
            continue
        return str(rel) if rel.parts else str(path)
    return str(p)


SPEC_PATH = "a path to a YAML file (str or pathlib.Path)"


def spec_path(value: object, name: str, allowed: str = SPEC_PATH) -> Path:
    """`value` as a spec file's path, or one SpecError line saying what `name` allows: a library caller's
    None, number or YAML text otherwise failed deep in pathlib ("expected str, bytes or os.PathLike") or
    read as a missing file named by the whole text."""
    if isinstance(value, str) and "\n" in value:
        raise SpecError(f"{name}: got YAML text, not a file path; allowed: {allowed} "
                        "(a mapping from yaml.safe_load(text) where the function takes one)")
    if not isinstance(value, (str, os.PathLike)):
        raise SpecError(f"{name}: got {type(value).__name__}; allowed: {allowed}")
    return Path(value)
