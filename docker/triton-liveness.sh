#!/usr/bin/env bash
# The server container's liveness check (installed as /usr/local/bin/triton-liveness,
# used by k8s/deployment.yaml's livenessProbe exec): exit 0 when tritonserver is alive
# and every Python backend stub it started is still running; exit 1 with one line on
# stderr otherwise.
#
#   triton-liveness [--pid PID] [--http-port PORT] [--state FILE] [--stuck-after SECONDS] [--steps-dir DIR]
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
#   - a stub of tritonserver has been executing one batch for longer than --stuck-after SECONDS
#     (default $TRITON_STUCK_AFTER_S, else 60; 0 = skip): alive but not answering (a decoder stuck
#     in C, a deadlock), which Triton's health endpoints do not see. Each Python step instance keeps
#     the epoch milliseconds at which its running execute began in --steps-dir (default
#     $TRITON_STEP_HEARTBEAT_DIR, else /tmp/triton-steps)/<instance>.<pid>, zeros while idle
#     (vision_serving/step_heartbeat.py); files of other processes than this server's stubs are
#     skipped. 60 s: the longest execute measured is a few seconds (a preprocess batch of the
#     largest accepted uploads), and the liveness probe's 3 failures add up to 15 s.
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
stuck_after="${TRITON_STUCK_AFTER_S:-60}"
steps_dir="${TRITON_STEP_HEARTBEAT_DIR:-/tmp/triton-steps}"
while (($#)); do
    case "$1" in
        --pid) pid="${2:-}"; shift 2 ;;
        --pid=*) pid="${1#--pid=}"; shift ;;
        --http-port) http_port="${2:-}"; shift 2 ;;
        --http-port=*) http_port="${1#--http-port=}"; shift ;;
        --state) state="${2:-}"; shift 2 ;;
        --state=*) state="${1#--state=}"; shift ;;
        --stuck-after) stuck_after="${2:-}"; shift 2 ;;
        --stuck-after=*) stuck_after="${1#--stuck-after=}"; shift ;;
        --steps-dir) steps_dir="${2:-}"; shift 2 ;;
        --steps-dir=*) steps_dir="${1#--steps-dir=}"; shift ;;
        *) echo "$me: error: unknown argument '$1' (usage: $me [--pid PID] [--http-port PORT] [--state FILE] [--stuck-after SECONDS] [--steps-dir DIR])" >&2; exit 2 ;;
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

if [[ "$stuck_after" != "0" && -d "$steps_dir" ]]; then
    [[ "$stuck_after" =~ ^[0-9]+$ ]] || { echo "$me: error: --stuck-after takes whole seconds, got '$stuck_after'" >&2; exit 2; }
    now_ms="${EPOCHREALTIME/[.,]/}"
    now_ms="${now_ms:0:${#now_ms}-3}"
    for file in "$steps_dir"/*.*; do
        step_pid="${file##*.}"
        [[ "$step_pid" =~ ^[0-9]+$ ]] && read_stat "$step_pid" && [[ "${stat_rest[1]}" == "$pid" ]] || continue
        since=""
        { read -r since < "$file"; } 2> /dev/null
        [[ "$since" =~ ^[0-9]+$ ]] || continue
        since=$((10#$since))
        if ((since > 0 && now_ms - since > stuck_after * 1000)); then
            step="${file##*/}"
            fail "Python backend stub ${step%.*} (pid $step_pid) has been executing one batch for $(((now_ms - since) / 1000)) s (over $stuck_after s): stuck, its requests are not answered"
        fi
    done
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
