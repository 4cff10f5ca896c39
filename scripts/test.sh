#!/usr/bin/env bash
# Runs every check CI runs: go vet and go test over each module of the
# workspace, then a short fuzz pass on the parsers that read untrusted bytes.
# Usage: scripts/test.sh            (everything)
#        FUZZTIME=0 scripts/test.sh (skip the fuzz pass)
set -euo pipefail
cd "$(dirname "$0")/.."

mods=$(go work edit -json | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p')
fail=0
for m in $mods; do
	echo "== $m"
	(cd "$m" && go vet ./... && go test -count=1 -timeout 30m ./...) || fail=1
done

fuzztime=${FUZZTIME:-20s}
if [ "$fuzztime" != "0" ]; then
	# Each fuzz target gets a short run; a crash fails the build.
	while read -r dir target; do
		echo "== fuzz $dir $target ($fuzztime)"
		(cd "$dir" && go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" .) || fail=1
	done < <(grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
		grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //' | while read -r t; do echo "$(dirname "$f") $t"; done
	done)
fi

if [ $fail -ne 0 ]; then
	echo "FAIL"
	exit 1
fi
echo "PASS"
