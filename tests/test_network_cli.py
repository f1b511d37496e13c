"""`rapidllm collective` command (cli/collective.py)."""
import json

from rapidllm.cli.collective import main


def test_collective_json(capsys):
    assert main(["collective", "--network", "dgx-a100", "--op", "all_reduce", "--bytes", "1GiB", "--ranks", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("time_s", "algbw_bytes_per_s", "busbw_bytes_per_s", "busiest_link"):
        assert key in out
    assert 0 < out["time_s"] < 0.01 and out["busbw_bytes_per_s"] > 250e9


def test_collective_text_and_soft_fault(capsys):
    assert main(["collective", "--network", "dgx-a100", "--bytes", "64MiB", "--ranks", "8", "--algorithm", "ring",
                 "--fault", "0,8,0.5", "--json"]) == 0
    slow = json.loads(capsys.readouterr().out)["time_s"]
    assert main(["collective", "--network", "dgx-a100", "--bytes", "64MiB", "--ranks", "8", "--json"]) == 0
    assert slow > json.loads(capsys.readouterr().out)["time_s"]
    assert main(["collective", "--network", "dgx-a100", "--bytes", "64MiB", "--ranks", "8"]) == 0
    text = capsys.readouterr().out
    assert "time_s" in text and "busbw" in text


def test_collective_cut_off_and_bad_input(capsys):
    assert main(["collective", "--network", "dgx-a100", "--bytes", "1MiB", "--ranks", "8", "--fault", "0,8,dead"]) == 2
    err = capsys.readouterr().err
    assert "no route" in err and "rank 0 -> " in err and "Traceback" not in err
    assert main(["collective", "--network", "dgx-a100", "--bytes", "1 GB/s", "--ranks", "8"]) == 2
    assert "--bytes" in capsys.readouterr().err
    assert main(["collective", "--network", "dgx-a100", "--bytes", "1MiB", "--fault", "0,1"]) == 2
    assert main(["collective", "--network", "nope", "--bytes", "1MiB"]) == 2


def test_cli_ops_match_the_simulator():
    from rapidllm.cli.collective import OPS
    from rapidllm.network.api import DEFAULT_CHUNKS
    from rapidllm.network.collectives import SUPPORTED

    assert OPS == tuple(sorted(SUPPORTED)) and DEFAULT_CHUNKS is None
