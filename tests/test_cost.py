"""Chiplet cost model and the cost of a prediction: closed forms against hand-computed textbook values,
limits and monotonicity, the chiplet trade-off, and the $/token identity (docs/cost.md)."""
from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from rapidllm.cli import main
from rapidllm.cost.config import hardware_cost, load_process, scaled
from rapidllm.cost.operating import HOURS_PER_YEAR
from rapidllm.cost.package import package_cost, split_die
from rapidllm.cost.price import COST_COLUMNS, add_cost_columns, cost_record, price_prediction
from rapidllm.cost.silicon import die_cost, die_yield, dies_per_wafer
from rapidllm.spec.case import load_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.paths import project_root


# Hennessy & Patterson, Computer Architecture: A Quantitative Approach, ch. 1 "Cost of an Integrated
# Circuit": a 30 cm wafer holds 270 dies of 1.5 cm x 1.5 cm and 640 of 1.0 cm x 1.0 cm (5th ed., no edge
# exclusion or scribe); with 0.4 defects/cm2 and alpha = 4 the die yields are 0.44 and 0.68 (4th ed.).
@pytest.mark.parametrize("area_mm2,dies", [(225.0, 270), (100.0, 640)])
def test_dies_per_wafer_matches_hennessy_patterson(area_mm2, dies):
    assert round(dies_per_wafer(area_mm2, 300.0)) == dies


@pytest.mark.parametrize("area_mm2,y", [(225.0, 0.44), (100.0, 0.68)])
def test_negative_binomial_yield_matches_hennessy_patterson(area_mm2, y):
    assert die_yield(area_mm2, 0.4, 4.0) == pytest.approx(y, abs=0.005)


def test_edge_exclusion_and_scribe_cost_dies():
    full = dies_per_wafer(826.0, 300.0)
    assert dies_per_wafer(826.0, 300.0, edge_exclusion_mm=3.0) < full
    assert dies_per_wafer(826.0, 300.0, scribe_mm=0.2) < full
    # usable diameter 294 mm: pi 147^2 / 826 - pi 294 / sqrt(1652)
    assert dies_per_wafer(826.0, 300.0, 3.0) == pytest.approx(math.pi * 147**2 / 826 - math.pi * 294 / math.sqrt(1652))


def test_yield_limits():
    assert die_yield(826.0, 0.0, 3.0) == 1.0
    assert die_yield(826.0, 0.09, math.inf) == pytest.approx(math.exp(-0.7434))      # Poisson limit
    assert die_yield(826.0, 0.09, 1e7) == pytest.approx(math.exp(-0.7434), rel=1e-6)
    assert die_yield(826.0, 0.09, 1.0) == pytest.approx(1.0 / 1.7434)                 # Seeds model
    # clustering lets more dies escape the same mean defect count
    assert die_yield(826.0, 0.09, 1.0) > die_yield(826.0, 0.09, 3.0) > die_yield(826.0, 0.09, math.inf)


def test_yield_decreases_and_die_cost_increases_with_area_and_defects():
    n7 = load_process("n7")
    areas = [50.0, 100.0, 200.0, 400.0, 826.0]
    ys = [die_yield(a, 0.09, 3.0) for a in areas]
    assert all(a > b for a, b in zip(ys, ys[1:]))
    ys = [die_yield(826.0, d, 3.0) for d in (0.01, 0.05, 0.1, 0.2)]
    assert all(a > b for a, b in zip(ys, ys[1:]))
    costs = [die_cost(a, n7).usd for a in areas]
    assert all(a < b for a, b in zip(costs, costs[1:]))
    costs = [die_cost(826.0, replace(n7, defect_density_per_cm2=d)).usd for d in (0.0, 0.05, 0.1, 0.2)]
    assert all(a < b for a, b in zip(costs, costs[1:]))


def test_package_cost_monotone_in_defect_density_and_stacks():
    spec = hardware_cost("a100-sxm4-80gb").package
    units = []
    for d in (0.0, 0.05, 0.1, 0.2):
        dies = tuple(replace(x, process=replace(x.process, defect_density_per_cm2=d)) for x in spec.dies)
        units.append(package_cost(replace(spec, dies=dies)).unit_usd)
    assert all(a < b for a, b in zip(units, units[1:]))
    stacks = [package_cost(spec.with_hbm_stacks(n)).package_usd for n in range(1, 9)]
    assert all(a < b for a, b in zip(stacks, stacks[1:]))


