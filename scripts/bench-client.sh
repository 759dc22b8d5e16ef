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
#   3. dispatch-lag p50/p99 at a constant 1,000 req/s;
#   4. peak RSS of the whole process tree at 1,000 and at 10,000 concurrent streams;
#   5. time from launch to the first request sent.
# See docs/performance.md for what limits each figure.
#
# Environment: DURATION (s per rate run, default 10), RATE_CONCURRENCY (streams tried for
# the rate figure, default "64 128 256"), CPU_REQUESTS (default 30000), STREAMS (default
# "1000 10000"), STREAM_TTFT_MS (mock TTFT of the RSS runs, default 4000), LAUNCH_RUNS
# (default 5), MOCK_CORE / CLIENT_CORE (default 0 / 1), CARGO_TARGET_DIR. Needs taskset,
# jq, bc and GNU time (/usr/bin/time); Debian: apt-get install -y util-linux jq bc time.
set -euo pipefail

DURATION=${DURATION:-10}
RATE_CONCURRENCY=${RATE_CONCURRENCY:-"64 128 256"}
CPU_REQUESTS=${CPU_REQUESTS:-30000}
STREAMS=${STREAMS:-"1000 10000"}
STREAM_TTFT_MS=${STREAM_TTFT_MS:-4000}
LAUNCH_RUNS=${LAUNCH_RUNS:-5}
MOCK_CORE=${MOCK_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}

# Targets (issue 3).
TARGET_RATE=5000
TARGET_CPU_PER_1000=0.25
TARGET_LAG_P99_MS=1
TARGET_RSS_1000_MB=150
TARGET_LAUNCH_S=0.5

cd "$(dirname "$0")/.."
for tool in taskset jq bc; do
    if ! command -v "$tool" >/dev/null; then
        echo "error: $tool is missing (Debian: apt-get install -y $tool)" >&2
        exit 2
    fi
done
if [[ ! -x /usr/bin/time ]]; then
    echo "error: GNU time is missing (Debian: apt-get install -y time)" >&2
    exit 2
fi

cargo build --release --quiet --bin llmsurge
BIN="$(pwd)/${CARGO_TARGET_DIR:-target}/release/llmsurge"
CLK_TCK=$(getconf CLK_TCK)

# 10,000 streams need 10,000 sockets in the client and in the mock; llmsurge raises its
# own soft limit to the hard one, the mock inherits this shell's.
ulimit -n "$(ulimit -Hn)"

# Environment variables would silently change the configuration under test.
for var in $(env | grep -o '^LLMSURGE_[A-Z_0-9]*' || true); do unset "$var"; done

WORK=$(mktemp -d)
MOCK_PID=
stop_mock() {
    if [[ -n "$MOCK_PID" ]]; then
        kill "$MOCK_PID" 2>/dev/null || true
        wait "$MOCK_PID" 2>/dev/null || true
        MOCK_PID=
    fi
}
cleanup() {
    stop_mock
    rm -rf "$WORK"
}
trap cleanup EXIT

# start_mock ARGS...: a fresh mock on MOCK_CORE with one server thread; sets URL.
start_mock() {
    stop_mock
    taskset -c "$MOCK_CORE" "$BIN" mock-server --port 0 --workers 1 --instant "$@" \
        >"$WORK/mock.out" 2>"$WORK/mock.err" &
    MOCK_PID=$!
    URL=
    for _ in $(seq 100); do
        URL=$(head -n1 "$WORK/mock.out" 2>/dev/null | sed -n 's/^listening on //p')
        [[ -n "$URL" ]] && return 0
        sleep 0.1
    done
    echo "error: the mock did not start: $(cat "$WORK/mock.err")" >&2
    exit 1
}

