#!/usr/bin/env bash
# The test command: set up (first run only) and run the whole test suite. System packages that some
# validation tests need (Debian's ns3, slurm-wlm + munge) are installed by scripts/system/*.sh when run as
# root with apt-get available; otherwise those scripts say how to install them.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
for setup in scripts/system/*.sh; do
  [ -e "$setup" ] && bash "$setup"
done
python -m pytest "$@"

# The numba kernels once more as the plain Python they are written in (NUMBA_DISABLE_JIT=1), under
# coverage, so their lines count and their Python semantics are exercised; about a minute on 2 cores.
# Line coverage of lib/ from this run is reported in README.md (Tests).
KERNEL_TESTS=(tests/test_kernel_references.py tests/test_gemm_kernel.py tests/test_serving.py
              tests/test_network_simulator.py tests/test_network_kernels.py tests/test_engine_fast.py
              tests/test_sweep_speed_equivalence.py)
export COVERAGE_FILE="$ROOT/.cache/coverage-kernels"
NUMBA_DISABLE_JIT=1 python -m coverage run --source=lib/rapidllm -m pytest -q -p no:cacheprovider "${KERNEL_TESTS[@]}"
kernels=$(grep -rl --include='*.py' '@njit' lib/rapidllm | sort | paste -sd, -)
echo "line coverage, kernel tests with NUMBA_DISABLE_JIT=1: lib/ $(python -m coverage report --format=total)%," \
     "modules with numba kernels $(python -m coverage report --format=total --include="$kernels")%"
