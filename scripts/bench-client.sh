#!/usr/bin/env bash
# Speed and memory of the llmsurge client against the built-in mock (a script, not a test).
#
# Builds the release binary, starts `llmsurge mock-server` pinned to one core (MOCK_CORE)
# and runs `llmsurge benchmark run` pinned to another (CLIENT_CORE; its workers inherit
# the affinity). Prints one figure per line, each with its target and PASS or MISS (and,
# on a MISS, what the script saw that explains it):
#   1. the highest streamed request rate sustained (16 output tokens, zero server latency);
#   2. client CPU-seconds (user+sys of the whole process tree) per 1,000 completed
#      requests of 64 output tokens;
#   3. dispatch-lag p99 at a constant 1,000 req/s while a CPU-bound process shares the
#      client's core, in each of LAG_RUNS runs; and at 5,000 req/s with the core alone;
#   4. memory: peak RSS of the whole process tree with 1,000 and 10,000 streams open
#      (50,000 too on 8 cores or more), and the bytes each stream adds;
#   5. time from launch to the first request sent;
#   6. width: the sustained rate with 1 and 2 workers (and with every client core on a
#      machine of 16 or more), the coordinator's share of the client CPU, and the width
#      a 16-core host would show, projected from those one-core figures and from the
#      mock's rate when saturated with the same requests (by wrk, when installed);
#   7. the real-time pacer on a shared core: TTFT mean with real time on and off
#      (LLMSURGE_REALTIME_PACER=0), mock and client on one core, 8 images of 1024² per
#      request at 20 req/s (the pacer must not hold the core while it builds bodies);
#   8. HTTPS and h2c beside plain HTTP, each at the same scale: streamed requests per
#      client CPU-second (req/s per core) of plain HTTP/1.1, of HTTP/2 with prior
#      knowledge (h2c, --http2) and of HTTP/1.1 over TLS, and the memory per open stream
#      of each (TLS_STREAMS streams: 1,000 and 10,000 by
#      default), with a throwaway CA and certificate made by openssl at run time; the
#      rates in TLS_RUNS interleaved rounds, then HTTPS's median against plain's (target
#      >= 0.7x) and HTTPS's memory per stream (target <= 10 KB);
#   9. idle users: IDLE_USERS (40,000) users in multi-turn sessions with IDLE_THINK_S
#      (30 s) think times, started over IDLE_RAMP_S (one think time): peak RSS of the
#      whole tree, the lateness of their turns (send less previous end plus think time)
#      p50 and p99 over the steady part (after the ramp and one think time, for
#      IDLE_MEASURE_S), and the client CPU over that part.
# See docs/performance.md for what limits each figure.
#
# Environment: DURATION (s per rate run, default 10), RATE_CONCURRENCY (streams tried for
# the rate figure, default "64 128 256"), CPU_REQUESTS (default 30000), LAG_RUNS (runs of
# the contended 1,000 req/s lag, default 10), LAG_DURATION (s per lag run, default 5),
# STREAMS (default "1000 10000", plus 50000 on 8 cores or more), STREAM_TTFT_MS (mock
# TTFT of the memory runs, default 4000), LAUNCH_RUNS (default 5), WIDTH ("0" skips the
# width runs), RT_DURATION (s per run of the real-time A/B, default 10), ONLY ("realtime"
# runs the real-time A/B alone, "tls" the HTTPS rows alone, "idle" the idle users
# alone, "width" the width rows and their projection alone), TLS_STREAMS (default "1000 10000"), TLS_CONCURRENCY (streams of the TLS rate
# rows, default 128), TLS_RUNS (rounds of the TLS rate rows, default 3), IDLE_USERS (default 40000), IDLE_THINK_S (default 30), IDLE_RAMP_S
# (default IDLE_THINK_S), IDLE_MEASURE_S (default 90), IDLE_WORKERS (default 1: thinking
# users hold no socket, so one process holds them all under any open-file limit),
# MOCK_CORE / CLIENT_CORE (default 0 / 1),
# CARGO_TARGET_DIR, BENCH_BIN (a binary to measure instead of building this tree's). Needs taskset,
# jq, bc and GNU time (/usr/bin/time), openssl for the HTTPS rows, and for the width
# projection wrk and curl (without them it projects from a part-idle mock, and says so);
# Debian: apt-get install -y util-linux jq bc time openssl wrk curl.
set -euo pipefail

DURATION=${DURATION:-10}
RATE_CONCURRENCY=${RATE_CONCURRENCY:-"64 128 256"}
CPU_REQUESTS=${CPU_REQUESTS:-30000}
LAG_RUNS=${LAG_RUNS:-10}
LAG_DURATION=${LAG_DURATION:-5}
CORES=$(nproc)
if ((CORES >= 8)); then
    STREAMS=${STREAMS:-"1000 10000 50000"}
else
    STREAMS=${STREAMS:-"1000 10000"}
fi
STREAM_TTFT_MS=${STREAM_TTFT_MS:-4000}
LAUNCH_RUNS=${LAUNCH_RUNS:-5}
WIDTH=${WIDTH:-1}
MOCK_CORE=${MOCK_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}
RT_DURATION=${RT_DURATION:-10}
ONLY=${ONLY:-}
TLS_STREAMS=${TLS_STREAMS:-"1000 10000"}
TLS_CONCURRENCY=${TLS_CONCURRENCY:-128}
TLS_RUNS=${TLS_RUNS:-3}
TARGET_TLS_RATIO=0.7
TARGET_TLS_STREAM_KB=10
IDLE_USERS=${IDLE_USERS:-40000}
IDLE_THINK_S=${IDLE_THINK_S:-30}
IDLE_RAMP_S=${IDLE_RAMP_S:-$IDLE_THINK_S}
IDLE_MEASURE_S=${IDLE_MEASURE_S:-90}
IDLE_WORKERS=${IDLE_WORKERS:-1}

