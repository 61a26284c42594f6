#!/usr/bin/env bash
# Two source trees of mmsparse compared on one GPU machine: a change that must not slow anything
# (a restructuring, a refactor) is measured against its base in the same lease, so that clocks,
# driver and GPU are the same.
#
#   scripts/compare-builds.sh all BASE_SRC NEW_SRC      # the three steps below in one device call
#   scripts/compare-builds.sh build BASE_SRC NEW_SRC    # both Release builds, concurrently
#   scripts/compare-builds.sh engine BASE_SRC NEW_SRC   # engine bench, builds rotated per round
#   scripts/compare-builds.sh peers BASE_SRC NEW_SRC    # bench/peers.py with each build's CLI
#
# The builds (BASE_SRC/build-gpu, NEW_SRC/build-gpu) hold only what is measured: the engine bench
# and the CLI. In every round each build runs once, the order swapped from round to round, so that
# neither always runs first in the GPU's clock and power history. `all` starts a round only while
# it fits in COMPARE_BUDGET_S (counted from its start) by the last round's duration, an engine
# round also leaving one peers round's time, and ends with scripts/compare_summary.py's table
# (summary.txt): per case, the builds' median times and the change. The Debian packages the CLI
# needs travel as .deb files in the new tree's .deps/ (scripts/carried-deps.sh). Logs go to $OUT
# (else ./compare-logs).
#
# Environment: COMPARE_ROUNDS (default 3), COMPARE_CASES (engine bench cases; default the dense,
# A-shape and gathered-column cases at 32K and 128K), COMPARE_SEQ_LENS (peers; default
# "32768 131072"), COMPARE_PEERS_ARGS (more peers.py arguments; default --skip-flex: Flex compiles
# for minutes and times no mmsparse kernel; set it empty to include Flex), COMPARE_BUDGET_S
# (default 480), COMPARE_PEERS_ROUND_S (what a peers round is expected to take before one has
# run; default 150).
set -uo pipefail

step=${1:?"usage: compare-builds.sh all|build|engine|peers BASE_SRC NEW_SRC"}
base=$(cd "${2:?BASE_SRC}" && pwd)
new=$(cd "${3:?NEW_SRC}" && pwd)
logs=${OUT:-$PWD/compare-logs}
rounds=${COMPARE_ROUNDS:-3}
budget_s=${COMPARE_BUDGET_S:-480}
peers_round_s=${COMPARE_PEERS_ROUND_S:-150}
read -r -a seq_lens <<<"${COMPARE_SEQ_LENS:-32768 131072}"
read -r -a cases <<<"${COMPARE_CASES:-dense-32k dense-128k a-shape-128k columns-128k}"
read -r -a peers_args <<<"${COMPARE_PEERS_ARGS---skip-flex}"
mkdir -p "$logs"
started=$(date +%s)

repo=$new
# shellcheck source=carried-deps.sh
source "$new/scripts/carried-deps.sh"

source_of() { [[ $1 == base ]] && echo "$base" || echo "$new"; }
elapsed() { echo $(($(date +%s) - started)); }

# The builds in round `round`'s order: base first in odd rounds, new first in even ones.
round_order() { (($1 % 2 == 1)) && echo "base new" || echo "new base"; }

# Whether a round that needs `seconds` fits: without a budget (a single step) always; else while the
# elapsed time plus those seconds stays within it.
round_fits() {  # round_fits <seconds>
  [[ $step != all ]] || (($(elapsed) + $1 <= budget_s))
}

build_tree() {  # build_tree <src> <name> <jobs>
  cmake -S "$1" -B "$1/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMSPARSE_CUDA=ON \
    "${prefix_args[@]}" >"$logs/configure-$2.log" 2>&1 &&
    cmake --build "$1/build-gpu" -j "$3" --target mmsparse_engine_bench mmsparse_cli \
      >"$logs/build-$2.log" 2>&1
}

build_both() {
  local jobs=$(($(nproc) / 2))
  build_tree "$base" base "$jobs" &
  local base_pid=$!
  build_tree "$new" new "$jobs" &
  local new_pid=$!
  local status=0
  if ! wait "$base_pid"; then
    echo "base build failed"
    grep -m 20 -A 5 error "$logs/build-base.log"
    status=1
  fi
  if ! wait "$new_pid"; then
    echo "new build failed"
    grep -m 20 -A 5 error "$logs/build-new.log"
    status=1
  fi
  echo "builds done at $(elapsed) s"
  return "$status"
}

engine_rounds() {
  local last=0
  for round in $(seq 1 "$rounds"); do
    ((round == 1)) || round_fits $((last + peers_round_s)) ||
      { echo "engine: round $round skipped (budget)"; break; }
    local round_start
    round_start=$(date +%s)
    for name in $(round_order "$round"); do
      echo "## $name round $round" >>"$logs/engine-bench.txt"
      "$(source_of "$name")/build-gpu/bench/mmsparse_engine_bench" "${cases[@]}" \
        >>"$logs/engine-bench.txt" 2>&1 || { echo "engine bench of $name failed"; return 1; }
    done
    last=$(($(date +%s) - round_start))
    echo "engine round $round done at $(elapsed) s"
  done
}

# Each round runs bench/peers.py (the new tree's, the same harness for both) once per build.
peers_rounds() {
  local last=$peers_round_s
  for round in $(seq 1 "$rounds"); do
    round_fits "$last" || { echo "peers: round $round skipped (budget)"; break; }
    local round_start
    round_start=$(date +%s)
    for name in $(round_order "$round"); do
      PYTHONUNBUFFERED=1 python3 "$new/bench/peers.py" \
        --mmsparse "$(source_of "$name")/build-gpu/tools/cli/mmsparse" --seq-lens "${seq_lens[@]}" \
        --rounds 1 "${peers_args[@]}" --out "$logs/peers-$name-r$round.json" \
        >"$logs/peers-$name-r$round.txt" 2>&1 || { echo "peers with $name failed"; return 1; }
    done
    last=$(($(date +%s) - round_start))
    echo "peers round $round done at $(elapsed) s"
  done
}

case $step in
  all)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$logs/device.txt" 2>&1
    build_both || exit 1
    # A failed step still leaves the other's rounds and the table of what was measured.
    status=0
    engine_rounds || status=1
    peers_rounds || status=1
    python3 "$new/scripts/compare_summary.py" "$logs" | tee "$logs/summary.txt"
    exit "$status"
    ;;
  build) build_both ;;
  engine) engine_rounds ;;
  peers) peers_rounds ;;
  *)
    echo "compare-builds: unknown step $step (all, build, engine or peers)" >&2
    exit 2
    ;;
esac
