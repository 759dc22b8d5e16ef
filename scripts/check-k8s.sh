#!/usr/bin/env bash
# The manifests of `llmsurge k8s job`, validated offline against the Kubernetes JSON
# schemas: a few option sets are generated and each document checked, strictly (an
# unknown field fails), by kubernetes-validate, which bundles the schemas and needs no
# network and no cluster.
#
# Installs what it needs when missing: PyPI's kubernetes-validate into a virtual
# environment under target/check-k8s (pinned; reused when already there).
set -euo pipefail
cd "$(dirname "$0")/.."

work=target/check-k8s
venv="$work/venv"
VALIDATOR_VERSION=1.37.0
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$VALIDATOR_VERSION"; then
  echo "check-k8s: installing kubernetes-validate==$VALIDATOR_VERSION" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$VALIDATOR_VERSION"
fi

cargo build --quiet --bin llmsurge
bin="${CARGO_TARGET_DIR:-target}/debug/llmsurge"

out="$work/manifests"
rm -rf "$out"
mkdir -p "$out"
now=1800000000

# Defaults: two shards, a claim created by the manifest, no resources.
"$bin" k8s job --image llmsurge:dev --now "$now" -- --target http://vllm:8000 \
  --profile constant --rate 50 --max-seconds 60 >"$out/defaults.yaml"
# Everything: namespace, resources, an existing claim, Secrets for the key, a gateway
# header and the CA bundle, a query value shown, many flags.
"$bin" k8s job --name bench-a --image registry.example/llmsurge:0.1 --shards 8 \
  --namespace load-test --cpu 2 --memory 4Gi --results-pvc shared-results \
  --api-key-secret llm-key:token --header-secret llm-headers --ca-secret gateway-ca --start-delay 10m \
  --merge-timeout 2h --now "$now" -- \
  --target 'https://llm.example/openai?api-version=2024-10-21' --show-query-param api-version \
  --model m --profile poisson --rate 100,200 \
  --max-seconds 300 --data prompt_tokens=256,output_tokens=128 --outputs json,html \
  --stream false --http2 \
  --backend-kwargs '{"extra_body": {"temperature": 0}, "headers": {"X-Gateway-Key": "k", "Accept": "text/event-stream"}}' \
  >"$out/full.yaml"
# One shard, no run flags at all.
"$bin" k8s job --name single --image llmsurge:dev --shards 1 --now "$now" >"$out/single.yaml"

for f in "$out"/*.yaml; do
  # --strict: a misspelt or misplaced field is an error, not ignored.
  if ! "$venv/bin/kubernetes-validate" --strict --quiet "$f"; then
    echo "check-k8s: $f does not validate" >&2
    exit 1
  fi
done
# The validator must fail a broken manifest, or the checks above prove nothing.
sed 's/completionMode:/completionMod:/' "$out/defaults.yaml" >"$work/broken.yaml"
if "$venv/bin/kubernetes-validate" --strict --quiet "$work/broken.yaml" >/dev/null 2>&1; then
  echo "check-k8s: the validator accepted a misspelt field" >&2
  exit 1
fi
echo "check-k8s: passed ($(ls "$out"/*.yaml | wc -l) manifests)"
