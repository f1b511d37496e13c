"""The SLURM path end to end on a real one-machine cluster (Debian slurm-wlm + munge).

scripts/system/slurm.sh installs the packages (run_tests.sh runs it first; as root in CI), the fixture
starts munged, slurmctld and slurmd with scripts/slurm_cluster.sh and stops them by PID afterwards, even when
the test fails. The small sweep goes through `snakemake --profile profiles/slurm` unchanged except
`--cores 2` (this node has 2 CPUs; a group job asks for `cores` CPUs) and a 2 s first status check (the
cluster profile waits 20 s). Results must equal a local run byte for byte.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT
from test_resume import SMALL, env_for, local_run, scratch, snakemake_cmd

CLUSTER = ROOT / "scripts" / "slurm_cluster.sh"
PIDFILES = [Path("/run/slurm/slurmd.pid"), Path("/run/slurm/slurmctld.pid"), Path("/run/munge/munged.pid")]


def _installed() -> bool:
    return all(shutil.which(b) for b in ("slurmctld", "slurmd", "sbatch", "squeue")) and Path("/usr/sbin/munged").exists()


def _pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0 or not _installed():
        if os.geteuid() == 0 and shutil.which("apt-get"):
            pytest.fail("SLURM is missing although scripts/system/slurm.sh can install it here (root, apt-get): "
                        "run `bash scripts/system/slurm.sh`")
        pytest.skip("needs root and Debian's slurm-wlm + munge (scripts/system/slurm.sh; docs/hpc.md)")
    already = {p: _pid(p) for p in PIDFILES}
    start = subprocess.run(["timeout", "-k", "5", "60", "bash", str(CLUSTER), "start"], capture_output=True, text=True)
    started = {p: _pid(p) for p in PIDFILES if _pid(p) and _pid(p) != already[p]}
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        yield
    finally:
        # Stop only the daemons this fixture started, by PID; a cluster that was already up stays up.
        if started:
            # Jobs of a failed run first (every job on this cluster is ours: the fixture started it).
            jobs = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
            if jobs:
                subprocess.run(["scancel", *jobs], capture_output=True, text=True)
            subprocess.run(["timeout", "-k", "5", "60", "bash", str(CLUSTER), "stop"], capture_output=True, text=True)
            for pid in started.values():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_small_sweep_on_slurm_equals_local_run(cluster, tmp_path_factory) -> None:
    work = scratch(tmp_path_factory.mktemp("slurm") / SMALL, SMALL)
    cmd = snakemake_cmd("--slurm-init-seconds-before-status-checks", "2", exp=SMALL, profile="slurm")
    # A wrong status setup makes the executor wait forever and ignore SIGTERM: hence timeout -k. The local
    # reference run goes meanwhile (the SLURM run mostly waits for its status checks).
    proc = subprocess.Popen(["timeout", "-k", "10", "420", *cmd], cwd=work, env=env_for(work), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    t0 = time.monotonic()
    try:
        local = local_run(tmp_path_factory, SMALL)
        t1 = time.monotonic()
        log, _ = proc.communicate(timeout=450)
        print(f"local run {t1 - t0:.0f} s, SLURM run {time.monotonic() - t0:.0f} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, log[-4000:]

    # 72 cases: one expand job, one group job with all 4 shards (16 steps), one collect job.
    submitted = re.findall(r"submitted with SLURM jobid (\d+)", log)
    assert len(submitted) == 3, log[-4000:]
    assert "Group job shard" in log

    files = sorted(p.relative_to(local) for p in (local / "results" / SMALL).rglob("*") if p.is_file())
    assert len(files) == 2 + 4 * 4 + 1   # cases, summary.{csv,parquet}, 4 stages x 4 shards
    differ = [str(f) for f in files if (work / f).read_bytes() != (local / f).read_bytes()]
    assert differ == []