# CPU ticks (user+sys) used so far by a process.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Busy ticks of one core so far (everything but idle and iowait; steal included: time
# the hypervisor gave the core to someone else).
core_busy_ticks() { awk -v c="cpu$1" '$1 == c {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }

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
    taskset -c "$CLIENT_CORE" /usr/bin/time -f '%U %S' -o "$dir/time" \
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

echo "llmsurge client figures (mock on core $MOCK_CORE, client on core $CLIENT_CORE, $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg) at start)"

# 1. Highest sustained streamed rate: throughput profile at a few concurrencies.
start_mock --ttft-ms 0 --itl-ms 0 --output-tokens 16
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
start_mock --ttft-ms 0 --itl-ms 0 --output-tokens 64
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

# 3. Dispatch lag at a constant 1,000 req/s.
start_mock --ttft-ms 0 --itl-ms 0 --output-tokens 16
client lag --profile constant --rate 1000 --max-seconds "$DURATION" --workers 1 \
    --data prompt_tokens=16,output_tokens=16
p50=$(report lag .client.dispatch_lag_p50_ms)
p99=$(report lag .client.dispatch_lag_p99_ms)
late=$(report lag .client.late_requests)
v=$(verdict "$p99 < $TARGET_LAG_P99_MS")
others_busy=$(cat "$WORK/lag/others_busy")
line=$(printf 'dispatch lag at 1,000 req/s: p50 %.3f ms, p99 %.3f ms (%s late; %.0f req/s achieved; other processes took %s of the client core) target p99 < %s ms: %s' \
    "$p50" "$p99" "$late" "$(report lag .throughput.requests_per_s)" "$(pct "$others_busy")" "$TARGET_LAG_P99_MS" "$v")
if [[ $v == MISS ]]; then
    line+=" (the tail is slots handed over while the worker's runtime thread could not run at once: another process held the core, or the runtime was busy with other responses; a core of its own closes it, see docs/performance.md)"
fi
echo "$line"

# 4. Peak RSS of the tree with N streams held open by a slow first token.
# rss_tree PID: VmRSS (KiB) of PID and its children (the workers), summed.
rss_tree() {
    local sum=0 p k v _
    for p in "$1" $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        while read -r k v _; do
            [[ $k == VmRSS: ]] && sum=$((sum + v))
        done 2>/dev/null <"/proc/$p/status" || true
    done
    echo "$sum"
}
start_mock --ttft-ms "$STREAM_TTFT_MS" --itl-ms 0 --output-tokens 16
for n in $STREAMS; do
    dir="$WORK/streams-$n"
    mkdir -p "$dir"
    seconds=$(((STREAM_TTFT_MS * 2 + 1999) / 1000))
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
    if ((n == 1000)); then
        v=$(verdict "$mb < $TARGET_RSS_1000_MB")
        target="target < $TARGET_RSS_1000_MB MB: $v"
    else
        v=PASS
        target="no target"
    fi
    line=$(printf 'peak RSS at %d streams: %.1f MB (whole tree; %s streams open at peak, %s errored) %s' \
        "$n" "$mb" "$open" "$errors" "$target")
    if ((open < n)); then
        line+=" (MISS: only $open of $n streams were open at once; see $dir/stderr)"
    elif [[ $v == MISS ]]; then
        line+=" (memory per open stream above budget: see docs/performance.md)"
    fi
    echo "$line"
done

# 5. Launch to the first request sent (median of LAUNCH_RUNS).
start_mock --ttft-ms 0 --itl-ms 0 --output-tokens 16
times=()
for i in $(seq "$LAUNCH_RUNS"); do
    dir="$WORK/launch-$i"
    mkdir -p "$dir"
    launched=$EPOCHREALTIME
    taskset -c "$CLIENT_CORE" "$BIN" benchmark run --target "$URL" --outputs json --output-dir "$dir" \
        --profile synchronous --max-requests 5 --data prompt_tokens=16,output_tokens=16 \
        >"$dir/stdout" 2>"$dir/stderr"
    first=$(jq -r '.benchmarks[0].measured_window.start_time' "$dir/benchmarks.json")
    times+=("$(echo "$first - $launched" | bc -l)")
done
median=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}')
v=$(verdict "$median <= $TARGET_LAUNCH_S")
line=$(printf 'launch to first request: %.3f s (median of %d) target <= %s s: %s' "$median" "$LAUNCH_RUNS" "$TARGET_LAUNCH_S" "$v")
[[ $v == MISS ]] && line+=" (see the stderr of a run for the startup steps)"
echo "$line"