def test_perfect_assembly_costs_the_sum_of_its_parts():
    spec = hardware_cost("a100-sxm4-80gb").package
    perfect = replace(spec, attach_yield=1.0, substrate_attach_yield=1.0,
                      interposer_process=replace(spec.interposer_process, test_coverage=1.0),
                      dies=tuple(replace(d, process=replace(d.process, test_coverage=1.0)) for d in spec.dies))
    b = package_cost(perfect)
    assert b.assembly_yield == 1.0
    assert b.package_usd == pytest.approx(b.parts_usd + b.assembly_usd)
    assert package_cost(spec).yield_loss_usd > 0


def test_splitting_lowers_silicon_cost_at_high_defect_density_and_raises_assembly():
    spec = hardware_cost("a100-sxm4-80gb").package
    dirty = replace(spec, dies=tuple(replace(d, process=replace(d.process, defect_density_per_cm2=0.3))
                                     for d in spec.dies))
    mono, four = package_cost(dirty), package_cost(split_die(dirty, 4, d2d_overhead=0.05))
    assert four.dies_usd < 0.7 * mono.dies_usd
    assert four.assembly_usd > mono.assembly_usd and four.assembly_yield < mono.assembly_yield
    clean = replace(spec, dies=tuple(replace(d, process=replace(d.process, defect_density_per_cm2=0.0))
                                     for d in spec.dies))
    # with no defects the die-to-die area is pure overhead (up to whole-die rounding of dies per wafer)
    assert package_cost(split_die(clean, 4, 0.05)).unit_usd > package_cost(clean).unit_usd


def test_a100_baseline_closed_form():
    b = package_cost(hardware_cost("a100-sxm4-80gb").package)
    (ga100,) = b.die_costs
    assert ga100.area_mm2 == 826.0 and ga100.dies_per_wafer == 58        # floor of 58.8 (3 mm edge, 0.2 mm scribe)
    assert ga100.die_yield == pytest.approx((1 + 8.26 * 0.09 / 3) ** -3)
    assert b.hbm_usd == 5 * 120 + 5


def test_h100_unit_cost_near_published_estimate():
    """Raymond James (Aug 2023, widely reported) put an H100 SXM's manufacturing cost near 3,320 USD.
    Every input here comes from config (none fitted to this number); the estimate itself is uncertain,
    hence the 25% tolerance."""
    unit = package_cost(hardware_cost("h100-sxm5-80gb").package).unit_usd
    assert unit == pytest.approx(3320.0, rel=0.25)


def test_operating_cost_closed_form():
    op = hardware_cost("a100-sxm4-80gb").operating
    assert op.usd_per_gpu_hour == pytest.approx(0.4 * 0.8 * 1.2 * 0.08 + 24875 / (4 * HOURS_PER_YEAR))


def test_usd_per_token_is_usd_per_hour_times_time_over_tokens():
    hc = hardware_cost("a100-sxm4-80gb")
    tokens, step = 2048 * 1536, 9.5
    rec = cost_record(hc, 1024, "training", step, tokens / step)
    assert rec["usd_per_hour"] == pytest.approx(1024 * hc.operating.usd_per_gpu_hour)
    assert rec["usd_per_step"] == pytest.approx(rec["usd_per_hour"] * step / 3600)
    assert rec["usd_per_million_tokens"] == pytest.approx(rec["usd_per_hour"] * step / 3600 / tokens * 1e6)
    assert rec["tokens_per_usd"] * rec["usd_per_million_tokens"] == pytest.approx(1e6)
    inf = cost_record(hc, 8, "inference", None, 500.0)
    assert math.isnan(inf["usd_per_step"]) and inf["usd_per_million_tokens"] > 0


def test_price_prediction_equals_add_cost_columns():
    case = load_case(project_root() / "examples" / "gpt175b-tp8-pp8.yaml")
    record = {"status": "ok", "step_time_s": 13.0, "tokens_per_s": 64 * 2048 / 13.0}
    one = price_prediction(case, record)
    df = add_cost_columns(pd.DataFrame([{**record, "mode": "training"}, {"status": "infeasible"}]), cases=[case, case])
    assert list(df.columns[-len(COST_COLUMNS):]) == list(COST_COLUMNS)
    assert df.iloc[0][list(COST_COLUMNS)].to_dict() == pytest.approx(one)
    assert df.iloc[1][list(COST_COLUMNS)].isna().all()


def test_cost_inputs_carry_sources_and_bad_input_names_file_and_key(tmp_path):
    mapping = {"name": "x", "cost": {"operating": {"board_power_w": {"value": 400}}}}
    with pytest.raises(SpecError) as err:
        hardware_cost(mapping)
    assert "hardware x: cost: operating.board_power_w: missing key 'source'" in str(err.value)
    with pytest.raises(SpecError, match="has no cost section"):
        hardware_cost({"name": "x"})
    with pytest.raises(SpecError, match="not in config/hardware"):
        hardware_cost("toy-gpu")
    from rapidllm.spec.named import resolve_named
    a100, _ = resolve_named("hardware", "a100-sxm4-80gb", "test", "hardware")
    bad = scaled(a100, "cost.package.hbm.price_per_stack_usd", 1.0)
    bad["cost"]["package"]["hbm"]["stacks"] = 7
    with pytest.raises(SpecError, match="package.hbm.stacks: 7 stacks on 6 sites"):
        hardware_cost(bad)