# Targets (issues 3 and 15).
TARGET_RATE=5000
TARGET_CPU_PER_1000=0.25
TARGET_LAG_P99_MS=1
TARGET_LAG_5000_P99_MS=0.2
TARGET_KB_PER_STREAM=10
TARGET_RSS_10000_MB=150
TARGET_LAUNCH_S=0.05
TARGET_WIDTH_16=12
# Real time may not make TTFT worse than without it by more than this (issue 22).
TARGET_RT_TTFT_RATIO=1.10
# 40,000 idle users (issue 39).
TARGET_IDLE_RSS_MB=1024
TARGET_IDLE_LATE_P99_MS=1

cd "$(dirname "$0")/.."
. scripts/lib/bench.sh
need_tools taskset jq bc
if [[ ! -x /usr/bin/time ]]; then
    echo "error: GNU time is missing (Debian: apt-get install -y time)" >&2
    exit 2
fi

bench_binary
CLK_TCK=$(getconf CLK_TCK)

# 10,000 streams need 10,000 sockets in the client and in the mock; llmsurge raises its
# own soft limit to the hard one, the mock inherits this shell's.
ulimit -n "$(ulimit -Hn)"

clean_env
bench_workdir

# start_mock ARGS...: a fresh zero-latency mock (`--instant`: the client, not the server,
# must set every figure; ARGS given explicitly still win) on MOCK_CORES (default
# MOCK_CORE) with MOCK_THREADS server threads (default 1); sets URL.
start_mock() {
    stop_mock
    launch_mock taskset -c "${MOCK_CORES:-$MOCK_CORE}" "$BIN" mock-server --port 0 \
        --workers "${MOCK_THREADS:-1}" --instant "$@"
}

# cpu_ticks, tree_ticks and core_busy_ticks (CPU ticks of a process, of a client's tree,
# of cores): scripts/lib/bench.sh.

# client NAME ARGS...: runs `benchmark run` against the mock on CLIENT_CORE under GNU
# time; the report lands in $WORK/NAME/benchmarks.json, user+sys of the whole tree in
# $WORK/NAME/cpu_s, the mock's CPU share over the run in $WORK/NAME/mock_busy, and the
# share of the client's core that other processes took in $WORK/NAME/others_busy.
client() {
    local name=$1
    shift
    local dir="$WORK/$name"
    mkdir -p "$dir"
    local mock_before core_before wall_before status=0
    mock_before=$(cpu_ticks "$MOCK_PID")
    core_before=$(core_busy_ticks "$CLIENT_CORE")
    wall_before=$EPOCHREALTIME
    taskset -c "${CLIENT_CORES:-$CLIENT_CORE}" /usr/bin/time -f '%U %S' -o "$dir/time" \
        "$BIN" benchmark run --target "$URL" --outputs json --output-dir "$dir" "$@" \
        >"$dir/stdout" 2>"$dir/stderr" || status=$?
    # 4 is an "invalid run" (e.g. nothing completed): the figures may still be read.
    if [[ $status -ne 0 && $status -ne 4 ]]; then
        echo "error: llmsurge $name exited with $status: $(tail -n 3 "$dir/stderr")" >&2
        exit 1
    fi
    local wall=$(echo "$EPOCHREALTIME - $wall_before" | bc -l)
    awk '{printf "%.3f\n", $1 + $2}' "$dir/time" | tail -n1 >"$dir/cpu_s"
    echo "($(cpu_ticks "$MOCK_PID") - $mock_before) / $CLK_TCK / $wall" | bc -l >"$dir/mock_busy"
    local others
    others=$(echo "(($(core_busy_ticks "$CLIENT_CORE") - $core_before) / $CLK_TCK - $(cat "$dir/cpu_s")) / $wall" | bc -l)
    (($(echo "$others < 0" | bc -l))) && others=0
    echo "$others" >"$dir/others_busy"
    echo "$wall" >"$dir/wall_s"
}

report() { jq -r ".benchmarks[0]$2" "$WORK/$1/benchmarks.json"; }
verdict() { # CONDITION-as-bc-expression
    if (($(echo "$1" | bc -l))); then echo PASS; else echo MISS; fi
}
pct() { printf '%.0f%%' "$(echo "$1 * 100" | bc -l)"; }

echo "llmsurge client figures (mock on core $MOCK_CORE, client on core $CLIENT_CORE, $CORES cores, load average $(cut -d' ' -f1 /proc/loadavg) at start)"

