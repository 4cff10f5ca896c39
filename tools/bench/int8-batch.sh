#!/usr/bin/env bash
# Batched decode and served concurrency on the random 1B-shaped 4-bit
# Llama, float activations against int8 activations (tensor/cpu), run by
# run alternated (float, int8, float, int8, ...) so both see the same
# machine load:
#
#   tools/bench/int8-batch.sh [ROUNDS]        (default 3)
#
# Per round and mode it runs BenchmarkBatchDecode1B4bit (serial, 1 row and
# 8 rows through a Batch, 40 steps each) and BenchmarkServeConcurrency1B4bit
# (1 stream against 8 concurrent streams, TTFT idle against under load),
# with GOMAXPROCS=2, and prints each run's figures; the test binaries are
# built once into a temporary folder.
set -euo pipefail
rounds=${1:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$root/generate" && go test -c -o "$bin/generate.test" .)
(cd "$root/serve" && go test -c -o "$bin/serve.test" .)
grep -m1 'model name' /proc/cpuinfo || true
for r in $(seq "$rounds"); do
	for int8 in 0 1; do
		echo "== round $r int8=$int8"
		(cd "$root/generate" && GOMAXPROCS=2 MLXGO_INT8_ACTIVATIONS=$int8 "$bin/generate.test" -test.run '^$' \
			-test.bench 'BatchDecode1B4bit/(serial|rows=1|rows=8)$' -test.benchtime 40x | grep 'tok/s')
		(cd "$root/serve" && GOMAXPROCS=2 MLXGO_INT8_ACTIVATIONS=$int8 "$bin/serve.test" -test.run '^$' \
			-test.bench 'ServeConcurrency1B4bit$' -test.benchtime 1x | grep 'tok/s')
	done
done
