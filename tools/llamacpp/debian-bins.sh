#!/usr/bin/env bash
# Prepares a LLAMACPP_BIN folder for compare.sh from Debian's own build of
# llama.cpp (the llama.cpp-tools package of a newer Debian suite: built by
# Debian from llama.cpp's public source, with ggml's CPU backend compiled once
# per x86 generation and the best one for this CPU chosen when it starts):
#
#   tools/llamacpp/debian-bins.sh DIR [SUITE]        (SUITE: sid by default)
#   LLAMACPP_BIN=DIR/bin tools/llamacpp/compare.sh ...
#
# The packages need a newer C library than an older host has, so they and the
# runtime libraries they link (libc6, libstdc++6, libgomp1, libssl3t64, ...)
# are unpacked under DIR/root, never installed. Each tool gets its ELF
# interpreter pointed there (patchelf) and a wrapper DIR/bin/NAME, which
# compare.sh runs, that sets the library path to the unpacked libraries. ggml looks for its CPU backends in the
# folder compiled into it; when that folder does not exist on this host, it
# becomes a link to the unpacked one (this needs write access there, usually
# root). The archive used is the first one this host's apt sources name;
# DIR/VERSION holds the package version, for compare.sh's LLAMACPP_COMMIT.
# Nothing is built and nothing of it goes into the repository.
set -euo pipefail
dir=${1:?usage: debian-bins.sh DIR [SUITE]}
suite=${2:-sid}
for t in apt-get dpkg-deb patchelf; do
	command -v "$t" >/dev/null || { echo "debian-bins: $t is not installed (apt-get install $t)" >&2; exit 1; }
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[[ -n $uri ]] || uri=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list 2>/dev/null || true)
[[ -n $uri ]] || { echo "debian-bins: no archive found in this host's apt sources" >&2; exit 1; }

apt=$dir/apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$dir/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $suite main" >"$apt/sources.list"
opts=(-q -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Debug::NoLocking=1)
apt-get "${opts[@]}" update >"$apt/update.log"
pkgs="llama.cpp-tools libllama0 libggml0 libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64 zlib1g libzstd1"
(cd "$dir/debs" && rm -f ./*.deb && apt-get "${opts[@]}" download $pkgs >/dev/null)
rm -rf "$dir/root"
for d in "$dir"/debs/*.deb; do dpkg-deb -x "$d" "$dir/root"; done

root=$dir/root
lib=$root/usr/lib/x86_64-linux-gnu
interp=$(find "$root" -name 'ld-linux-x86-64.so.2' -path '*lib64*' | head -1)
[[ -n $interp ]] || { echo "debian-bins: no ELF interpreter in the unpacked libc6" >&2; exit 1; }
mkdir -p "$dir/bin" "$dir/real"
for b in llama-bench llama-quantize llama-server; do
	cp "$root/usr/bin/$b" "$dir/real/$b"
	patchelf --set-interpreter "$interp" "$dir/real/$b"
	printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$lib/llama:$lib" "$dir/real/$b" >"$dir/bin/$b"
	chmod +x "$dir/bin/$b"
done

backends=$(cd "$root" && find . -type d -path '*ggml/backends*' | head -1)
if [[ -n $backends ]]; then
	host=${backends#.}
	if [[ -L $host && $(readlink "$host") == "$root$host" ]]; then
		:
	elif [[ -e $host ]]; then
		echo "debian-bins: $host exists and is not a link to $root$host; ggml will load the backends there" >&2
	else
		mkdir -p "$(dirname "$host")"
		ln -s "$root$host" "$host"
	fi
fi
version=$(dpkg-deb -f "$dir"/debs/llama.cpp-tools_*.deb Version)
echo "$version" >"$dir/VERSION"
echo "llama.cpp $version (Debian $suite) in $dir/bin"
"$dir/bin/llama-bench" --list-devices 2>&1 | grep -m1 'loaded CPU backend' || true