# 7. The real-time pacer on a shared core: the mock and the client on CLIENT_CORE, 8 images
# of 1024² per request (a body of ~4.5 MB the pacer builds between slots) at 20 req/s,
# RT_DURATION s with real time and without (LLMSURGE_REALTIME_PACER=0). A pacer still
# real-time while it builds the next body keeps the runtime thread from the responses
# that arrive meanwhile: TTFT mean with real time must not exceed the one without by
# more than TARGET_RT_TTFT_RATIO.
realtime_ab() {
    MOCK_CORES=$CLIENT_CORE MOCK_THREADS=1 start_mock --output-tokens 16
    local data=prompt_tokens=16,output_tokens=16,images=8,image_size=1024x1024
    client rt-on --profile constant --rate 20 --max-seconds "$RT_DURATION" --workers 1 --data "$data"
    LLMSURGE_REALTIME_PACER=0 client rt-off --profile constant --rate 20 --max-seconds "$RT_DURATION" \
        --workers 1 --data "$data"
    local on off on_rt off_rt on_n off_n v line
    on=$(report rt-on '.metrics.ttft.successful.mean')
    off=$(report rt-off '.metrics.ttft.successful.mean')
    on_n=$(report rt-on .requests.completed)
    off_n=$(report rt-off .requests.completed)
    # (jq's // would turn false into the fallback too)
    on_rt=$(jq -r '.metadata.host.realtime_pacer | if . == null then "unknown" else tostring end' "$WORK/rt-on/benchmarks.json")
    off_rt=$(jq -r '.metadata.host.realtime_pacer | if . == null then "unknown" else tostring end' "$WORK/rt-off/benchmarks.json")
    v=$(verdict "$on <= $off * $TARGET_RT_TTFT_RATIO")
    line=$(printf 'real-time pacer on a shared core (mock and client on core %s, 8 images of 1024² per request, 20 req/s, %s s each): TTFT mean %.2f ms with real time (real-time pacer: %s, %d completed), %.2f ms without (real-time pacer: %s, %d completed) target with <= %sx without: %s' \
        "$CLIENT_CORE" "$RT_DURATION" "$on" "$on_rt" "$on_n" "$off" "$off_rt" "$off_n" "$TARGET_RT_TTFT_RATIO" "$v")
    if [[ $on_rt != true ]]; then
        line+=" (no real time in either run: needs root, CAP_SYS_NICE or ulimit -r 1)"
    elif [[ $v == MISS ]]; then
        line+=" (the pacer held the core while the runtime thread had responses to read: see docs/performance.md)"
    fi
    echo "$line"
}

# 8. HTTPS beside plain HTTP (make_pki: scripts/lib/bench.sh).
# open_streams_kib NAME N ARGS...: peak RSS (KiB) of the tree with N streams waiting for
# their first token (the mock holds each for STREAM_TTFT_MS), as case 4's "open" runs.
open_streams_kib() {
    local name=$1 n=$2
    shift 2
    local dir="$WORK/$name" seconds=$(((STREAM_TTFT_MS - 1000) / 1000)) peak=0 rss pid status=0
    ((seconds < 2)) && seconds=2
    mkdir -p "$dir"
    taskset -c "$CLIENT_CORE" "$BIN" benchmark run --target "$URL" --outputs json --output-dir "$dir" \
        --profile concurrent --rate "$n" --rampup 1s --max-seconds "$seconds" --workers 1 \
        --data prompt_tokens=16,output_tokens=16 "$@" >"$dir/stdout" 2>"$dir/stderr" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        rss=$(rss_tree "$pid")
        ((rss > peak)) && peak=$rss
        sleep 0.1
    done
    wait "$pid" || status=$?
    if [[ $status -ne 0 && $status -ne 4 ]]; then
        echo "error: llmsurge $name exited with $status: $(tail -n 3 "$dir/stderr")" >&2
        exit 1
    fi
    echo "$peak"
}
tls_rows() {
    if ! command -v openssl >/dev/null; then
        echo "https rows: skipped (openssl is missing; Debian: apt-get install -y openssl)"
        return 0
    fi
    make_pki
    local tls=(--tls-cert "$WORK/pki/cert.pem" --tls-key "$WORK/pki/key.pem")
    local ca=(--ca-cert "$WORK/pki/ca.pem")
    local scheme rps cpu done_n per_core handshake proto run name
    # The transports take turns, TLS_RUNS rounds: a shared machine's load drifts over
    # minutes, and the ratios are only worth what the runs they compare have in common.
    declare -A per_core_runs=() mock_runs=()
    for ((run = 1; run <= TLS_RUNS; run++)); do
        for scheme in http h2c https; do
            if [[ $scheme == https ]]; then start_mock --output-tokens 16 "${tls[@]}"; else start_mock --output-tokens 16; fi
            local extra=()
            [[ $scheme == https ]] && extra=("${ca[@]}")
            [[ $scheme == h2c ]] && extra=(--http2)
            proto=HTTP/1.1
            [[ $scheme == h2c ]] && proto="HTTP/2, h2c"
            name="tls-rate-$scheme-$run"
            client "$name" --profile throughput --max-concurrency "$TLS_CONCURRENCY" \
                --max-seconds "$DURATION" --warmup 1s --workers 1 --data prompt_tokens=16,output_tokens=16 "${extra[@]}"
            rps=$(report "$name" .throughput.requests_per_s)
            done_n=$(report "$name" .requests.completed)
            cpu=$(cat "$WORK/$name/cpu_s")
            per_core=$(echo "$done_n / $cpu" | bc -l)
            per_core_runs[$scheme]+="$(printf '%.0f' "$per_core") "
            mock_runs[$scheme]+="$(pct "$(cat "$WORK/$name/mock_busy")") "
            handshake=$(jq -r '.benchmarks[0].client.connections.connect.percentiles.p50 // empty' "$WORK/$name/benchmarks.json")
            handshake=${handshake:+$handshake ms}
            handshake=${handshake:-none: no connection opened after the warm-up}
            printf '%s streamed rate, run %d of %d (%s, 16 output tokens, %s streams): %.0f req/s, %.0f completed requests per client CPU-second (req/s per core; mock %s of its core; connect p50 %s) no target\n' \
                "$scheme" "$run" "$TLS_RUNS" "$proto" "$TLS_CONCURRENCY" "$rps" "$per_core" "$(pct "$(cat "$WORK/$name/mock_busy")")" "$handshake"
        done
    done
    local plain ratio target
    plain=$(median ${per_core_runs[http]})
    for scheme in h2c https; do
        per_core=$(median ${per_core_runs[$scheme]})
        ratio=$(echo "$per_core / $plain" | bc -l)
        target="no target"
        [[ $scheme == https ]] && target="target >= ${TARGET_TLS_RATIO}x: $(verdict "$ratio >= $TARGET_TLS_RATIO")"
        printf '%s streamed requests per client CPU-second against plain HTTP/1.1: %.2fx (medians of %d interleaved runs: %s against %s; mock busy %sagainst %s) %s\n' \
            "$scheme" "$ratio" "$TLS_RUNS" "$per_core" "$plain" "${mock_runs[$scheme]}" "${mock_runs[http]% }" "$target"
    done
    local first=${TLS_STREAMS%% *} n kib base
    for scheme in http h2c https; do
        if [[ $scheme == https ]]; then
            start_mock --ttft-ms "$STREAM_TTFT_MS" --itl-ms 0 --output-tokens 16 "${tls[@]}"
        else
            start_mock --ttft-ms "$STREAM_TTFT_MS" --itl-ms 0 --output-tokens 16
        fi
        local extra=()
        [[ $scheme == https ]] && extra=("${ca[@]}")
        [[ $scheme == h2c ]] && extra=(--http2)
        base=
        for n in $TLS_STREAMS; do
            kib=$(open_streams_kib "tls-open-$scheme-$n" "$n" "${extra[@]}")
            printf '%s RSS with %d streams open: %.1f MB (whole tree) no target\n' "$scheme" "$n" "$(echo "$kib / 1024" | bc -l)"
            if [[ -z $base ]]; then
                base=$kib
            else
                local per_stream
                per_stream=$(echo "($kib - $base) / ($n - $first)" | bc -l)
                target="no target"
                [[ $scheme == https ]] && target="target <= ${TARGET_TLS_STREAM_KB} KB: $(verdict "$per_stream <= $TARGET_TLS_STREAM_KB")"
                printf '%s memory per open stream, %d to %d streams: %.1f KB (RSS added over streams added) %s\n' \
                    "$scheme" "$first" "$n" "$per_stream" "$target"
            fi
        done
    done
}

