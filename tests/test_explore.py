"""The explorer: its form logic, its search hook, the page through Streamlit's own testing API (AppTest), and
one real server start on 127.0.0.1 answered over HTTP. The numbers on the page are `rapidllm.predict`'s."""
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pandas as pd
import pytest
import yaml

import rapidllm
from rapidllm.explore import edits as E
from rapidllm.cli.explore import APP, server_command
from rapidllm.explore.search_hook import case_axes, run_search, search_function, search_spec
from rapidllm.search.spec import load_search
from rapidllm.spec.case import load_case, resolve_case
from rapidllm.spec.paths import project_root

EXAMPLE = project_root() / "examples" / "gpt175b-tp8-pp8.yaml"
BASE = yaml.safe_load(EXAMPLE.read_text())
ARTIFACTS = project_root() / "results" / "test-artifacts"


def test_unedited_case_keeps_its_names_and_case_id():
    same = E.apply_edits(BASE, {"hardware": {"hbm_bandwidth": 2.039e12, "hbm_capacity": 80 * 2**30},
                                "dimensions": {0: {"link_bandwidth": 300e9, "latency": 1.3e-6}},
                                "parallelism": {}, "faults": []})
    assert same == BASE
    assert resolve_case(same, "x").case_id == load_case(EXAMPLE).case_id


def test_edits_reach_the_specs():
    faster = E.apply_edits(BASE, {"hardware": {"hbm_bandwidth": 4e12}, "dimensions": {1: {"link_bandwidth": 50e9}},
                                  "workload": {"global_batch": 128}, "clock": "1.2 GHz"})
    case = resolve_case(faster, "x")
    assert case.hardware.hbm_bandwidth == 4e12 and case.network.dimensions[1].link_bandwidth == 50e9
    assert case.network.dimensions[0].link_bandwidth == 300e9 and case.workload.global_batch == 128
    assert isinstance(faster["model"], str) and BASE["hardware"] == "a100-sxm4-80gb"     # input untouched
    (label, link), *_ = E.cables(BASE, 0)
    assert link[0] == 0 and "nvlink" in label
    faulty = resolve_case(E.apply_edits(BASE, {"faults": [{"link": link, "bandwidth_factor": 0.25}]}), "x")
    assert len(faulty.network.faults) == 1 and faulty.network.faults[0].bandwidth_factor == 0.25


def test_a_switch_id_or_a_rank_past_the_world_has_no_cables():
    """The 'at rank' control has no maximum: rank 64 of a 64-GPU case listed a switch's cables as rank 64's."""
    assert E.cables(BASE, 63) and E.cables(BASE, 64) == [] and E.cables(BASE, -1) == []


def test_breakdown_memory_and_compare_tables():
    p = rapidllm.predict(BASE)
    b = E.breakdown(p)
    assert b.seconds.sum() == pytest.approx(p.step_time_s, rel=1e-9)
    m = E.memory_table(p).set_index("component").GiB
    assert m["peak"] == pytest.approx(p.memory.peak / 2**30) and m["capacity"] == pytest.approx(80.0)
    q = rapidllm.predict(E.apply_edits(BASE, {"workload": {"global_batch": 128}}))
    c = E.compare(p, q).set_index("quantity")
    assert c.loc["step_time_s", "B / A"] == pytest.approx(q.step_time_s / p.step_time_s)


def test_search_hook_builds_a_spec_and_reports_absence():
    seen = {}

    def fake(spec, top):
        seen.update(spec=spec, top=top)
        return "ranked"

    spec = search_spec(BASE, 64, "step_time_s", {"tp": [4, 8]})
    assert run_search(spec, 3, fake) == "ranked" and seen["top"] == 3
    assert seen["spec"]["gpus"] == 64 and seen["spec"]["space"] == {"tp": [4, 8]}
    assert seen["spec"]["model"] == "gpt-175b" and seen["spec"]["objective"] == "step_time_s"
    fn, why = search_function()
    assert (fn is None) == bool(why)
    if fn is None:
        assert "not available" in why
        with pytest.raises(ValueError, match="not available"):
            run_search(spec)


