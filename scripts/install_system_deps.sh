#!/usr/bin/env bash
# Installs the sandbox runtimes (gVisor's runsc, bubblewrap) from Debian's packages when missing.
# Without root or apt the pool falls back to the strongest level that works and says so.
set -u
need=()
command -v runsc >/dev/null 2>&1 || need+=(runsc)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "warning: cannot install ${need[*]} (needs root and apt-get); sandbox level falls back" >&2
  exit 0
fi
echo "installing ${need[*]} ..."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || echo "warning: apt-get install ${need[*]} failed" >&2
exit 0
