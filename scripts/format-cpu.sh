#!/usr/bin/env bash
# Client CPU per 1,000 streamed requests, per request format, at the same token counts:
# the worker processes' CPU seconds (the report's client.worker_cpu_s) of N requests
# against an instant mock in its own process, so the server's CPU is not counted.
# Usage: scripts/format-cpu.sh [BINARY] [REQUESTS] [REPEATS] [MOCK FLAGS...]
# Without mock flags the mock is instant (a response's events arrive together: the
# parsing cost alone); with e.g. `--ttft-ms 1 --itl-ms 0.5` each event is its own read.
set -euo pipefail
bin=${1:-target/debug/llmsurge}
n=${2:-2000}
repeats=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
mock_flags=("$@")
[ ${#mock_flags[@]} -eq 0 ] && mock_flags=(--instant)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" mock-server "${mock_flags[@]}" --port "$port" --output-tokens 64 --output-tokens-std 0 >/dev/null 2>&1 &
mock=$!
trap 'kill $mock' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
for format in chat responses anthropic; do
  for r in $(seq "$repeats"); do
    dir=$(mktemp -d)
    "$bin" benchmark run --target "http://127.0.0.1:$port" --request-format "$format" \
      --profile concurrent --rate 32 --workers 1 --max-requests "$n" \
      --data prompt_tokens=16,output_tokens=64 --outputs json --output-dir "$dir" \
      --max-dispatch-lag 10s --disable-progress >/dev/null 2>&1
    python3 - "$dir/benchmarks.json" "$format" "$n" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["benchmarks"][0]
n = int(sys.argv[3])
done = b["requests"]["completed"]
cpu = b["client"]["worker_cpu_s"]
print(f"{sys.argv[2]:10s} completed={done} output_tokens={b['metrics']['output_tokens']['successful']['mean']:.0f} worker_cpu_s={cpu:.3f} cpu_per_1000={cpu / done * 1000:.3f}s")
PY
    rm -rf "$dir"
  done
done
