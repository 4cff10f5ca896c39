#!/usr/bin/env bash
# mlxgo against llama.cpp on the same machine and the same weights.
#
#   LLAMACPP_BIN=/path/to/llama.cpp/build/bin tools/llamacpp/compare.sh [bench|serve|profile|all]
#
# LLAMACPP_BIN is a folder holding an already-built llama.cpp (llama-bench,
# llama-quantize, llama-server); this script never builds or fetches it and
# skips when it is absent. It writes, under WORK:
#   llama1b/            a random 1B-shaped F16 Llama (tools/gguf random-llama)
#   f16.gguf            the same weights as GGUF (tools/gguf convert)
#   q4_0.gguf q8_0.gguf llama-quantize --pure from f16.gguf
#   mlx4/ mlx8/         mlxgo convert -q (affine, group 64) from llama1b/, the
#                       unquantized tensors (and so the activations) in MLX_DTYPE
# then runs, alternating llama.cpp and mlxgo run by run (A B A B):
#   bench:   prefill (pp$PP at depth 0) and decode (tg$TG at depth $PP) per
#            quantization and thread count, peak RSS from /usr/bin/time -v
#   serve:   llama-server --parallel 8 against mlxgo serve --batch 8, driven by
#            tools/loadclient (idle TTFT, then 8 concurrent streams)
#   profile: perf record of one decode run of each (when perf is installed)
# and prints medians and ranges. Environment knobs (defaults in brackets):
#   WORK [/tmp/mlxgo-vs-llamacpp]  ROUNDS [3]  THREADS ["2"]  QUANTS ["4 8"]
#   PP [512]  TG [128]  SERVE_ROUNDS [2]  SERVE_PROMPT [256]  SERVE_TOKENS [128]
#   SERVE_REQUESTS [16]  CONCURRENCY [8]  PIN (e.g. "taskset -c 0,1")
#   MLX_DTYPE [bfloat16]: float16 runs mlxgo's activations in f16, a slower path
#   TIME_BIN [/usr/bin/time]: GNU time, for peak RSS
#   LLAMACPP_COMMIT: the llama.cpp commit the binaries were built from, printed
#   MLXGO_BINS: a folder with prebuilt mlxgo, gguf and loadclient (for a host
#   without Go); otherwise they are built from this checkout.
#   MLXGO_INT8_ACTIVATIONS=1: mlxgo runs with int8 activations (as
#   --int8-activations), the counterpart of llama.cpp's Q8 activations.
# tools/llamacpp/debian-bins.sh prepares LLAMACPP_BIN from Debian's build;
# tools/llamacpp/ollama-src.sh builds one from the llama.cpp source ollama
# vendors (no llama-server there: bench and profile only).
set -euo pipefail

mode=${1:-all}
if [[ -z "${LLAMACPP_BIN:-}" ]]; then
	echo "SKIP: LLAMACPP_BIN is not set (a folder with llama-bench, llama-quantize and llama-server built from llama.cpp's source)"
	exit 0
fi
need="llama-bench llama-quantize"
[[ $mode == serve || $mode == all ]] && need="$need llama-server"
for b in $need; do
	if [[ ! -x "$LLAMACPP_BIN/$b" ]]; then
		echo "SKIP: $LLAMACPP_BIN/$b is missing"
		exit 0
	fi
done
TIME_BIN=${TIME_BIN:-/usr/bin/time}
if [[ ! -x $TIME_BIN ]]; then
	echo "SKIP: $TIME_BIN (GNU time, for peak RSS) is not installed; set TIME_BIN"
	exit 0
fi

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
WORK=${WORK:-/tmp/mlxgo-vs-llamacpp}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
QUANTS=${QUANTS:-"4 8"}
PP=${PP:-512}
TG=${TG:-128}
SERVE_ROUNDS=${SERVE_ROUNDS:-2}
SERVE_PROMPT=${SERVE_PROMPT:-256}
SERVE_TOKENS=${SERVE_TOKENS:-128}
SERVE_REQUESTS=${SERVE_REQUESTS:-16}
CONCURRENCY=${CONCURRENCY:-8}
PIN=${PIN:-}
MLX_DTYPE=${MLX_DTYPE:-bfloat16}
stamp=$(date -u +%Y%m%dT%H%M%S)
logs=$WORK/log/$stamp # one folder per run, so a later run keeps an earlier one's logs
mkdir -p "$WORK/bin" "$logs"
results=$WORK/results-$stamp.tsv

if [[ -n "${MLXGO_BINS:-}" ]]; then
	bins=$MLXGO_BINS
else
	bins=$WORK/bin
	(cd "$root/cli" && go build -o "$bins/mlxgo" .)
	(cd "$root/tools" && go build -o "$bins/gguf" ./gguf && go build -o "$bins/loadclient" ./loadclient)
fi