# 9. Idle users: IDLE_USERS users, each a session of turns IDLE_THINK_S apart (16-token
# prompts and answers from an instant mock), started evenly over IDLE_RAMP_S so that
# their turns spread over the think time (no herd). The sessions have turns enough to
# outlast the run, so after the ramp every request is a turn due at its previous turn's
# end plus the think time: `--warmup` leaves the ramp and the first think out, and the
# report's dispatch lag over the rest is the turns' lateness. RSS is the whole tree's
# peak; CPU the tree's user+sys over the measured part, as a share of one core.
idle_users() {
    local users=$IDLE_USERS think=$IDLE_THINK_S ramp=$IDLE_RAMP_S measure=$IDLE_MEASURE_S
    local warm=$((ramp + think)) seconds turns workers=$IDLE_WORKERS
    seconds=$((warm + measure))
    turns=$((seconds / think + 2))
    start_mock --output-tokens 16
    local dir="$WORK/idle" status=0 pid peak=0 rss now t0 cpu0= cpu1= wall0 wall1 p
    mkdir -p "$dir"
    taskset -c "$CLIENT_CORE" "$BIN" benchmark run --target "$URL" --outputs json --output-dir "$dir" \
        --profile concurrent --rate "$users" --rampup "${ramp}s" --max-seconds "$seconds" \
        --warmup "${warm}s" --workers "$workers" \
        --data "turns=$turns,prompt_tokens=16,output_tokens=16,think_time=${think}s" \
        >"$dir/stdout" 2>"$dir/stderr" &
    pid=$!
    t0=$EPOCHREALTIME
    while kill -0 "$pid" 2>/dev/null; do
        rss=$(rss_tree "$pid")
        ((rss > peak)) && peak=$rss
        now=$(echo "$EPOCHREALTIME - $t0" | bc -l)
        if [[ -z $cpu0 ]] && (($(echo "$now >= $warm" | bc -l))); then
            cpu0=$(tree_ticks "$pid") wall0=$EPOCHREALTIME
        elif [[ -n $cpu0 && -z $cpu1 ]] && (($(echo "$now >= $seconds - 1" | bc -l))); then
            cpu1=$(tree_ticks "$pid") wall1=$EPOCHREALTIME
        fi
        sleep 0.2
    done
    wait "$pid" || status=$?
    if [[ $status -ne 0 && $status -ne 4 ]]; then
        echo "error: llmsurge with $users idle users exited with $status: $(tail -n 3 "$dir/stderr")" >&2
        exit 1
    fi
    local b=".benchmarks[0]" p50 p99 n errors share mb v line
    p50=$(jq -r "$b.client.dispatch_lag_p50_ms" "$dir/benchmarks.json")
    p99=$(jq -r "$b.client.dispatch_lag_p99_ms" "$dir/benchmarks.json")
    n=$(jq -r "$b.metrics.dispatch_lag.successful.count" "$dir/benchmarks.json")
    errors=$(jq -r "$b.requests.errored" "$dir/benchmarks.json")
    if [[ -n $cpu1 ]]; then
        share=$(echo "($cpu1 - $cpu0) / $CLK_TCK / ($wall1 - $wall0)" | bc -l)
    else
        share=0
    fi
    mb=$(echo "$peak / 1024" | bc -l)
    v=$(verdict "$mb <= $TARGET_IDLE_RSS_MB")
    line=$(printf 'idle users: %d users, %d s think times, started over %d s (%d worker(s)): peak RSS %.0f MB (whole tree; %.1f KB per user) target <= %d MB: %s' \
        "$users" "$think" "$ramp" "$workers" "$mb" "$(echo "$peak / $users" | bc -l)" "$TARGET_IDLE_RSS_MB" "$v")
    [[ $v == MISS ]] && line+=" (memory per waiting user above budget: see docs/performance.md)"
    echo "$line"
    v=$(verdict "$p99 <= $TARGET_IDLE_LATE_P99_MS")
    line=$(printf 'idle users: turn lateness over the %d s after the ramp and one think time: p50 %.3f ms, p99 %.3f ms (%s turns, %s errored; %.0f turns/s) target p99 <= %s ms: %s' \
        "$measure" "$p50" "$p99" "$n" "$errors" "$(echo "$n / $measure" | bc -l)" "$TARGET_IDLE_LATE_P99_MS" "$v")
    [[ $v == MISS ]] && line+=" (the worker's runtime thread was late to the turns' instants: busy, or waiting for its core; see docs/performance.md)"
    echo "$line"
    printf 'idle users: client CPU over the same %d s: %s of one core (coordinator and workers, user+sys) no target\n' \
        "$measure" "$(pct "$share")"
}

