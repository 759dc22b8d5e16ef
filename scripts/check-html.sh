#!/usr/bin/env bash
# The HTML report, checked in a real browser: build llmsurge, run a 5-benchmark profile
# against the built-in mock, render the report, open it in headless Chromium, and fail
# on any console error, page error or network request, or on any chart not drawn.
# A second, single-benchmark report without streaming (no inter-token latency) must
# render too, with "no data" notes in place of the charts it cannot draw. A report that
# carries the server's metrics (a checked-in fixture) must draw the server's charts.
# A run against the zero-latency mock (tiny ITL and TPOT) checks that no axis repeats
# a tick label; every report is checked for that too.
#
# Installs what it needs when missing: Debian's chromium (apt-get) and playwright-core
# (npm, into target/check-html; it drives the system Chromium and downloads no browser).
# Screenshots are left in target/check-html/ for a person to look at.
set -euo pipefail
cd "$(dirname "$0")/.."

work=target/check-html
mkdir -p "$work"

if ! command -v chromium >/dev/null 2>&1; then
  echo "check-html: installing chromium" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
export CHROMIUM
CHROMIUM="$(command -v chromium)"

PLAYWRIGHT_VERSION=1.65.1
if [ ! -f "$work/node_modules/playwright-core/package.json" ] ||
  ! grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$work/node_modules/playwright-core/package.json"; then
  echo "check-html: installing playwright-core@$PLAYWRIGHT_VERSION" >&2
  npm install --silent --no-audit --no-fund --no-save --prefix "$work" "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null
fi
export PLAYWRIGHT_CORE
PLAYWRIGHT_CORE="$(pwd)/$work/node_modules/playwright-core"

cargo build --quiet --bin llmsurge
bin="${CARGO_TARGET_DIR:-target}/debug/llmsurge"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# The default mock streams like a small model (jittered TTFT and gaps); these pin its
# base TTFT at 30 ms and gaps at 4 ms.
export LLMSURGE_MOCK_TTFT_MS=30 LLMSURGE_MOCK_ITL_MS=4 LLMSURGE_MOCK_OUTPUT_TOKENS=24
# A sweep of five benchmarks (synchronous, throughput, three constant rates between),
# with SLO verdicts and goodput, as a user would run it (a p50: a 3 s synchronous benchmark
# has too few requests to decide a p99, which would be INCONCLUSIVE).
"$bin" benchmark run --target mock --profile sweep --rate 5 --max-concurrency 16 \
  --max-seconds 3 --data prompt_tokens=64,output_tokens=24 \
  --slo 'ttft_p50<=500ms,error_rate<=5%' --goodput 'ttft:200ms' --slice 1s \
  --outputs json,html --output-dir "$out/sweep" --max-dispatch-lag 10s \
  --output-extras '{"check": "check-html.sh"}' --disable-progress
node -e 'const n = require(process.argv[1]).benchmarks.length;
  if (n < 5) { console.error(`check-html: the sweep report has ${n} benchmarks, expected 5`); process.exit(1); }' \
  "$out/sweep/benchmarks.json"
# The same report rendered again from its JSON.
"$bin" benchmark from-file "$out/sweep/benchmarks.json" --outputs rerendered.html \
  --output-dir "$out/sweep"
# Missing metrics: without streaming there are no inter-token gaps.
"$bin" benchmark run --target mock --profile synchronous --max-requests 5 \
  --stream false --outputs html --output-dir "$out/nostream" --max-dispatch-lag 10s \
  --disable-progress

# Tiny values (issue 15): against the zero-latency mock, 1,024 tokens arrive in a few
# socket reads, so TPOT is about a microsecond per token (0.001 ms; with 16 tokens it
# would be exactly 0), and its axis must still show distinct tick labels. The latency
# variables above would win over LLMSURGE_MOCK_INSTANT, so they are dropped here.
env -u LLMSURGE_MOCK_TTFT_MS -u LLMSURGE_MOCK_ITL_MS -u LLMSURGE_MOCK_OUTPUT_TOKENS \
  LLMSURGE_MOCK_INSTANT=1 "$bin" benchmark run --target mock --profile constant --rate 20 \
  --max-seconds 3 --data prompt_tokens=64,output_tokens=1024 --outputs json,html \
  --output-dir "$out/instant" --max-dispatch-lag 10s --disable-progress
node -e 'const p = require(process.argv[1]).benchmarks[0].metrics.tpot.successful.percentiles;
  if (!(p.p50 < 0.1 && p.p99_9 > 0)) {
    console.error(`check-html: the instant run has TPOT p50 ${p.p50} ms, p99.9 ${p.p99_9} ms; expected tiny, not all 0`);
    process.exit(1);
  }' "$out/instant/benchmarks.json"

