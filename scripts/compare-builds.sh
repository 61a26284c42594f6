#!/usr/bin/env bash
# Two source trees of mmsparse compared on one GPU machine: a change that must not slow anything
# (a restructuring, a refactor) is measured against its base in the same lease, so that clocks,
# driver and GPU are the same. Each step fits one device call (10 minutes on an H100):
#
#   scripts/compare-builds.sh build BASE_SRC NEW_SRC      # both Release builds, concurrently
#   scripts/compare-builds.sh engine BASE_SRC NEW_SRC     # engine bench, builds alternated per round
#   scripts/compare-builds.sh peers BASE_SRC NEW_SRC      # bench/peers.py with each build's CLI
#
# Builds go to <src>/build-gpu. The Debian packages the CLI needs travel as .deb files in the new
# tree's .deps/ (scripts/device-bench.sh says which). Logs go to $OUT (else ./compare-logs).
# Environment: COMPARE_ROUNDS (default 2), COMPARE_CASES (engine bench cases; default all),
# COMPARE_SEQ_LENS (peers; default "32768 131072").
set -uo pipefail

step=${1:?"usage: compare-builds.sh build|engine|peers BASE_SRC NEW_SRC"}
base=$(cd "${2:?BASE_SRC}" && pwd)
new=$(cd "${3:?NEW_SRC}" && pwd)
logs=${OUT:-$PWD/compare-logs}
rounds=${COMPARE_ROUNDS:-2}
read -r -a seq_lens <<<"${COMPARE_SEQ_LENS:-32768 131072}"
read -r -a cases <<<"${COMPARE_CASES:-}"
mkdir -p "$logs"

prefix_args=()
if compgen -G "$new/.deps/*.deb" >/dev/null; then
  deps=/tmp/mmsparse-deps
  for package in "$new"/.deps/*.deb; do dpkg -x "$package" "$deps"; done
  prefix_args=(-DCMAKE_PREFIX_PATH="$deps/usr")
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

build_tree() {  # build_tree <src> <name> <jobs>
  cmake -S "$1" -B "$1/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMSPARSE_CUDA=ON \
    "${prefix_args[@]}" >"$logs/configure-$2.log" 2>&1 &&
    cmake --build "$1/build-gpu" -j "$3" >"$logs/build-$2.log" 2>&1
}

case $step in
  build)
    jobs=$(( $(nproc) / 2 ))
    build_tree "$base" base "$jobs" & base_pid=$!
    build_tree "$new" new "$jobs" & new_pid=$!
    status=0
    wait "$base_pid" || { echo "base build failed"; tail -n 30 "$logs/build-base.log"; status=1; }
    wait "$new_pid" || { echo "new build failed"; grep -m 20 -A 5 error "$logs/build-new.log"; status=1; }
    exit "$status"
    ;;
  engine)
    # Per round, every case on each build in turn, the order swapped every round.
    for round in $(seq 1 "$rounds"); do
      order=(base new)
      ((round % 2 == 0)) && order=(new base)
      for name in "${order[@]}"; do
        src=$base
        [[ $name == new ]] && src=$new
        echo "## $name round $round" | tee -a "$logs/engine-bench.txt"
        "$src/build-gpu/bench/mmsparse_engine_bench" "${cases[@]}" 2>&1 |
          tee -a "$logs/engine-bench.txt" || exit 1
      done
    done
    ;;
  peers)
    for name in base new; do
      src=$base
      [[ $name == new ]] && src=$new
      PYTHONUNBUFFERED=1 python3 "$new/bench/peers.py" --mmsparse "$src/build-gpu/tools/cli/mmsparse" \
        --seq-lens "${seq_lens[@]}" --rounds "$rounds" --out "$logs/peers-$name.json" 2>&1 |
        tee "$logs/peers-$name.txt" || exit 1
    done
    ;;
  *)
    echo "compare-builds: unknown step $step (build, engine or peers)" >&2
    exit 2
    ;;
esac
