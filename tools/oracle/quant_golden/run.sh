#!/bin/sh
# Regenerates tensor/testdata/quant_golden.json from the installed MLX
# (libmlx + libmlxc, CPU build of v0.31.2 under /usr/local).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O1 -std=c11 -Wall -o "$tmp/quant_golden" "$here/quant_golden.c" \
	-I/usr/local/include -L/usr/local/lib -lmlxc -lmlx -lm -Wl,-rpath,/usr/local/lib
mkdir -p "$root/tensor/testdata"
"$tmp/quant_golden" >"$tmp/out.json"
mv "$tmp/out.json" "$root/tensor/testdata/quant_golden.json"
ls -l "$root/tensor/testdata/quant_golden.json"
