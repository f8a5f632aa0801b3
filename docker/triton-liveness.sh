#!/usr/bin/env bash
# The server container's liveness check (installed as /usr/local/bin/triton-liveness,
# used by k8s/deployment.yaml's livenessProbe exec): exit 0 when tritonserver is alive
# and every Python backend stub it started is still running; exit 1 with one line on
# stderr otherwise.
#
#   triton-liveness [--pid PID] [--http-port PORT] [--state FILE]
#
# Why: Triton 2.51 does not restart a dead Python backend stub (server#8604) and
# /v2/health/live and /v2/health/ready stay green; the dead instance's requests fail with
# INTERNAL "Stub process ... is not healthy" until the pod is restarted. A dead stub is a
# zombie child of tritonserver (tritonserver does not reap it). This script fails when
#   - tritonserver is not running (no process named tritonserver, or --pid is gone),
#   - any triton_python_backend_stub child of tritonserver is a zombie (State Z), or
#   - there are fewer stub children than at this tritonserver's first check (a stub that
#     died and was reaped). The first count is kept in --state (default
#     /tmp/triton-liveness.state, keyed by tritonserver's PID and start time, so a
#     restarted server records afresh). Kubernetes runs the liveness probe only after the
#     startupProbe (/v2/health/ready: every model loaded, every stub started) succeeded,
#     so the first count is the full one. With --model-control-mode=none (the
#     Deployment) the stub count never legitimately goes down; with explicit model
#     control an unload would, so do not use this script there.
#   - --http-port PORT (default $TRITON_HTTP_PORT, else 8000; 0 = skip): GET
#     /v2/health/live on 127.0.0.1 must answer 200 within 3 s (the HTTP check the probe
#     replaces), through bash's /dev/tcp.
# Cost: bash builtins only (no grep, cat or curl process), reading /proc/<pid>/stat of the
# container's processes, a few dozen files: about a millisecond.
set -uo pipefail

me="triton-liveness"
pid=""
http_port="${TRITON_HTTP_PORT:-8000}"
state="${TRITON_LIVENESS_STATE:-/tmp/triton-liveness.state}"
while (($#)); do
    case "$1" in
        --pid) pid="${2:-}"; shift 2 ;;
        --pid=*) pid="${1#--pid=}"; shift ;;
        --http-port) http_port="${2:-}"; shift 2 ;;
        --http-port=*) http_port="${1#--http-port=}"; shift ;;
        --state) state="${2:-}"; shift 2 ;;
        --state=*) state="${1#--state=}"; shift ;;
        *) echo "$me: error: unknown argument '$1' (usage: $me [--pid PID] [--http-port PORT] [--state FILE])" >&2; exit 2 ;;
    esac
done

fail() {
    echo "$me: $*" >&2
    exit 1
}

# Fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses):
# stat_rest[0] = state, [1] = ppid, [19] = start time (clock ticks since boot).
read_stat() {
    local line
    stat_comm="" stat_rest=()
    { read -r line < "/proc/$1/stat"; } 2> /dev/null || return 1
    stat_comm="${line#*(}"
    stat_comm="${stat_comm%)*}"
    read -r -a stat_rest <<< "${line##*) }"
}

if [[ -z "$pid" ]]; then
    for dir in /proc/[0-9]*; do
        read_stat "${dir#/proc/}" || continue
        if [[ "$stat_comm" == "tritonserver" && "${stat_rest[0]}" != "Z" ]]; then
            pid="${dir#/proc/}"
            break
        fi
    done
    [[ -n "$pid" ]] || fail "no tritonserver process"
fi
read_stat "$pid" || fail "tritonserver (pid $pid) is not running"
[[ "${stat_rest[0]}" != "Z" ]] || fail "tritonserver (pid $pid) is a zombie"
server_start="${stat_rest[19]}"

# Stub children. The kernel keeps 15 characters of the command name: triton_python_b[ackend_stub].
stubs=0
zombies=()
for dir in /proc/[0-9]*; do
    read_stat "${dir#/proc/}" || continue
    [[ "${stat_rest[1]}" == "$pid" && "$stat_comm" == triton_python_b* ]] || continue
    stubs=$((stubs + 1))
    [[ "${stat_rest[0]}" == "Z" ]] && zombies+=("${dir#/proc/}")
done
if ((${#zombies[@]})); then
    fail "${#zombies[@]} dead Python backend stub(s) of tritonserver (zombie pid ${zombies[*]}): Triton does not restart them"
fi

recorded=""
if { read -r state_pid state_start recorded < "$state"; } 2> /dev/null \
    && [[ "$state_pid" == "$pid" && "$state_start" == "$server_start" && "$recorded" =~ ^[0-9]+$ ]]; then
    ((stubs >= recorded)) || fail "$stubs Python backend stub(s) running, $recorded at the first check: a stub died"
else
    { echo "$pid $server_start $stubs" > "$state"; } 2> /dev/null || fail "cannot write $state"
fi

if [[ "$http_port" != "0" ]]; then
    exec 3<> "/dev/tcp/127.0.0.1/$http_port" 2> /dev/null || fail "HTTP port $http_port refuses connections"
    printf 'GET /v2/health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
    status_line=""
    read -r -t 3 status_line <&3
    exec 3>&-
    [[ "$status_line" == "HTTP/1.1 200"* ]] || fail "GET /v2/health/live: ${status_line:-no answer within 3 s}"
fi
exit 0