# width_mock_saturated: requests the mock serves per CPU-second when saturated by the
# width run's own requests: the body the client sent (the mock's --record of the width
# run), driven by wrk with 64 connections a mock thread, on WRK_CORES, for DURATION s
# (whole seconds, at least 1: wrk takes no fraction). Prints that rate; or nothing, with
# why in $WORK/width-saturated.why (no wrk or curl, wrk failed, nothing served).
width_mock_saturated() {
    local why=$WORK/width-saturated.why
    if ! command -v wrk >/dev/null || ! command -v curl >/dev/null; then
        echo "wrk or curl not installed" >"$why"
        return 0
    fi
    local body endpoint ticks before after seconds=${DURATION%.*}
    ((${seconds:-0} >= 1)) || seconds=1
    body=$(head -n1 "$WORK/width-requests.jsonl" | jq -c .body)
    endpoint=$(head -n1 "$WORK/width-requests.jsonl" | jq -r .endpoint)
    # A long string: the prompt's text may hold any quote.
    printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = [==[%s]==]\n' \
        "$body" >"$WORK/width-body.lua"
    local load=(taskset -c "$WRK_CORES" wrk -t"$MOCK_THREADS" -c$((64 * MOCK_THREADS)) -s "$WORK/width-body.lua")
    # wrk_for SECONDS: the load, or false with why.
    wrk_for() {
        local rc=0
        "${load[@]}" -d"$1s" "$URL$endpoint" >"$WORK/width-wrk.txt" 2>&1 || rc=$?
        ((rc == 0)) && return 0
        local said
        said=$(tail -n1 "$WORK/width-wrk.txt")
        echo "wrk exited with $rc${said:+: $said}" >"$why"
        return 1
    }
    wrk_for 1 || return 0 # warm-up
    before=$(mock_completed)
    ticks=$(cpu_ticks "$MOCK_PID")
    wrk_for "$seconds" || return 0
    ticks=$(($(cpu_ticks "$MOCK_PID") - ticks))
    after=$(mock_completed)
    if ! [[ $before =~ ^[0-9]+$ && $after =~ ^[0-9]+$ ]]; then
        echo "the mock's /stats did not answer" >"$why"
    elif ((ticks <= 0 || after <= before)); then
        echo "wrk's load served nothing" >"$why"
    else
        echo "($after - $before) * $CLK_TCK / $ticks" | bc -l
    fi
}
mock_completed() { curl -sf "$URL/stats" | jq .completed || true; }