def test_search_around_an_inference_case_keeps_its_decode_kernel():
    """The page's default search (keep case A's axes) around a serving case: only axes an inference search
    has (no recompute, ZeRO, micro-batch), and the case's decode kernel, framework and attention kernel
    carried into the spec."""
    serve = {"model": "llama2-70b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "fp16",
             "decode_attention": "per_head", "framework": "tensorrt-llm", "attention_impl": "flash3",
             "parallelism": {"tp": 4},
             "workload": {"mode": "inference", "batch": 64, "prompt_tokens": 128, "output_tokens": 256}}
    spec = search_spec(serve, 4, "throughput_per_gpu", {**case_axes(serve), "tp": [4], "pp": [1]})
    loaded = load_search(spec)
    assert set(loaded.space) == {"schedule", "sp", "attention_impl", "tp", "pp"}
    assert loaded.space["attention_impl"] == ["flash3"]
    assert {(c.base.decode_attention, c.base.framework) for c in loaded.candidates} == {("per_head", "tensorrt-llm")}
    assert {"recompute", "zero", "micro_batch"} <= set(case_axes(BASE))
    # a training case's overlap switch stays on (wherever it applies) in a search from the page
    overlapped = {**BASE, "parallelism": {**BASE["parallelism"], "sp": True, "tp_comm_overlap": True}}
    assert case_axes(overlapped)["tp_comm_overlap"] == [True] and case_axes(BASE)["tp_comm_overlap"] == [False]
    assert load_search(search_spec(overlapped, 64, "step_time_s", case_axes(overlapped))).space["tp_comm_overlap"] == [True]


def _metric(at, label):
    (m,) = [m for m in at.metric if m.label == label]
    return m.value


def test_page_shows_the_prediction_and_follows_a_control():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=120).run()
    assert not at.exception
    assert _metric(at, "step time (s)") == f"{rapidllm.predict(EXAMPLE).step_time_s:.6g}"
    at.number_input(key="a.w.global_batch").set_value(128).run()
    assert not at.exception
    edited = E.apply_edits(BASE, {"workload": {"global_batch": 128}})
    assert _metric(at, "step time (s)") == f"{rapidllm.predict(edited).step_time_s:.6g}"
    at.checkbox(key="compare").check().run()
    at.number_input(key="b.hw.a100-sxm4-80gb.hbm_bandwidth").set_value(3.0).run()       # TB/s
    assert not at.exception
    b_case = E.apply_edits(BASE, {"hardware": {"hbm_bandwidth": 3e12}})
    values = [m.value for m in at.metric if m.label == "step time (s)"]
    assert values == [f"{rapidllm.predict(edited).step_time_s:.6g}", f"{rapidllm.predict(b_case).step_time_s:.6g}"]
    assert any(h.value == "A vs B" for h in at.header)
    if search_function()[0] is None:
        assert any("layout search is not available" in i.value for i in at.info)


