#!/usr/bin/env bash
# Time of a server's first request against its second, for two mlxgo
# binaries run alternately (A B A B ...), e.g. before and after a change
# to what `serve` does while it loads:
#
#   tools/bench/first-request.sh MODEL_DIR BIN_A BIN_B [ROUNDS] [-- SERVE FLAGS]
#
# Each run starts `BIN serve --model MODEL_DIR` on a loopback port with
# GOMAXPROCS=2 and the flags given (e.g. --int8-activations), waits until
# /v1/models answers, sends one 256-token completion with max_tokens 1
# twice (the second hits the prompt cache), prints both times as curl
# measured them and the load's int8 repack line if any, and stops the
# server. Needs curl and python3.
set -euo pipefail
model=$1 a=$2 b=$3
rounds=${4:-2}
shift $(($# < 4 ? $# : 4))
[[ ${1:-} == -- ]] && shift
port=${PORT:-18431}
body=$(python3 -c 'import json,random; r=random.Random(1); print(json.dumps({"prompt":[r.randrange(10,30000) for _ in range(256)],"max_tokens":1}))')
log=$(mktemp)
trap 'rm -f "$log"' EXIT
grep -m1 'model name' /proc/cpuinfo || true
for r in $(seq "$rounds"); do
	for bin in "$a" "$b"; do
		GOMAXPROCS=2 "$bin" serve --model "$model" --port "$port" "$@" >"$log" 2>&1 &
		pid=$!
		until curl -s -o /dev/null "http://127.0.0.1:$port/v1/models"; do
			kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
			sleep 0.2
		done
		t=()
		for _ in 1 2; do
			t+=("$(curl -s -o /dev/null -w '%{time_total}' -H 'content-type: application/json' -d "$body" "http://127.0.0.1:$port/v1/completions")")
		done
		kill "$pid"
		wait "$pid" 2>/dev/null || true
		echo "round $r $bin: first ${t[0]} s, second ${t[1]} s; $(grep -o 'repacked at load.*' "$log" || echo 'no repack at load')"
	done
done
