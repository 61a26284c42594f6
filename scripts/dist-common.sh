# shellcheck shell=bash disable=SC2034  # the variables set here are read by the caller
# Sourced by the multi-GPU scripts (dist-check.sh, dist-scaling.sh): reads their common arguments
# BUILD_DIR RESULTS_DIR [LENGTH ...] (default lengths 131072 262144 524288), creates the results
# directory, and sets build, results, lengths, repeats (MMSPARSE_DIST_REPEATS, default 3), bench
# and failed=0; defines now and elapsed (seconds since a `now` stamp). No NVLink multicast
# (NCCL_NVLS_ENABLE=0) unless the caller sets it: shared hosts do not lend it.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/dist-common.sh"
if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR RESULTS_DIR [LENGTH ...]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
results=$2
shift 2
lengths=("$@")
[[ ${#lengths[@]} -eq 0 ]] && lengths=(131072 262144 524288)
repeats=${MMSPARSE_DIST_REPEATS:-3}
bench=$build/tools/dist_bench/mmsparse-dist-bench
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
mkdir -p "$results"
failed=0

now() { date +%s.%N; }
elapsed() { awk -v from="$1" -v to="$(now)" 'BEGIN { printf "%.1f", to - from }'; }