def test_scaled_perturbs_one_value():
    from rapidllm.spec.named import resolve_named
    a100, _ = resolve_named("hardware", "a100-sxm4-80gb", "test", "hardware")
    up = scaled(a100, "cost.package.dies.0.area_mm2", 1.25)
    assert up["cost"]["package"]["dies"][0]["area_mm2"]["value"] == pytest.approx(826 * 1.25)
    assert a100["cost"]["package"]["dies"][0]["area_mm2"]["value"] == 826


def test_cli_cost_flag_on_inline_device_fails_cleanly(tmp_path, gpt_case, capsys, monkeypatch):
    import yaml

    import rapidllm.prediction as prediction
    monkeypatch.setattr(prediction, "evaluate", lambda case, engine, adjust, trace=False: {
        "case_id": case.case_id, "status": "ok", "reason": "", "step_time_s": 1.0, "tokens_per_s": 1.0})
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(gpt_case))
    assert main(["predict", str(path), "--json", "--cost"]) == 2
    err = capsys.readouterr().err.strip()
    assert "hardware: cost: missing; hardware 'toy-gpu' has no cost section" in err and len(err.splitlines()) == 1


def test_add_cost_columns_ranks_a_sweep_frame():
    """A sweep / pipeline summary names hardware, world and mode itself; rows without a prediction stay NaN,
    and ranking by $ per million tokens orders by tokens/s at equal GPU count and device."""
    hc = hardware_cost("h100-sxm5-80gb")
    df = pd.DataFrame({"status": ["ok", "ok", "invalid"], "hardware": ["h100-sxm5-80gb"] * 2 + [None],
                       "world": [64, 64, None], "mode": ["training"] * 3, "step_time_s": [2.0, 1.0, None],
                       "tokens_per_s": [1e5, 2e5, None]})
    out = add_cost_columns(df, {"h100-sxm5-80gb": hc})
    assert out.usd_per_million_tokens.iloc[1] == pytest.approx(out.usd_per_million_tokens.iloc[0] / 2)
    assert list(out.sort_values("usd_per_million_tokens").index[:2]) == [1, 0]
    assert out.iloc[2][list(COST_COLUMNS)].isna().all()
    assert out.usd_per_step.iloc[0] == pytest.approx(2.0 * 64 * hc.operating.usd_per_gpu_hour / 3600)


def test_add_cost_columns_prices_an_inline_device_from_its_case(tmp_path):
    """Review 17, finding 6: an inline A100 with twice the capital cost that keeps the config name was priced
    as config/hardware/a100-sxm4-80gb.yaml, with or without `cases=`. Given as a mapping or as a YAML path
    among `cases`, its row now takes its own `cost:` section (as `predict --cost` does); a named case and a
    `Case` keep the config device's; `costs` given by name overrides both."""
    import yaml

    from rapidllm.spec.named import resolve_named

    a100, _ = resolve_named("hardware", "a100-sxm4-80gb", "test", "hardware")
    dearer = scaled(a100, "cost.operating.capital_usd", 2.0)
    named = yaml.safe_load((project_root() / "examples" / "gpt175b-tp8-pp8.yaml").read_text())
    inline = {**named, "hardware": dearer}
    (tmp_path / "dev.yaml").write_text(yaml.safe_dump(dearer))
    (tmp_path / "case.yaml").write_text(yaml.safe_dump({**named, "hardware": "dev.yaml"}))
    cases = [inline, tmp_path / "case.yaml", named, load_case(project_root() / "examples" / "gpt175b-tp8-pp8.yaml")]
    record = {"status": "ok", "step_time_s": 13.0, "tokens_per_s": 64 * 2048 / 13.0}
    df = add_cost_columns(pd.DataFrame([record] * 4), cases=cases)
    own, config = (hardware_cost(h).operating.usd_per_gpu_hour for h in (dearer, "a100-sxm4-80gb"))
    assert own > config and list(df.hardware) == ["a100-sxm4-80gb"] * 4
    assert list(df.usd_per_gpu_hour) == pytest.approx([own, own, config, config])
    assert df.usd_per_step.iloc[0] == pytest.approx(13.0 * 64 * own / 3600)
    rented = replace(hardware_cost("a100-sxm4-80gb"), operating=hardware_cost("a100-sxm4-80gb").operating.rented(2.49))
    given = add_cost_columns(pd.DataFrame([record] * 4), {"a100-sxm4-80gb": rented}, cases=cases)
    assert list(given.usd_per_gpu_hour) == pytest.approx([2.49] * 4)


