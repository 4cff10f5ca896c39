#!/usr/bin/env bash
# Builds llama.cpp from public source for compare.sh where llama.cpp's own
# repository cannot be fetched: the copy ollama vendors (its Go module,
# from the Go module proxy, read from the module cache; llama.cpp's library
# sources at the commit ollama names, with ollama's patches applied, under
# llama/llama.cpp and ml/backend/ggml/ggml). That copy ships the library
# without llama.cpp's tools, so llbench.cpp and llquant.cpp (ours, next to
# this script) stand in for llama-bench and llama-quantize; there is no
# llama-server (compare.sh serve needs one).
#
#   tools/llamacpp/ollama-src.sh DIR [OLLAMA_VERSION]     (v0.17.4 by default)
#   LLAMACPP_BIN=DIR/bin LLAMACPP_COMMIT="$(cat DIR/VERSION)" tools/llamacpp/compare.sh bench
#
# Everything is built under DIR (CPU only, Release, static, OpenMP, ggml's
# GGML_NATIVE tuning for this CPU, llamafile sgemm and the run-time weight
# repacking (GGML_CPU_REPACK) on: the defaults of llama.cpp's own build,
# which this script cannot use, since the copy lacks ggml's top-level
# CMakeLists); nothing goes into the repository.
# Needs go, cmake, a C++17 compiler.
set -euo pipefail
dir=${1:?usage: ollama-src.sh DIR [OLLAMA_VERSION]}
ver=${2:-v0.17.4}
here=$(cd "$(dirname "$0")" && pwd)
for t in go cmake c++; do
	command -v "$t" >/dev/null || { echo "ollama-src: $t is not installed" >&2; exit 1; }
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
src=$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "github.com/ollama/ollama@$ver" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
commit=$(sed -n 's/^FETCH_HEAD=//p' "$src/Makefile.sync")
echo "llama.cpp $commit as vendored by ollama $ver (ollama's patches applied)" >"$dir/VERSION"
cat >"$dir/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.21)
project(llcpp C CXX)
set(CMAKE_BUILD_TYPE Release)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(BUILD_SHARED_LIBS OFF)
find_package(Threads REQUIRED)
set(GGML_VERSION_MAJOR 0)
set(GGML_VERSION_MINOR 0)
set(GGML_VERSION_PATCH 0)
set(GGML_VERSION 0.0.0)
set(GGML_BUILD ON)
set(GGML_CPU ON)
set(GGML_NATIVE ON)
set(GGML_OPENMP ON)
set(GGML_LLAMAFILE ON)
set(GGML_CPU_REPACK ON)
set(GGML_BACKEND_DL OFF)
set(GGML_CPU_ALL_VARIANTS OFF)
set(GGML_SCHED_MAX_COPIES 4)
add_compile_definitions(NDEBUG GGML_VERSION=0x0 GGML_COMMIT=0x0 GGML_USE_CPU)
include_directories($src/ml/backend/ggml/ggml/include $src/ml/backend/ggml/ggml/src $src/ml/backend/ggml/ggml/src/ggml-cpu)
add_subdirectory($src/ml/backend/ggml/ggml/src ggml)
file(GLOB LLAMA_SRC $src/llama/llama.cpp/src/*.cpp $src/llama/llama.cpp/src/models/*.cpp)
add_library(llama STATIC \${LLAMA_SRC})
target_include_directories(llama PUBLIC $src/llama/llama.cpp/include $src/llama/llama.cpp/src)
target_link_libraries(llama PUBLIC ggml Threads::Threads)
add_executable(llama-bench $here/llbench.cpp)
target_link_libraries(llama-bench llama)
add_executable(llama-quantize $here/llquant.cpp)
target_link_libraries(llama-quantize llama)
CMAKE
cmake -S "$dir" -B "$dir/build" >"$dir/cmake.log" 2>&1 || { tail -30 "$dir/cmake.log" >&2; exit 1; }
cmake --build "$dir/build" -j "$(nproc)" >"$dir/build.log" 2>&1 || { grep -m20 -B2 -A8 "error" "$dir/build.log" >&2; exit 1; }
mkdir -p "$dir/bin"
for t in llama-bench llama-quantize; do
	ln -sf "$dir/build/$t" "$dir/bin/$t"
done
echo "ollama-src: $(cat "$dir/VERSION"): $dir/bin"
