#!/bin/sh
# Builds the MLX fused-layer oracle against the installed mlx-c (CPU build
# of MLX v0.31.2) and regenerates tensor/testdata/fused_golden.json.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O1 -o "$tmp/fused_golden" "$here/main.c" -I/usr/local/include -L/usr/local/lib -lmlxc -lmlx -Wl,-rpath,/usr/local/lib
mkdir -p "$root/tensor/testdata"
"$tmp/fused_golden" > "$root/tensor/testdata/fused_golden.json"
echo "wrote $root/tensor/testdata/fused_golden.json"
