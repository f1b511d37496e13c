"""`rapidllm explore`: serve the explorer page (rapidllm/explore/app.py) with Streamlit on 127.0.0.1.

Only the loopback address: the page runs predictions for whoever reaches it, so it is not offered to the
network. Streamlit is the page's framework (docs/explorer.md says why); this process becomes its server
(exec), so Ctrl-C or a terminate signal stops it and leaves nothing behind.
"""
from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from pathlib import Path

from rapidllm.spec.errors import SpecError

APP = Path(__file__).parent.parent / "explore" / "app.py"


def server_command(port: int, case: str | None = None) -> list[str]:
    """The `streamlit run` command line for the page on 127.0.0.1:port (headless, no usage statistics)."""
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", "127.0.0.1",
           "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--client.toolbarMode", "viewer"]
    return cmd + (["--", "--case", str(Path(case).resolve())] if case else [])


def check_port_free(port: int) -> None:
    """One SpecError line when 127.0.0.1:port cannot be bound (in use, or privileged): Streamlit would
    otherwise exit 1 with its own "Port N is not available" after the exec."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as the server binds: TIME_WAIT is free
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            why = "already in use" if err.errno == errno.EADDRINUSE else os.strerror(err.errno or 0).lower()
            raise SpecError(f"rapidllm explore: --port: 127.0.0.1:{port} is not available ({why}); "
                            "allowed: a free port from 1 to 65535") from None


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.port <= 65535:
        raise SpecError(f"rapidllm explore: --port: {args.port} is out of range; allowed: 1 to 65535")
    check_port_free(args.port)
    if args.case:
        from rapidllm.spec.case import load_case
        load_case(args.case)                        # bad input: one line, exit 2, before any server starts
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise SpecError("rapidllm explore: needs streamlit (pip install 'streamlit>=1.40,<2')") from None
    print(f"rapidllm explorer on http://127.0.0.1:{args.port} (Ctrl-C stops it)", flush=True)
    cmd = server_command(args.port, args.case)
    os.execv(cmd[0], cmd)           # the server takes this process over: signals reach it, nothing is orphaned


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explore", help="interactive explorer in the browser (local web server on 127.0.0.1)")
    p.add_argument("--port", type=int, default=8501, help="port on 127.0.0.1 (default 8501)")
    p.add_argument("--case", help="case YAML to start from (default: the examples)")
    p.set_defaults(func=run)
