"""pyproject.toml and environment.yml list the same dependencies with the same bounds."""
import re
import tomllib

import yaml

from conftest import ROOT


def _normalize(req: str) -> tuple[str, str]:
    name, bounds = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", req.strip()).groups()
    return name.lower().replace("_", "-"), bounds.replace(" ", "")


def test_environment_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(_normalize(r) for r in project["dependencies"])
    for extra in ("test", "hpc", "chakra"):
        wanted.update(_normalize(r) for r in project["optional-dependencies"][extra])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    listed = {}
    for dep in env:
        for item in dep["pip"] if isinstance(dep, dict) else [dep]:
            if not item.startswith("-"):
                listed.update([_normalize(item)])
    for tooling in ("python", "pip"):
        listed.pop(tooling)
    assert listed == wanted


def test_numpy_pinned_for_python_311() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    numpy = [r for r in project["dependencies"] if r.startswith("numpy")]
    assert numpy == ["numpy>=2.4.5,<2.5"]
