"""Small usability gaps (issue 21, item 5): `rapidllm collective --network` takes a network or case file, and
a case selects nanotron's memory conventions (`framework: nanotron`) and gets the validated numbers."""
import json

import pandas as pd
import pytest
import yaml

import rapidllm
from rapidllm.cli import main
from rapidllm.memory.state import NANOTRON
from rapidllm.spec.paths import project_root
from rapidllm.validate.memory import GiB, family_shapes, validate_nanotron

ROOT = project_root()
NANOTRON_CSV = ROOT / "validation" / "references" / "training_nanotron_h100_sample.csv"


def _collective(capsys, network: str, *extra: str) -> dict:
    assert main(["collective", "--network", network, "--bytes", "256MiB", "--ranks", "8", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_collective_network_from_a_name_a_network_file_or_a_case_file(tmp_path, capsys):
    by_name = _collective(capsys, "dgx-a100")
    assert _collective(capsys, str(ROOT / "config" / "networks" / "dgx-a100.yaml"))["time_s"] == by_name["time_s"]
    net = yaml.safe_load((ROOT / "config" / "networks" / "dgx-a100.yaml").read_text())
    case = {"model": "gpt-22b", "hardware": "a100-sxm4-80gb", "network": net,
            "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8}, "parallelism": {"tp": 8}}
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(case))
    assert _collective(capsys, str(path))["time_s"] == by_name["time_s"]            # the inline form
    case["faults"] = [{"link": [0, 8], "bandwidth_factor": 0.25}]                    # rank 0's NVSwitch cable
    path.write_text(yaml.safe_dump(case))
    slow = _collective(capsys, str(path))
    assert slow["time_s"] > by_name["time_s"]
    assert slow["time_s"] == _collective(capsys, "dgx-a100", "--fault", "0,8,0.25")["time_s"]


def test_collective_bad_network_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: gpt-22b\n")
    assert main(["collective", "--network", str(bad), "--bytes", "1MiB"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.yaml" in err[0] and "network" in err[0]
    assert main(["collective", "--network", str(tmp_path / "missing.yaml"), "--bytes", "1MiB"]) == 2
    assert "file not found" in capsys.readouterr().err


@pytest.fixture(scope="module")
def nanotron():
    return validate_nanotron(NANOTRON_CSV)


def test_frozen_nanotron_constants_are_the_validation_fit(nanotron):
    for key, value in nanotron["constants"].items():
        assert getattr(NANOTRON, key) == pytest.approx(value, rel=1e-9), key


def test_a_nanotron_case_gets_the_validated_memory(nanotron):
    """A reference row written as a case file with `framework: nanotron` predicts the peak and the logged
    optimizer-phase memory the validation scores, on every single-node Success row."""
    df = pd.read_csv(NANOTRON_CSV)
    shapes = family_shapes(df)
    rows = nanotron["rows"].set_index("name")
    checked = 0
    for _, r in df[(df.status == "Success") & (df.dp * df.tp * df.pp <= 8)].iterrows():
        model = {k: v for k, v in shapes[r.num_params].items()}
        case = {"model": model, "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "framework": "nanotron",
                "workload": {"mode": "training", "seq_len": int(r.seq_len),
                             "global_batch": int(r.dp * r.mbs * r.batch_accum), "micro_batch": int(r.mbs)},
                "parallelism": {"dp": int(r.dp), "tp": int(r.tp), "pp": int(r.pp), "sp": True,
                                "zero": int(r.zero_stage), "fp32_grad_accum": True}}
        p = rapidllm.predict(case)
        assert p.memory.peak / GiB == pytest.approx(rows.loc[r["name"], "peak_gib"], rel=1e-12), r["name"]
        checked += 1
        if checked == 3:
            break
    assert checked == 3
    assert rapidllm.predict({**case, "framework": "megatron"}).memory.peak != p.memory.peak