def test_unknown_process_lists_the_known_ones():
    with pytest.raises(SpecError, match=r"unknown process 'n3'; known: n4, n7, si-interposer-65nm"):
        load_process("n3")


def test_every_shipped_capital_states_its_basis():
    """A100's capital is a DGX share, H100/H200/B200's a GPU price (user trial #7): each file says which, and
    the label agrees with the capital's own source (a DGX/system price is a system share)."""
    import yaml

    from rapidllm.cost.operating import CAPITAL_BASES
    for path in sorted((project_root() / "config" / "hardware").glob("*.yaml")):
        operating = (yaml.safe_load(path.read_text()).get("cost") or {}).get("operating")
        if operating is None:
            continue
        basis = operating.get("capital_basis")
        assert basis in CAPITAL_BASES, path.name
        assert (basis == "system_share") == ("DGX" in operating["capital_usd"]["source"]), path.name
        assert hardware_cost(path.stem).operating.basis == basis


def test_a_rental_rate_replaces_energy_and_capital():
    hc = hardware_cost("h100-sxm5-80gb")
    rented = replace(hc, operating=hc.operating.rented(2.0))
    own, rent = (cost_record(c, 16, "training", 10.0, 5000.0) for c in (hc, rented))
    assert rent["usd_per_gpu_hour"] == 2.0 and rent["usd_per_hour"] == 32.0
    assert rent["usd_per_million_tokens"] == pytest.approx(32.0 / (3600 * 5000.0) * 1e6)
    assert rent["usd_per_million_tokens"] / own["usd_per_million_tokens"] == pytest.approx(
        2.0 / hc.operating.usd_per_gpu_hour)
    assert rent["tokens_per_s_per_watt"] == own["tokens_per_s_per_watt"]     # the GPU draws what it draws
    for key in ("energy_usd_per_gpu_hour", "capital_usd_per_gpu_hour", "tokens_per_s_per_capital_usd"):
        assert math.isnan(rent[key]) and not math.isnan(own[key])
    assert rented.operating.basis == "rental" and hc.operating.basis == "gpu"


def test_basis_note_says_what_a_basis_leaves_out():
    """Without a rental rate, $/GPU-hour is capital over the life + energy: the caveat printed beside it says
    what the capital is and what is left out (user trial 3 P7: the H100's $0.909 read as a TCO, 2.7x below
    a $2.49 rental), and a rental rate, which includes everything, gets none."""
    from rapidllm.cost.operating import LEFT_OUT

    h100, a100 = (hardware_cost(n).operating for n in ("h100-sxm5-80gb", "a100-sxm4-80gb"))
    note = h100.basis_note("FLAG")
    assert note.startswith("the GPU's price over 4 years + energy only, without servers, network and facility")
    assert note.endswith("FLAG prices at one")
    assert "without network and facility" in a100.basis_note("FLAG") and "servers" not in a100.basis_note("FLAG")
    assert "do not say what capital_usd covers" in replace(h100, capital_basis="").basis_note("FLAG")
    assert h100.rented(2.49).basis_note("FLAG") is None
    assert set(LEFT_OUT) == {"gpu", "system_share"}


def test_cli_cost_prints_the_basis_caveat_once_and_json_adds_it(capsys):
    """`predict --cost` prints one note line below the $ figures, naming --usd-per-gpu-hour; --json keeps
    every key it had and adds `cost_note` (null with a rate, and then no line)."""
    import json

    case = str(project_root() / "examples" / "gpt175b-tp8-pp8.yaml")
    assert main(["predict", case, "--cost"]) == 0
    lines = capsys.readouterr().out.splitlines()
    notes = [line for line in lines if line.strip().startswith("note:")]
    assert len(notes) == 1 and "--usd-per-gpu-hour RATE" in notes[0] and lines[-1] == notes[0]
    assert lines[-2].split()[0] == "cost_basis"
    assert main(["predict", case, "--cost", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cost_basis"] == "system_share" and out["cost_note"] == notes[0].split("note: ", 1)[1]
    assert set(COST_COLUMNS) <= set(out)
    assert main(["predict", case, "--cost", "--json", "--usd-per-gpu-hour", "2.49"]) == 0
    rented = json.loads(capsys.readouterr().out)
    assert rented["cost_note"] is None and set(rented) == set(out)
    assert main(["predict", case, "--cost", "--usd-per-gpu-hour", "2.49"]) == 0
    assert "note:" not in capsys.readouterr().out
    assert main(["predict", case, "--json"]) == 0
    assert "cost_note" not in json.loads(capsys.readouterr().out)
