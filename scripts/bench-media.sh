#!/usr/bin/env bash
# Image chat at scale (a script, not a test): 1,000 requests of 4 generated 1024×1024
# images each, at a constant 100 requests/s, against the mock in its own process. Prints
# the client's peak RSS (the coordinator and its workers together, sampled from /proc
# every 50 ms) and the report's dispatch lag p99, each as a PASS/MISS line against the
# bar of issue 12 (RSS under 200 MB, lag p99 under 1 ms).
# Usage: scripts/bench-media.sh [BINARY] [REQUESTS] [RATE] [SPEC]
# BINARY defaults to target/release/llmsurge (built here if missing: release, as the
# figures are about the client's cost, not a debug build's). MOCK_CPUS / CLIENT_CPUS
# (taskset lists, e.g. 1 and 0) keep the mock's JSON parsing of megabytes of images per
# request off the client's cores: on a small shared machine it otherwise shows up as the
# client's dispatch lag. CLIENT_FLAGS adds flags to the client (e.g. "--workers 2").
set -euo pipefail
bin=${1:-target/release/llmsurge}
n=${2:-1000}
rate=${3:-100}
spec=${4:-prompt_tokens=64,output_tokens=16,images=4,image_size=1024x1024}
if [ ! -x "$bin" ]; then
  cargo build --release --bin llmsurge >&2
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# A quick server (50 ms to the first token, 16 tokens 2 ms apart): the client holds about
# rate × 0.1 s requests in flight.
mock_pin=(); client_pin=()
[ -n "${MOCK_CPUS:-}" ] && mock_pin=(taskset -c "$MOCK_CPUS")
[ -n "${CLIENT_CPUS:-}" ] && client_pin=(taskset -c "$CLIENT_CPUS")
"${mock_pin[@]}" "$bin" mock-server --port "$port" --ttft-ms 50 --ttft-ms-std 0 --ttft-ms-per-prompt-token 0 \
  --itl-ms 2 --itl-ms-std 0 --itl-ms-per-active 0 --output-tokens 16 --output-tokens-std 0 \
  >/dev/null 2>&1 &
mock=$!
dir=$(mktemp -d)
trap 'kill $mock 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
"${client_pin[@]}" "$bin" benchmark run --target "http://127.0.0.1:$port" --request-format chat \
  --profile constant --rate "$rate" --max-requests "$n" --data "$spec" \
  --outputs json --output-dir "$dir" --disable-progress ${CLIENT_FLAGS:-} >"$dir/stdout" 2>"$dir/stderr" &
client=$!
# Peak of the summed RSS of the client and every process below it.
python3 - "$client" >"$dir/rss" <<'PY'
import os, sys, time
root = int(sys.argv[1])
def tree(pid):
    out = [pid]
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                for c in f.read().split():
                    out += tree(int(c))
    except OSError:
        pass
    return out
def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
peak = 0
while os.path.exists(f"/proc/{root}") and open(f"/proc/{root}/stat").read().split(")")[-1].split()[0] != "Z":
    peak = max(peak, sum(rss_kb(p) for p in tree(root)))
    time.sleep(0.05)
print(peak)
PY
rc=0
wait "$client" || rc=$?
if [ ! -f "$dir/benchmarks.json" ]; then
  echo "the run failed (exit $rc):"; tail -5 "$dir/stderr"; exit 1
fi
# A non-zero exit with a report is a verdict (e.g. the client-health check): say it.
[ "$rc" -eq 0 ] || { echo "llmsurge exited $rc:"; grep -iE "warn|error|bottleneck|lag" "$dir/stderr" | tail -3; }
python3 - "$dir/benchmarks.json" "$(cat "$dir/rss")" "$n" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["benchmarks"][0]
rss_mb = int(sys.argv[2]) / 1024
lag = b["client"]["dispatch_lag_p99_ms"]
done = b["requests"]["completed"]
print(f"completed {done}/{sys.argv[3]} at {b['throughput']['requests_per_s']:.1f} req/s, "
      f"{b['throughput'].get('images_per_s', 0):.0f} images/s, dispatch lag p50 "
      f"{b['client']['dispatch_lag_p50_ms']:.3f} ms")
print(f"{'PASS' if rss_mb < 200 else 'MISS'} client peak RSS {rss_mb:.1f} MB (bar: < 200 MB)")
print(f"{'PASS' if lag < 1.0 else 'MISS'} dispatch lag p99 {lag:.3f} ms (bar: < 1 ms)")
PY
