"""`python -m rapidllm.cli ...`: the same as the `rapidllm` console script."""
import sys

from rapidllm.cli import main

sys.exit(main())