def test_search_panel_runs_the_installed_search(monkeypatch):
    """With a search installed (here a stand-in with the contract of `rapidllm.search.search`) the panel
    sends a spec around case A, keeping its own schedule, recompute, ZeRO, SP and micro-batch, and shows
    the ranked table."""
    from streamlit.testing.v1 import AppTest

    import rapidllm.explore.search_hook as hook

    seen = {}

    def fake(spec, top):
        seen.update(spec=spec, top=top)
        return pd.DataFrame([{"rank": 1, "tp": 8, "pp": 8, "step_time_s": 13.38}])

    monkeypatch.setattr(hook, "search_function", lambda: (fake, ""))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.button(key="search.run").click().run()
    assert not at.exception
    space = seen["spec"]["space"]
    assert space["recompute"] == ["selective"] and space["sp"] == [True] and space["micro_batch"] == [1]
    assert space["tp"] == [1, 2, 4, 8] and seen["spec"]["gpus"] == 64 and seen["top"] == 10
    assert any(list(d.value.columns) == ["rank", "tp", "pp", "step_time_s"] for d in at.dataframe)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_busy_port_is_bad_input_before_the_server_starts():
    """A port another process listens on: one line naming --port, exit 2 (Streamlit said "Port N is not
    available" and exited 1 after the exec)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "rapidllm.cli", "explore", "--port", str(port)],
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"rapidllm explore: --port: 127.0.0.1:{port} is not available (already in use); "
        "allowed: a free port from 1 to 65535"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`rapidllm explore` on a free loopback port, up once for the module's tests; its base URL. The
    command execs the server, so terminating it stops the server itself (checked on the way out)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("explore") / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rapidllm.cli", "explore", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline, health = time.monotonic() + 90, ""
        while time.monotonic() < deadline and not health:
            try:
                health = urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read().decode()
            except OSError:
                assert proc.poll() is None, log.read_text()
                time.sleep(0.5)
        assert health == "ok"
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise


def test_server_answers_on_loopback(server):
    cmd = server_command(8501)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    page = urllib.request.urlopen(f"{server}/", timeout=10)
    assert page.status == 200 and b"<html" in page.read().lower()


CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="Debian's chromium and chromium-driver are not installed "
                    "(scripts/system/chromium.sh installs them; CI runs it)")
def test_browser_shows_the_predicted_step_and_follows_a_control(server):
    """Headless Chromium: load the page, read the step time, change global_batch, read it again; both are
    what `rapidllm.predict` gives. Screenshot: results/test-artifacts/explorer.png."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1500,1500"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    wait = WebDriverWait(driver, 120, poll_frequency=0.25)

    def step_time() -> str:
        values = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricValue"]')
        return values[0].text if values else ""

    try:
        driver.get(server)
        expected = f"{rapidllm.predict(EXAMPLE).step_time_s:.6g}"
        wait.until(lambda d: step_time() == expected)
        box = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, 'input[aria-label="global_batch"]'))
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys("128", Keys.ENTER)
        edited = E.apply_edits(BASE, {"workload": {"global_batch": 128}})
        expected = f"{rapidllm.predict(edited).step_time_s:.6g}"
        wait.until(lambda d: step_time() == expected)
        charts = '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg'
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, charts)) >= 3)   # breakdown, memory, timeline
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "explorer.png"))
    finally:
        driver.quit()


def test_schedule_control_follows_the_virtual_stages_rule():
    """virtual_stages >= 2 alone means interleaved (resolve_case), so the page shows that schedule for such a
    case; choosing 1f1b or gpipe puts the chunks back to 1 (with them the case rules refuse the schedule, and
    the page showed 1f1b for a case it priced interleaved)."""
    chunked = {**BASE, "parallelism": {**BASE["parallelism"], "virtual_stages": 2}}
    chunked["parallelism"].pop("schedule", None)
    par = chunked["parallelism"]
    assert E.schedule_of(par) == resolve_case(chunked, "x").parallelism.schedule == "interleaved"
    assert E.schedule_of(BASE["parallelism"]) == resolve_case(BASE, "x").parallelism.schedule
    assert E.schedule_edits(par, "interleaved", 2) == {}
    for schedule in ("1f1b", "gpipe"):
        case = resolve_case(E.apply_edits(chunked, {"parallelism": E.schedule_edits(par, schedule, 2)}), "x")
        assert (case.parallelism.schedule, case.parallelism.virtual_stages) == (schedule, 1)
    case = resolve_case(E.apply_edits(BASE, {"parallelism": E.schedule_edits(BASE["parallelism"], "interleaved", 3)}),
                        "x")
    assert (case.parallelism.schedule, case.parallelism.virtual_stages) == ("interleaved", 3)
