#!/usr/bin/env bash
# Optional validation dependency: Debian's ns-3 3.37 (ns3, libns3-dev; libns3-dev's pkg-config files name
# libgsl.so, hence libgsl-dev) for the packet-level comparison in validation/ns3/ (docs/validation-network.md).
# Idempotent: exits at once when ns-3 can be compiled against. Installs with apt-get when run as root;
# otherwise prints how to install and exits 0 (the ns-3 tests then skip with the same message).
set -u
NS3_PC="ns3-core ns3-network ns3-point-to-point"
have_ns3() { command -v pkg-config >/dev/null && command -v g++ >/dev/null && pkg-config --exists $NS3_PC; }
have_ns3 && exit 0
PKGS="ns3 libns3-dev libgsl-dev pkg-config g++"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "scripts/system/ns3.sh: installing $PKGS (Debian's ns-3 for the network validation) ..."
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q $PKGS >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1
    apt-get install -y -q $PKGS >/dev/null 2>&1
  fi
  if have_ns3; then
    echo "scripts/system/ns3.sh: ns-3 $(pkg-config --modversion ns3-core) installed"
  else
    echo "scripts/system/ns3.sh: could not install ns-3 with apt-get; the ns-3 comparison will be skipped" >&2
  fi
else
  echo "scripts/system/ns3.sh: ns-3 is not installed; the ns-3 comparison tests will be skipped." \
       "Install it with: sudo apt-get install -y $PKGS" >&2
fi
exit 0
