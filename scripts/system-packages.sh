#!/usr/bin/env bash
# Debian packages the tests run for real, installed only when their tools are missing:
#   prometheus   (2.42: `prometheus` and `promtool`; devtools/prometheus.py, the alert-rule tests)
#   nginx-light  (nginx with grpc_pass; devtools/proxy.py)
#   libjemalloc2 (the allocator the local server preloads, as the server image does; devtools/triton_server.py)
# As root: apt-get update + apt-get install --no-install-recommends, without starting the
# packages' services (a temporary /usr/sbin/policy-rc.d answers 101 "action forbidden" to
# their postinst's invoke-rc.d / deb-systemd-invoke; on a systemd host the units are also
# disabled), so no system prometheus or nginx is left holding :9090 or :80.
# Not root: one line saying what to install, then carry on (the tests that need a tool fail
# naming it); with $CI set, exit 2 instead, so CI never runs without them.
# scripts/test runs it after the bootstrap; on its own: ./scripts/system-packages.sh
set -euo pipefail

main() {
  local tool package missing_tools=() packages=()
  local -A package_of=([prometheus]=prometheus [promtool]=prometheus [nginx]=nginx-light)
  for tool in prometheus promtool nginx; do
    # nginx is in /usr/sbin, which is not on a non-root user's PATH on Debian.
    if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
      missing_tools+=("$tool")
      package="${package_of[$tool]}"
      [[ " ${packages[*]} " == *" $package "* ]] || packages+=("$package")
    fi
  done
  # jemalloc, which the local server preloads as the server image does (devtools/triton_server.py): a library, no tool.
  local jemalloc="${JEMALLOC_GLOB:-/usr/lib/*-linux-gnu/libjemalloc.so.2}" missing=("${missing_tools[@]}")
  if ! compgen -G "$jemalloc" >/dev/null; then
    missing+=(libjemalloc.so.2)
    packages+=(libjemalloc2)
  fi
  [ "${#packages[@]}" -eq 0 ] && return 0

  local what="missing ${missing[*]}: install the Debian package(s) ${packages[*]} (as root: apt-get install -y --no-install-recommends ${packages[*]})"
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    if [ -n "${CI:-}" ]; then
      echo "system-packages: error: $what" >&2
      return 2
    fi
    echo "system-packages: warning: $what; the tests that need them will fail" >&2
    return 0
  fi

  echo "system-packages: installing ${packages[*]} (apt-get)..." >&2
  if [ ! -e "$POLICY" ]; then
    trap 'rm -f "$POLICY"' EXIT
    printf '#!/bin/sh\n# scripts/system-packages.sh: no service starts while it installs\nexit 101\n' >"$POLICY"
    chmod 0755 "$POLICY"
  fi
  local status=0
  {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  } || status=$?
  if [ "$status" -ne 0 ]; then
    echo "system-packages: error: apt-get install ${packages[*]} failed (exit $status)" >&2
    return 2
  fi
  if [ -d /run/systemd/system ]; then
    for package in "${packages[@]}"; do
      systemctl disable --now "${package%-light}.service" >/dev/null 2>&1 || true
    done
  fi
  for tool in "${missing_tools[@]}"; do
    if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
      echo "system-packages: error: $tool still missing after installing ${packages[*]}" >&2
      return 2
    fi
  done
  if ! compgen -G "$jemalloc" >/dev/null; then
    echo "system-packages: error: libjemalloc.so.2 still missing after installing ${packages[*]}" >&2
    return 2
  fi
}

POLICY="${POLICY_RC_D:-/usr/sbin/policy-rc.d}"  # POLICY_RC_D: another path, for its tests only
main