echo "== machine"
date -u
uname -srm
grep -m1 'model name' /proc/cpuinfo || true
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx_vnni|avx512[a-z_0-9]*|amx[a-z_0-9]*)$' | sort | tr '\n' ' ')"
echo "cpus: $(nproc), pin: ${PIN:-none}"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "mlxgo: $("$bins/mlxgo" version 2>/dev/null | head -1 || echo '?')"
echo "mlxgo int8 activations: ${MLXGO_INT8_ACTIVATIONS:-0}"
echo "llama.cpp: ${LLAMACPP_COMMIT:-commit not given (set LLAMACPP_COMMIT)} in $LLAMACPP_BIN"

echo "== models (in $WORK)"
[[ -f $WORK/llama1b/model.safetensors ]] || "$bins/gguf" random-llama -out "$WORK/llama1b"
[[ -f $WORK/f16.gguf ]] || "$bins/gguf" convert -in "$WORK/llama1b" -out "$WORK/f16.gguf"
for q in $QUANTS; do
	[[ -f $WORK/q${q}_0.gguf ]] || "$LLAMACPP_BIN/llama-quantize" --pure "$WORK/f16.gguf" "$WORK/q${q}_0.gguf" "Q${q}_0" >"$logs/quantize$q.log" 2>&1
	[[ -f $WORK/mlx$q/model.safetensors ]] || "$bins/mlxgo" convert --hf-path "$WORK/llama1b" --mlx-path "$WORK/mlx$q" -q --q-bits "$q" --q-group-size 64 --dtype "$MLX_DTYPE" >/dev/null
	"$bins/gguf" info "$WORK/q${q}_0.gguf" | tail -1 | sed "s/^ */llama.cpp Q${q}_0: /"
	echo "mlxgo ${q}-bit g64: $(du -b "$WORK/mlx$q/model.safetensors" | cut -f1) bytes"
done

# peak_kb FILE: the peak RSS /usr/bin/time -v wrote to FILE, in KiB.
peak_kb() { awk -F: '/Maximum resident/ {gsub(/ /, "", $2); print $2}' "$1"; }

# record ENGINE QUANT THREADS METRIC VALUE
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"; }

llama_bench_run() { # QUANT THREADS ROUND
	local q=$1 t=$2 r=$3 log=$logs/llama-q$1-t$2-r$3
	$PIN "$TIME_BIN" -v -o "$log.pp.time" "$LLAMACPP_BIN/llama-bench" -m "$WORK/q${q}_0.gguf" -t "$t" -p "$PP" -n 0 -r 1 -o jsonl >"$log.pp.json" 2>"$log.pp.err"
	$PIN "$TIME_BIN" -v -o "$log.tg.time" "$LLAMACPP_BIN/llama-bench" -m "$WORK/q${q}_0.gguf" -t "$t" -p 0 -n "$TG" -d "$PP" -r 1 -o jsonl >"$log.tg.json" 2>"$log.tg.err"
	record llama.cpp "$q" "$t" prefill_tps "$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["avg_ts"])' "$log.pp.json")"
	record llama.cpp "$q" "$t" decode_tps "$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["avg_ts"])' "$log.tg.json")"
	record llama.cpp "$q" "$t" peak_rss_mb "$(($(peak_kb "$log.tg.time") > $(peak_kb "$log.pp.time") ? $(peak_kb "$log.tg.time") / 1024 : $(peak_kb "$log.pp.time") / 1024))"
}

mlxgo_bench_run() { # QUANT THREADS ROUND
	local q=$1 t=$2 r=$3 log=$logs/mlxgo-q$1-t$2-r$3
	GOMAXPROCS=$t $PIN "$TIME_BIN" -v -o "$log.time" "$bins/mlxgo" bench --model "$WORK/mlx$q" -p "$PP" -g "$TG" -n 1 --json >"$log.json" 2>"$log.err"
	record mlxgo "$q" "$t" prefill_tps "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["trials"][0]["prompt_tps"])' "$log.json")"
	record mlxgo "$q" "$t" decode_tps "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["trials"][0]["generation_tps"])' "$log.json")"
	record mlxgo "$q" "$t" peak_rss_mb "$(($(peak_kb "$log.time") / 1024))"
}

wait_ready() { # URL PID: until URL answers 200 or the server exits (at most 300 s)
	for _ in $(seq 600); do
		if ! kill -0 "$2" 2>/dev/null; then return 1; fi
		if [[ $(curl -s -o /dev/null -w '%{http_code}' "$1" 2>/dev/null || true) == 200 ]]; then return 0; fi
		sleep 0.5
	done
	return 1
}

