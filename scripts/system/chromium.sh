#!/usr/bin/env bash
# System packages for the explorer's browser test (tests/test_explore.py): Debian's chromium and
# chromium-driver, driven headless by Selenium (a browser build downloaded at install time does not work
# here). Idempotent: exits at once when both are installed. Installs them with apt-get when run as root;
# otherwise prints how to install them (the browser test then skips with the same message). Never fails.
set -u
have_all() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }
have_all && exit 0
PKGS="chromium chromium-driver"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "scripts/system/chromium.sh: installing $PKGS (headless browser for the explorer test) ..."
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q $PKGS >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1
    apt-get install -y -q $PKGS >/dev/null 2>&1
  fi
  have_all || echo "scripts/system/chromium.sh: could not install $PKGS; the browser test will be skipped" >&2
else
  echo "scripts/system/chromium.sh: chromium is not installed; the explorer's browser test will be skipped." \
       "Install it with: sudo apt-get install -y $PKGS" >&2
fi
exit 0
