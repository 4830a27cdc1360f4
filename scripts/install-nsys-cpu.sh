#!/usr/bin/env bash
# Installs Debian's non-free `nsight-systems` (2022.4) on a CPU-only Debian/Ubuntu box, so the
# suite can still profile NVTX and OS-runtime activity without a GPU.
# - The apt source is copied from the system's existing entry with the extra components added;
#   no host name is written here.
# - nsys 2022.4 looks for its importer in `host-linux-x64` beside the *resolved*
#   `target-linux-x64`; Debian does not ship it there, so we link it.
set -euo pipefail
# The version is said once, at the end, with whether it was there already.
if command -v nsys >/dev/null 2>&1 && nsys --version >/dev/null 2>&1; then
  how="already installed"
else
  how=installed
  src=/etc/apt/sources.list.d/debian.sources
  extra=/etc/apt/sources.list.d/bottleneck-suite-nonfree.sources
  if [ -f "$src" ]; then
    # deb822 format: keep the first stanza (the main archive), widen its components.
    awk 'BEGIN{RS=""; ORS="\n\n"} NR==1{print}' "$src" \
      | sed -E 's/^Components:.*/Components: contrib non-free non-free-firmware/' > "$extra"
  elif [ -f /etc/apt/sources.list ]; then
    grep -E '^deb ' /etc/apt/sources.list | head -1 \
      | sed -E 's/ main.*$/ contrib non-free non-free-firmware/' > /etc/apt/sources.list.d/bottleneck-suite-nonfree.list
  else
    echo "no apt source to copy; install nsight-systems by hand" >&2; exit 2
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nsight-systems >/dev/null
fi
# Link the importer beside the resolved target directory.
real=$(readlink -f "$(command -v nsys)")
target_dir=$(dirname "$real")
case "$target_dir" in
  */target-linux-x64)
    base=$(dirname "$target_dir")
    if [ ! -e "$base/host-linux-x64" ]; then
      for cand in /usr/lib/nsight-systems/host-linux-x64 /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64 $(dirname "$base")/*/host-linux-x64; do
        if [ -d "$cand" ]; then ln -s "$cand" "$base/host-linux-x64"; break; fi
      done
    fi
    ;;
esac
echo "nsys $how: $(nsys --version)"
