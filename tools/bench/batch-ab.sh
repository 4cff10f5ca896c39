#!/usr/bin/env bash
# BenchmarkBatchDecode1B4bit (generate) at two revisions, run by run
# alternated (A B A B ...) so both see the same machine load, e.g. the
# commit before a kernel change and the change:
#
#   tools/bench/batch-ab.sh REV_A REV_B [ROUNDS] [STEPS] [SUBBENCH]
#
# ROUNDS defaults to 3, STEPS (decode steps timed, -test.benchtime) to 40
# and SUBBENCH (the sub-benchmarks, a regexp) to 'serial|rows=8'. Each
# revision's test binary is built once from a temporary worktree; runs use
# GOMAXPROCS=2 and MLXGO_INT8_ACTIVATIONS=${INT8:-1}. Prints the CPU, then
# per run the revision and each sub-benchmark's ms per step and tok/s.
set -euo pipefail
a=$1 b=$2
rounds=${3:-3} steps=${4:-40} sub=${5:-serial|rows=8}
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
cleanup() {
	for rev in a b; do
		git -C "$root" worktree remove --force "$tmp/src-$rev" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
for rev in a b; do
	name=$a
	[[ $rev == b ]] && name=$b
	git -C "$root" worktree add -q --detach "$tmp/src-$rev" "$name"
	(cd "$tmp/src-$rev/generate" && go test -c -o "$tmp/$rev.test" .)
done
grep -m1 'model name' /proc/cpuinfo || true
for r in $(seq "$rounds"); do
	for rev in a b; do
		name=$a
		[[ $rev == b ]] && name=$b
		(cd "$root/generate" && GOMAXPROCS=2 MLXGO_INT8_ACTIVATIONS=${INT8:-1} "$tmp/$rev.test" -test.run '^$' \
			-test.bench "BatchDecode1B4bit/($sub)\$" -test.benchtime "${steps}x") |
			awk -v r="$r" -v n="$name" '/^Benchmark/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") t = $(i-1);
				printf "round %s %s %s: %.2f ms/step, %s tok/s\n", r, n, $1, $3/1e6, t }'
	done
done
