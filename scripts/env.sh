# Sourced by scripts/run_pipeline.sh and scripts/run_tests.sh: create .venv if missing, install the
# project, and keep every cache inside the workspace (read-only home directories on clusters work).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export NUMBA_CACHE_DIR="$ROOT/.cache/numba" XDG_CACHE_HOME="$ROOT/.cache/xdg" MPLCONFIGDIR="$ROOT/.cache/matplotlib"
export PIP_CACHE_DIR="$ROOT/.cache/pip" SNAKEMAKE_OUTPUT_CACHE="$ROOT/.cache/snakemake"
mkdir -p "$NUMBA_CACHE_DIR" "$XDG_CACHE_HOME" "$MPLCONFIGDIR"
stamp=".venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test,hpc]"
  # optional Chakra export (extra `chakra`): without its heavy dependency set
  .venv/bin/python -m pip install --quiet --no-deps "mlc-chakra>=1.0" && .venv/bin/python -m pip install --quiet "protobuf>=6.31.1"
  rm -f .venv/.installed-* && touch "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
