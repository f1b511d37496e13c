#!/usr/bin/env bash
# The test command: set up (first run only) and run the whole test suite.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
python -m pytest "$@"