# width_projection: from the one-worker width run, what a 16-core host would show (a
# quarter of its cores for the mock, the rest for the client): the coordinator's share of
# the client's CPU (the tree's user+sys less the workers' own, `client.worker_cpu_s`;
# the coordinator's start-up is in it, so the share is an upper bound) caps the workers
# one coordinator keeps up with at 1/share, and the mock's CPU per request caps the rate
# 4 mock cores serve (their threads taken to scale as one: not measured here). That CPU
# is the mock's when saturated (width_mock_saturated), as 4 mock cores at the cap are:
# one worker's load leaves the mock's core part idle, and a core that sleeps and wakes
# between requests pays about 1.6x a saturated one's CPU per request (wrk with 4
# connections against 64, this host, 2026-12). Without that rate (no wrk, or it failed)
# the cap is taken from the part-idle share, and the line says why. The projected width
# is the least of the caps and the 12 client cores.
width_projection() {
    local tree workers share busy coord_cap mock_cap projected v saturated how
    tree=$(cat "$WORK/width-1/cpu_s")
    workers=$(report width-1 .client.worker_cpu_s)
    share=$(echo "($tree - $workers) / $tree" | bc -l)
    (($(echo "$share < 0.0001" | bc -l))) && share=0.0001
    busy=$(cat "$WORK/width-1/mock_busy")
    (($(echo "$busy < 0.0001" | bc -l))) && busy=0.0001
    coord_cap=$(echo "1 / $share" | bc -l)
    saturated=$(width_mock_saturated)
    if [[ -n $saturated ]]; then
        mock_cap=$(echo "$MOCK_THREADS_WIDE * $saturated / $one" | bc -l)
        how=$(printf '%d mock cores at %.0f requests per CPU-second, its rate saturated by wrk with the client'"'"'s body; %s busy for one worker' \
            "$MOCK_THREADS_WIDE" "$saturated" "$(pct "$busy")")
    else
        mock_cap=$(echo "$MOCK_THREADS_WIDE / $busy" | bc -l)
        how=$(printf '%d mock cores at %s busy for one worker; no saturated rate (%s), so from a part-idle core: an upper bound on its cost' \
            "$MOCK_THREADS_WIDE" "$(pct "$busy")" "$(cat "$WORK/width-saturated.why")")
    fi
    projected=$(printf '%s\n' "$coord_cap" "$mock_cap" "$CLIENT_CORES_WIDE" | sort -g | head -n1)
    v=$(verdict "$projected >= $TARGET_WIDTH_16")
    printf 'width: coordinator %s of the client CPU with one worker (tree %.2f CPU-s, workers %.2f): one coordinator keeps up with %.1f workers no target\n' \
        "$(pct "$share")" "$tree" "$workers" "$coord_cap"
    printf 'width projected for 16 cores (%d mock, %d client): %.1fx one worker (client cores %d, coordinator cap %.1f, mock cap %.1f: %s) target >= %sx: %s (projection from one core, not measured)\n' \
        "$MOCK_THREADS_WIDE" "$CLIENT_CORES_WIDE" "$projected" "$CLIENT_CORES_WIDE" "$coord_cap" "$mock_cap" "$how" "$TARGET_WIDTH_16" "$v"
}
MOCK_THREADS_WIDE=4
CLIENT_CORES_WIDE=12

# 6. Width: the sustained rate with 1 and 2 workers (each on its own core where there are
# cores enough), and on 16 cores or more with every core the mock does not use.
width_rows() {
    WRK_CORES=$CLIENT_CORE # where the projection's wrk runs
    if ((CORES >= 16)); then
        # A quarter of the cores serve the mock; the client gets the rest.
        mock_n=$((CORES / 4))
        MOCK_CORES="0-$((mock_n - 1))" MOCK_THREADS=$mock_n
        wide_n=$((CORES - mock_n))
        client_list="$mock_n-$((CORES - 1))"
        width_runs="1 2 $wide_n"
        WRK_CORES=$client_list
    elif ((CORES >= 3)); then
        MOCK_CORES=$MOCK_CORE MOCK_THREADS=1
        client_list=$(seq 0 $((CORES - 1)) | grep -vx "$MOCK_CORE" | head -n2 | paste -sd,)
        width_runs="1 2"
    else
        MOCK_CORES=$MOCK_CORE MOCK_THREADS=1
        client_list=$CLIENT_CORE
        width_runs="1 2"
    fi
    # One request recorded: the body the projection's saturation run sends.
    MOCK_CORES=$MOCK_CORES MOCK_THREADS=$MOCK_THREADS start_mock --output-tokens 16 \
        --record "$WORK/width-requests.jsonl" --record-limit 1
    one=0
    for w in $width_runs; do
        if ((w == 1)); then cores=${client_list%%[,-]*}; else cores=$client_list; fi
        CLIENT_CORES=$cores client "width-$w" --profile throughput --max-concurrency $((128 * w)) \
            --max-seconds "$DURATION" --warmup 1s --workers "$w" --data prompt_tokens=16,output_tokens=16
        rps=$(report "width-$w" .throughput.requests_per_s)
        ((w == 1)) && one=$rps
        ratio=$(echo "$rps / $one" | bc -l)
        if ((w > 2)); then
            v=$(verdict "$ratio >= $TARGET_WIDTH_16")
            target="target >= ${TARGET_WIDTH_16}x one worker: $v"
        elif ((w == 2 && CORES < 3)); then
            target="no target (one client core on this $CORES-core machine: the 2 workers share it)"
        else
            target="no target"
        fi
        printf 'width: %d worker(s) on cores %s: %.0f req/s (%.2fx one worker; mock %s of its cores) %s\n' \
            "$w" "$cores" "$rps" "$ratio" "$(pct "$(cat "$WORK/width-$w/mock_busy")")" "$target"
        # An `if`, not `&&`: the loop's last status is the function's, and set -e's.
        if ((w == 1)); then width_projection; fi
    done
}

if [[ $ONLY == realtime ]]; then
    realtime_ab
    exit 0
elif [[ $ONLY == tls ]]; then
    tls_rows
    exit 0
elif [[ $ONLY == idle ]]; then
    idle_users
    exit 0
elif [[ $ONLY == width ]]; then
    width_rows
    exit 0
elif [[ -n $ONLY ]]; then
    echo "error: ONLY=$ONLY: the cases that run alone are realtime, tls, idle and width" >&2
    exit 2
fi

# 1. Highest sustained streamed rate: throughput profile at a few concurrencies.
start_mock --output-tokens 16
best=0 best_c=0
for c in $RATE_CONCURRENCY; do
    client "rate-$c" --profile throughput --max-concurrency "$c" --max-seconds "$DURATION" \
        --warmup 1s --workers 1 --data prompt_tokens=16,output_tokens=16
    rps=$(report "rate-$c" .throughput.requests_per_s)
    if (($(echo "$rps > $best" | bc -l))); then best=$rps best_c=$c; fi
