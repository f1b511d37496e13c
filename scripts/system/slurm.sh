#!/usr/bin/env bash
# System packages for the one-machine SLURM test (tests/test_slurm.py): Debian's slurm-wlm and munge.
# Idempotent: does nothing when slurmctld, slurmd and munged are already installed. Installs them with
# apt-get when run as root on a Debian/Ubuntu machine; otherwise prints how to install them (the SLURM
# test then skips, outside CI). Never fails the caller: a missing package is reported, not fatal.
set -u

have_all() {
  command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 &&
    command -v sbatch >/dev/null 2>&1 && { command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ]; }
}

if have_all; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "scripts/system/slurm.sh: installing slurm-wlm and munge with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  log="$(mktemp)"
  apt_get() { apt-get -o DPkg::Lock::Timeout=300 -y -q "$@" >>"$log" 2>&1; }
  # Try the package lists already there first; update only when that fails (fresh container).
  if ! apt_get install --no-install-recommends slurm-wlm munge; then
    apt_get update
    apt_get install --no-install-recommends slurm-wlm munge || {
      echo "scripts/system/slurm.sh: apt-get install slurm-wlm munge failed:" >&2
      tail -n 20 "$log" >&2
    }
  fi
  rm -f "$log"
  # The munge package's postinst creates the key; make sure one exists even when it did not run.
  if [ ! -s /etc/munge/munge.key ] && command -v mungekey >/dev/null 2>&1; then
    mungekey --create >/dev/null 2>&1 && chown munge:munge /etc/munge/munge.key 2>/dev/null
  fi
fi

if ! have_all; then
  cat >&2 <<'EOF'
scripts/system/slurm.sh: SLURM is not installed; tests/test_slurm.py will skip.
  Install (Debian/Ubuntu, as root):  apt-get install --no-install-recommends slurm-wlm munge
  Then:                              bash scripts/slurm_cluster.sh start   (see docs/hpc.md)
EOF
fi
exit 0