serve_run() { # ENGINE ROUND
	local e=$1 r=$2 port=$((18080 + RANDOM % 1000)) log=$logs/serve-$1-r$2 pid
	if [[ $e == llama.cpp ]]; then
		$PIN "$TIME_BIN" -v -o "$log.time" "$LLAMACPP_BIN/llama-server" -m "$WORK/q4_0.gguf" -t 2 -tb 2 --parallel "$CONCURRENCY" \
			-c $((CONCURRENCY * (SERVE_PROMPT + SERVE_TOKENS + 64))) --host 127.0.0.1 --port "$port" >"$log.err" 2>&1 &
	else
		GOMAXPROCS=2 $PIN "$TIME_BIN" -v -o "$log.time" "$bins/mlxgo" serve --model "$WORK/mlx4" --batch "$CONCURRENCY" \
			--host 127.0.0.1 --port "$port" >"$log.err" 2>&1 &
	fi
	pid=$!
	if ! wait_ready "http://127.0.0.1:$port/health" "$pid"; then
		echo "$e server did not come up; see $log.err"
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		return 1
	fi
	"$bins/loadclient" -url "http://127.0.0.1:$port" -concurrency "$CONCURRENCY" -requests "$SERVE_REQUESTS" -idle 3 \
		-prompt-tokens "$SERVE_PROMPT" -max-tokens "$SERVE_TOKENS" -seed "$r" -timeout 15m >"$log.json" || true
	# $pid is /usr/bin/time; the server is its only child.
	kill -TERM $(pgrep -P "$pid") 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	python3 - "$log.json" "$e" >>"$results" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); e = sys.argv[2]
for ph in ("idle", "load"):
    p = d[ph]
    for k in ("ttft_p50_s", "aggregate_tps", "stream_decode_tps_p50", "errors"):
        print(f"{e}\tserve4\t2\t{ph}_{k}\t{p[k]}")
EOF
	record "$e" serve4 2 peak_rss_mb "$(($(peak_kb "$log.time") / 1024))"
}

summary() {
	python3 - "$results" <<'EOF'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    e, q, t, m, v = line.rstrip("\n").split("\t")
    rows[(q, t, m, e)].append(float(v))
keys = sorted({k[:3] for k in rows})
print(f"{'quant':7} {'thr':>3} {'metric':28} {'llama.cpp median [range]':>28} {'mlxgo median [range]':>28} {'mlxgo/llama':>11}")
for q, t, m in keys:
    cells, med = [], {}
    for e in ("llama.cpp", "mlxgo"):
        v = rows.get((q, t, m, e), [])
        if v:
            med[e] = statistics.median(v)
            cells.append(f"{med[e]:.3g} [{min(v):.3g}–{max(v):.3g}] n={len(v)}")
        else:
            cells.append("-")
    ratio = f"{med['mlxgo'] / med['llama.cpp']:.2f}" if len(med) == 2 and med["llama.cpp"] else "-"
    print(f"{q:7} {t:>3} {m:28} {cells[0]:>28} {cells[1]:>28} {ratio:>11}")
EOF
}

profile() {
	if ! command -v perf >/dev/null; then
		echo "profile: perf is not installed; skipped"
		return 0
	fi
	local p=$logs/perf
	$PIN perf record -e cpu-clock -F 999 -o "$p-llama.data" -- "$LLAMACPP_BIN/llama-bench" -m "$WORK/q4_0.gguf" -t 2 -p 0 -n "$TG" -d "$PP" -r 1 >/dev/null 2>&1
	GOMAXPROCS=2 $PIN perf record -e cpu-clock -F 999 -o "$p-mlxgo.data" -- "$bins/mlxgo" bench --model "$WORK/mlx4" -p "$PP" -g "$TG" -n 1 >/dev/null 2>&1
	for e in llama mlxgo; do
		echo "-- $e: top symbols (whole run: prefill $PP, then decode $TG; 2 threads, 4-bit)"
		perf report -i "$p-$e.data" --no-children --sort sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -15
	done
}

if [[ $mode == bench || $mode == all ]]; then
	echo "== bench: $ROUNDS rounds, threads {$THREADS}, quants {$QUANTS}, pp$PP, tg$TG at depth $PP"
	for r in $(seq "$ROUNDS"); do
		for q in $QUANTS; do
			for t in $THREADS; do
				llama_bench_run "$q" "$t" "$r"
				mlxgo_bench_run "$q" "$t" "$r"
			done
		done
		echo "round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)"
	done
fi
if [[ $mode == serve || $mode == all ]]; then
	echo "== serve: $SERVE_ROUNDS rounds, 4-bit, $CONCURRENCY streams, prompt $SERVE_PROMPT, $SERVE_TOKENS tokens, $SERVE_REQUESTS requests"
	for r in $(seq "$SERVE_ROUNDS"); do
		serve_run llama.cpp "$r" || true
		serve_run mlxgo "$r" || true
		echo "round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)"
	done
fi
if [[ -f $results ]]; then
	echo "== results ($results; load now $(cut -d' ' -f1-3 /proc/loadavg))"
	summary
fi
if [[ $mode == profile || $mode == all ]]; then
	echo "== profile"
	profile
fi
