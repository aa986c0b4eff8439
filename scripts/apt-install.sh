#!/usr/bin/env bash
# Installs Debian packages for the project's scripts: `scripts/apt-install.sh PKG...`.
#
# setup.sh and ros.sh run side by side in the test command, and each may need packages on a
# fresh machine: two apt-get runs at once fail on dpkg's lock ("Could not get lock
# /var/lib/dpkg/lock-frontend", exit 100). So every install of the project goes through here:
# one at a time (flock on a lock file of its own), waiting up to 10 minutes for dpkg's lock
# where something else (unattended-upgrades) holds it, and with `apt-get update` once when the
# package lists are stale. Exits non-zero, having said why, where it cannot install: not root,
# no apt-get, or apt-get failed.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/apt-install.sh PKG..." >&2; exit 2; }
command -v apt-get >/dev/null 2>&1 || { echo "apt-install: no apt-get here: install $* by hand" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "apt-install: not root: install $* by hand (apt-get install $*)" >&2; exit 1; }
exec 8>"${TMPDIR:-/tmp}/lop-apt-install.lock"
flock 8
# Another script may have installed them while this one waited.
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
apt=(apt-get -y -q -o DPkg::Lock::Timeout=600)
export DEBIAN_FRONTEND=noninteractive
"${apt[@]}" install --no-install-recommends "${missing[@]}" >&2 \
  || { "${apt[@]}" update >&2 && "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2; }