done
r="rate-$best_c"
done_n=$(report "$r" .requests.completed)
cpu=$(cat "$WORK/$r/cpu_s")
wall=$(cat "$WORK/$r/wall_s")
client_busy=$(echo "$cpu / $wall" | bc -l)
mock_busy=$(cat "$WORK/$r/mock_busy")
others_busy=$(cat "$WORK/$r/others_busy")
capacity=$(echo "$done_n / $cpu" | bc -l)
v=$(verdict "$best >= $TARGET_RATE")
line=$(printf 'sustained streamed rate: %.0f req/s (16 output tokens, zero server latency, %s streams; client %s of its core, other processes %s of it, mock %s of its core; %.0f completed requests per client CPU-second) target >= %d: %s' \
    "$best" "$best_c" "$(pct "$client_busy")" "$(pct "$others_busy")" "$(pct "$mock_busy")" "$capacity" "$TARGET_RATE" "$v")
if [[ $v == MISS ]]; then
    if (($(echo "$mock_busy > 0.9" | bc -l))); then
        line+=" (the mock's core was saturated: the mock, not the client, set this rate)"
    elif (($(echo "$others_busy > 0.1" | bc -l))); then
        line+=" (other processes took part of the client's core; the client's own capacity is the per-CPU-second figure)"
    else
        line+=" (the client's core was saturated: its CPU per request sets this rate)"
    fi
fi
echo "$line"

# 2. CPU-seconds of the whole tree per 1,000 requests of 64 output tokens.
start_mock --output-tokens 64
client cpu --profile throughput --max-concurrency 64 --max-requests "$CPU_REQUESTS" --workers 1 \
    --data prompt_tokens=16,output_tokens=64
done_n=$(report cpu .requests.completed)
cpu=$(cat "$WORK/cpu/cpu_s")
worker_cpu=$(report cpu .client.worker_cpu_s)
per_1000=$(echo "$cpu / $done_n * 1000" | bc -l)
v=$(verdict "$per_1000 <= $TARGET_CPU_PER_1000")
line=$(printf 'client CPU per 1,000 requests (64 output tokens): %.3f CPU-s (%d requests, %.2f CPU-s in all, %.2f of it in the worker) target <= %s: %s' \
    "$per_1000" "$done_n" "$cpu" "$worker_cpu" "$TARGET_CPU_PER_1000" "$v")
[[ $v == MISS ]] && line+=" (per-request CPU above target: profile with perf, see docs/performance.md)"
echo "$line"

# 3. Dispatch lag at a constant 1,000 req/s while a CPU-bound process shares the client's
# core (LAG_RUNS runs), then at 5,000 req/s with the core to the client alone.
start_mock --output-tokens 16
taskset -c "$CLIENT_CORE" sh -c 'while :; do :; done' &
HOG_PID=$!
trap 'kill "$HOG_PID" 2>/dev/null || true; bench_cleanup' EXIT
held=0 worst=0 p99s=()
for i in $(seq "$LAG_RUNS"); do
    client "lag-$i" --profile constant --rate 1000 --max-seconds "$LAG_DURATION" --workers 1 \
        --data prompt_tokens=16,output_tokens=16
    p99=$(report "lag-$i" .client.dispatch_lag_p99_ms)
    p99s+=("$(printf '%.3f' "$p99")")
    (($(echo "$p99 < $TARGET_LAG_P99_MS" | bc -l))) && held=$((held + 1))
    (($(echo "$p99 > $worst" | bc -l))) && worst=$p99
done
kill "$HOG_PID" 2>/dev/null || true
wait "$HOG_PID" 2>/dev/null || true
trap bench_cleanup EXIT
v=$(verdict "$held == $LAG_RUNS")
realtime=$(jq -r '.metadata.host.realtime_pacer // "unknown"' "$WORK/lag-1/benchmarks.json")
line=$(printf 'dispatch lag at 1,000 req/s, a CPU-bound process sharing the client core: p99 under %s ms in %d of %d runs (p99 per run: %s ms; worst %.3f ms; real-time pacer: %s) target %d of %d: %s' \
    "$TARGET_LAG_P99_MS" "$held" "$LAG_RUNS" "${p99s[*]}" "$worst" "$realtime" "$LAG_RUNS" "$LAG_RUNS" "$v")
if [[ $v == MISS ]]; then
    line+=" (the tail is the pacer thread, or for slots handed over (no idle connection, HTTPS, HTTP/2) the worker's runtime thread, waiting for the core while other processes held it; without a real-time pacer (root, CAP_SYS_NICE or ulimit -r 1) it waits its turn: see docs/performance.md)"
fi
echo "$line"

client lag5000 --profile constant --rate 5000 --max-seconds "$DURATION" --workers 1 \
    --data prompt_tokens=16,output_tokens=16
p50=$(report lag5000 .client.dispatch_lag_p50_ms)
p99=$(report lag5000 .client.dispatch_lag_p99_ms)
others_busy=$(cat "$WORK/lag5000/others_busy")
v=$(verdict "$p99 <= $TARGET_LAG_5000_P99_MS")
line=$(printf 'dispatch lag at 5,000 req/s, the client core to itself: p50 %.3f ms, p99 %.3f ms (%s late; %.0f req/s achieved; other processes took %s of the client core) target p99 <= %s ms: %s' \
    "$p50" "$p99" "$(report lag5000 .client.late_requests)" "$(report lag5000 .throughput.requests_per_s)" "$(pct "$others_busy")" "$TARGET_LAG_5000_P99_MS" "$v")