# A LoRA traffic split (issue 11): the per-model table beside every chart.
"$bin" benchmark run --target mock --lora "sql=0.6,chat=0.4" --profile constant --rate 10,20 \
  --max-seconds 3 --data prompt_tokens=64,output_tokens=24 --outputs json,html \
  --output-dir "$out/lora" --max-dispatch-lag 10s --disable-progress
grep -q '<h2>Per model</h2>' "$out/lora/benchmarks.html"

# The server's own metrics (issue 13): the checked-in report that carries them, rendered
# by this build (two benchmarks with every figure, a failed scrape, a disagreeing
# cross-check).
"$bin" benchmark from-file tests/fixtures/report-server-metrics.json --outputs server.html \
  --output-dir "$out/server"

# Latency vs load (3, the knee marked where there is one), throughput (1), the Pareto
# front (1: two benchmarks or more with TPOT), distributions (4), the request timeline
# and the load under it (2), over the run (3), and in the sweep (--slice) the time
# slices (5: TTFT, ITL, TPOT, e2e, rates); the
# server's charts (queue beside client concurrency, KV-cache use, generation tokens/s)
# when the run scraped the target's /metrics, all of which must be drawn.
node scripts/check-html.cjs "$out/sweep/benchmarks.html" 19:3 "$work/sweep.png"
node scripts/check-html.cjs "$out/sweep/rerendered.html" 19:3
# Without streaming ITL and TPOT are absent (not 0), so their charts (ITL against load,
# the ITL and TPOT distributions) are left out, and without TPOT there is no Pareto
# front: 10 of the 14.
node scripts/check-html.cjs "$out/nostream/benchmarks.html" 10:3 "$work/nostream.png"
# Tiny values (one benchmark: no Pareto front): 13 client charts (the timeline and its load among them) (the server's ones depend on how many scrapes 3 s allow).
node scripts/check-html.cjs "$out/instant/benchmarks.html" 13 "$work/instant.png"
# The LoRA split (two rates, so a Pareto front): its 14 client charts (the server's
# depend on the scrapes).
node scripts/check-html.cjs "$out/lora/benchmarks.html" 14 "$work/lora.png"
# The fixture (two benchmarks, so a Pareto front): its 13 client charts (a timeline of none: it predates them; the load under it is drawn) and exactly the
# 3 server charts, drawn.
node scripts/check-html.cjs "$out/server/server.html" 13:3 "$work/server.png"
# `plot pareto`'s page alone: the report page's script drawing one chart, its points marked.
"$bin" plot pareto "$out/sweep/benchmarks.json" --outputs html --output-dir "$out/pareto"
node scripts/check-html.cjs "$out/pareto/pareto-front.html" 1 "$work/pareto.png"
# Runs side by side (issue 25 §6): `benchmark compare --outputs html` of the LoRA run and
# another of the same rates, each figure with its verdicts (the gate may fail: exit 3),
# and `plot runs` of three reports: latency vs load (3), throughput (1), distributions
# (4) and the Pareto fronts (1).
"$bin" benchmark run --target mock --profile constant --rate 10,20 --max-seconds 3 \
  --data prompt_tokens=64,output_tokens=24 --label tuned --outputs json \
  --output-dir "$out/tuned" --max-dispatch-lag 10s --disable-progress
rc=0
"$bin" benchmark compare "$out/lora/benchmarks.json" "$out/tuned/benchmarks.json" \
  --outputs html --output-dir "$out/compare" >/dev/null || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || { echo "check-html: benchmark compare exited $rc" >&2; exit 1; }
node scripts/check-html.cjs "$out/compare/compare.html" 9 "$work/compare.png"
"$bin" plot runs "$out/sweep/benchmarks.json" "$out/lora/benchmarks.json" \
  "$out/tuned/benchmarks.json" --outputs html --output-dir "$out/runs"
node scripts/check-html.cjs "$out/runs/runs.html" 9 "$work/runs.png"
# GPU telemetry (issue 23): a fake nvidia-smi first on PATH; one benchmark's 13 client
# charts (the timeline and its load among them) and the GPUs' two (power; utilisation
# beside memory), drawn.
mkdir -p "$out/gpu/bin"
printf '#!/bin/sh\nprintf "0, 300.00, 50, 1000\\n1, 280.00, 70, 3000\\n"\n' >"$out/gpu/bin/nvidia-smi"
chmod +x "$out/gpu/bin/nvidia-smi"
PATH="$out/gpu/bin:$PATH" "$bin" benchmark run --target mock --profile constant --rate 10 \
  --max-seconds 3 --data prompt_tokens=64,output_tokens=24 --gpu-metrics nvidia-smi \
  --server-metrics-interval 200ms --outputs json,html --output-dir "$out/gpu" \
  --max-dispatch-lag 10s --disable-progress
node scripts/check-html.cjs "$out/gpu/benchmarks.html" 15 "$work/gpu.png"
echo "check-html: passed"
