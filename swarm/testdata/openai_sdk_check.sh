#!/usr/bin/env bash
# Runs the official OpenAI Node SDK against a swarm server started here.
# Idempotent: fetches openai@5.23.2 with `npm pack` into $DATA (default
# out/npm), verifies its sha256, starts `troupe swarm serve`, runs the check.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${DATA:-out/npm}
VER=5.23.2
SHA=a2aa74ff8be1a80a215af201a3d2228e999464d166c1eaec2c9ca313395fbef1
mkdir -p "$DATA"
if [ ! -f "$DATA/node_modules/openai/package.json" ]; then
  (cd "$DATA" && [ -f openai-$VER.tgz ] || npm pack --silent openai@$VER >/dev/null)
  echo "$SHA  $DATA/openai-$VER.tgz" | sha256sum -c - >/dev/null
  mkdir -p "$DATA/node_modules/openai"
  tar xzf "$DATA/openai-$VER.tgz" -C "$DATA/node_modules/openai" --strip-components=1
fi
PORT=${PORT:-18086}
go build -o out/troupe ./cmd/troupe
out/troupe swarm serve --model small --port "$PORT" --autostart 2>out/swarm-sdk.log &
PID=$!
trap 'kill $PID 2>/dev/null' EXIT
for i in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
OPENAI_SDK_VERSION=$VER NODE_PATH="$(cd "$DATA" && pwd)/node_modules" node swarm/testdata/openai_sdk_check.mjs "http://127.0.0.1:$PORT"