if [[ $v == MISS ]]; then
    line+=" (the tail is the pacer thread preempted at its slot, or slots handed over to the worker's runtime thread, busy with other responses: see docs/performance.md)"
fi
echo "$line"

# 4. Peak RSS of the tree with N streams held open by a slow first token.
# Every stream waits STREAM_TTFT_MS for its first token: all N are open at once. Two runs
# per N: "open" stops before any first token is due (the streams waiting: what an open
# stream costs), "peak" runs on while all N responses arrive at once (the run's peak).
start_mock --ttft-ms "$STREAM_TTFT_MS" --itl-ms 0 --output-tokens 16
for n in $STREAMS; do
    for kind in open peak; do
        dir="$WORK/streams-$kind-$n"
        mkdir -p "$dir"
        if [[ $kind == open ]]; then
            seconds=$(((STREAM_TTFT_MS - 1000) / 1000))
            ((seconds < 2)) && seconds=2
        else
            seconds=$(((STREAM_TTFT_MS * 2 + 1999) / 1000))
        fi
        taskset -c "$CLIENT_CORE" "$BIN" benchmark run --target "$URL" --outputs json --output-dir "$dir" \
            --profile concurrent --rate "$n" --rampup 1s --max-seconds "$seconds" --workers 1 \
            --data prompt_tokens=16,output_tokens=16 >"$dir/stdout" 2>"$dir/stderr" &
        pid=$!
        peak=0
        while kill -0 "$pid" 2>/dev/null; do
            rss=$(rss_tree "$pid")
            ((rss > peak)) && peak=$rss
            sleep 0.1
        done
        status=0
        wait "$pid" || status=$?
        if [[ $status -ne 0 && $status -ne 4 ]]; then
            echo "error: llmsurge with $n streams exited with $status: $(tail -n 3 "$dir/stderr")" >&2
            exit 1
        fi
        open=$(jq -r '.benchmarks[0].throughput.concurrency_peak' "$dir/benchmarks.json")
        errors=$(jq -r '.benchmarks[0].requests.errored' "$dir/benchmarks.json")
        mb=$(echo "$peak / 1024" | bc -l)
        echo "$peak" >"$dir/peak_kib"
        if ((n == 10000)); then
            v=$(verdict "$mb <= $TARGET_RSS_10000_MB")
            target="target <= $TARGET_RSS_10000_MB MB: $v"
        else
            v=PASS
            target="no target"
        fi
        if [[ $kind == open ]]; then
            what="RSS with %d streams open (waiting for their first token)"
        else
            what="peak RSS with %d streams (their responses arriving at once)"
        fi
        line=$(printf "$what: %.1f MB (whole tree; %s streams open at peak, %s errored) %s" \
            "$n" "$mb" "$open" "$errors" "$target")
        if ((open < n)); then
            line+=" (MISS: only $open of $n streams were open at once; see $dir/stderr)"
        elif [[ $v == MISS ]]; then
            line+=" (memory per open stream above budget: see docs/performance.md)"
        fi
        echo "$line"
    done
done
# What each stream adds: the RSS between the smallest and each larger run, per stream.
first=${STREAMS%% *}
for n in $STREAMS; do
    ((n > first)) || continue
    for kind in open peak; do
        kb=$(echo "($(cat "$WORK/streams-$kind-$n/peak_kib") - $(cat "$WORK/streams-$kind-$first/peak_kib")) / ($n - $first)" | bc -l)
        if ((n == 10000)) && [[ $kind == open ]]; then
            v=$(verdict "$kb <= $TARGET_KB_PER_STREAM")
            target="target <= $TARGET_KB_PER_STREAM KB: $v"
        else
            target="no target"
        fi
        if [[ $kind == open ]]; then label="memory per open stream"; else label="memory per stream at the response peak"; fi
        printf '%s, %d to %d streams: %.1f KB (RSS added over streams added) %s\n' \
            "$label" "$first" "$n" "$kb" "$target"
    done
done

# 5. Launch to the first request sent (median of LAUNCH_RUNS).
start_mock --output-tokens 16
times=()
for i in $(seq "$LAUNCH_RUNS"); do
    dir="$WORK/launch-$i"
    mkdir -p "$dir"
    launched=$EPOCHREALTIME
    taskset -c "$CLIENT_CORE" "$BIN" benchmark run --target "$URL" --outputs json --output-dir "$dir" \
        --profile synchronous --max-requests 5 --data prompt_tokens=16,output_tokens=16 \
        >"$dir/stdout" 2>"$dir/stderr"
    first=$(jq -r '.benchmarks[0].measured_window.start_time' "$dir/benchmarks.json")
    times+=("$(printf '%.3f' "$(echo "$first - $launched" | bc -l)")")
done
median=$(median "${times[@]}")
v=$(verdict "$median <= $TARGET_LAUNCH_S")
line=$(printf 'launch to first request: %.0f ms (median of %d: %s s) target <= %.0f ms: %s' \
    "$(echo "$median * 1000" | bc -l)" "$LAUNCH_RUNS" "${times[*]}" "$(echo "$TARGET_LAUNCH_S * 1000" | bc -l)" "$v")
[[ $v == MISS ]] && line+=" (LLMSURGE_LOG=debug on a run logs the start-up phases: see docs/performance.md)"
echo "$line"

[[ $WIDTH != 0 ]] && width_rows
realtime_ab
tls_rows
idle_users
