#!/usr/bin/env bash
# Debian packages the tests run for real, installed only when their tools are missing:
#   prometheus   (2.42: `prometheus` and `promtool`; devtools/prometheus.py, the alert-rule tests)
#   nginx-light  (nginx with grpc_pass; devtools/proxy.py)
#   libjemalloc2 (the allocator the local server preloads, as the server image does; devtools/triton_server.py)
#   chromium, chromium-driver (headless Chromium and its WebDriver: the gateway page's and the stream preview's
#                browser tests, which run them from Debian's /usr/bin)
#   gir1.2-gst-rtsp-server-1.0, python3-gi, gstreamer1.0-plugins-good and -bad (the stream tests' RTSP server,
#     GStreamer's gst-rtsp-server under Debian's Python: tests/support/rtsp_server.py); files, looked for by path
#     under $SYSTEM_ROOT (default /)
# As root: apt-get update + apt-get install --no-install-recommends, without starting the
# packages' services (a temporary /usr/sbin/policy-rc.d answers 101 "action forbidden" to
# their postinst's invoke-rc.d / deb-systemd-invoke; on a systemd host the units are also
# disabled), so no system prometheus or nginx is left holding :9090 or :80.
# Not root: one line saying what to install, then carry on (the tests that need a tool fail
# naming it); with $CI set, exit 2 instead, so CI never runs without them.
# scripts/test runs it after the bootstrap; on its own: ./scripts/system-packages.sh
set -euo pipefail

# nginx is in /usr/sbin, which is not on a non-root user's PATH on Debian; the browser test runs chromium and
# chromedriver from Debian's folder (BROWSER_DIR: another one, for its tests only), whatever PATH says.
found() {
  case "$1" in
    chromium | chromedriver) [ -x "${BROWSER_DIR:-/usr/bin}/$1" ] ;;
    *) command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] ;;
  esac
}

main() {
  local tool package missing_tools=() packages=() file_globs=()
  local -A package_of=([prometheus]=prometheus [promtool]=prometheus [nginx]=nginx-light [chromium]=chromium [chromedriver]=chromium-driver)
  for tool in prometheus promtool nginx chromium chromedriver; do
    if ! found "$tool"; then
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
  # The stream tests' files: path glob -> package.
  local root="${SYSTEM_ROOT:-}" pair glob
  for pair in \
    "usr/lib/*-linux-gnu/girepository-1.0/GstRtspServer-1.0.typelib=gir1.2-gst-rtsp-server-1.0" \
    "usr/lib/python3/dist-packages/gi/__init__.py=python3-gi" \
    "usr/lib/*-linux-gnu/gstreamer-1.0/libgstisomp4.so=gstreamer1.0-plugins-good" \
    "usr/lib/*-linux-gnu/gstreamer-1.0/libgstvideoparsersbad.so=gstreamer1.0-plugins-bad"; do
    glob="$root/${pair%=*}" package="${pair##*=}"
    if ! compgen -G "$glob" >/dev/null; then
      missing+=("${glob##*/}")
      packages+=("$package")
      file_globs+=("$glob")
    fi
  done
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
    if ! found "$tool"; then
      echo "system-packages: error: $tool still missing after installing ${packages[*]}" >&2
      return 2
    fi
  done
  if ! compgen -G "$jemalloc" >/dev/null; then
    echo "system-packages: error: libjemalloc.so.2 still missing after installing ${packages[*]}" >&2
    return 2
  fi
  for glob in "${file_globs[@]}"; do
    if ! compgen -G "$glob" >/dev/null; then
      echo "system-packages: error: ${glob##*/} still missing after installing ${packages[*]}" >&2
      return 2
    fi
  done
}

POLICY="${POLICY_RC_D:-/usr/sbin/policy-rc.d}"  # POLICY_RC_D: another path, for its tests only
main
