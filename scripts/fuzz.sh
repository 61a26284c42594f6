#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) in build-fuzz/ with clang, ASan and UBSan, and runs
# each for SECONDS (default 60) on a copy of its seed corpus. Exits non-zero when any target finds
# a crash, a leak or undefined behaviour; the input is kept in build-fuzz/findings/<target>/.
# Usage: scripts/fuzz.sh [SECONDS]   (scripts/install-fuzz-deps.sh installs clang and libFuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS]: SECONDS must be a positive integer, got '$seconds'" >&2
  exit 2
fi
build=build-fuzz
targets=(fuzz_safetensors fuzz_layout_json fuzz_pattern_config fuzz_pattern_spec)
# Memory per fuzzing process; a parser that needs more for one small input has a bug.
rss_limit_mb=2048
# Inputs no larger than this (the seeds are < 4 KiB; headers are where the parsing is).
max_len=16384

# Debian's clang-14 package installs clang++-14; the unversioned name comes with package clang.
compiler=$(command -v clang++-14 || command -v clang++ || true)
if [[ -z "$compiler" ]]; then
  echo "scripts/fuzz.sh: no clang++ found; run scripts/install-fuzz-deps.sh" >&2
  exit 2
fi
# CMake drops every -D of a build directory whose compiler changes: start such a one afresh.
cached=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [[ -n "$cached" && "$cached" != "$compiler" ]]; then rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"; fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$compiler" -DMMSPARSE_CUDA=OFF -DMMSPARSE_BUILD_TESTS=OFF \
  -DMMSPARSE_BUILD_CLI=OFF -DMMSPARSE_BUILD_FUZZERS=ON "${launcher[@]}"
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

# fuzz_safetensors writes each input to a temporary file: in memory, that is ten times faster.
[[ -d /dev/shm && -w /dev/shm ]] && export TMPDIR=/dev/shm

failed=()
for target in "${targets[@]}"; do
  corpus="$build/corpus/$target"
  findings="$build/findings/$target"
  log="$build/logs/$target.log"
  rm -rf "$corpus"
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  cp tests/fuzz/corpus/"$target"/* "$corpus"/
  echo "== $target: ${seconds} s"
  status=0
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/tests/fuzz/$target" -max_total_time="$seconds" -rss_limit_mb="$rss_limit_mb" \
    -max_len="$max_len" -timeout=10 -print_final_stats=1 -artifact_prefix="$findings/" \
    "$corpus" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  echo "$target: ${runs:-?} executions, corpus $(ls "$corpus" | wc -l) inputs"
  if ((status != 0)); then
    failed+=("$target")
    echo "$target FAILED (exit $status); input kept in $findings/, log: $log" >&2
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$log" | head -n 20 >&2 || true
  fi
done

if ((${#failed[@]})); then
  echo "fuzzing found problems in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzzing: no crashes in ${#targets[@]} targets."
