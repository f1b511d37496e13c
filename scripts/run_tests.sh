#!/usr/bin/env bash
# The test command: set up (first run only) and run the whole test suite. System packages that some
# validation tests need (Debian's ns3, slurm-wlm + munge) are installed by scripts/system/*.sh when run as
# root with apt-get available; otherwise those scripts say how to install them.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
for setup in scripts/system/*.sh; do
  [ -e "$setup" ] && bash "$setup"
done
python -m pytest "$@"
