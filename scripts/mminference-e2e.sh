#!/usr/bin/env bash
# MMInference end to end on one GPU (the bar: mean recall 0.95 over all rows at a speedup over
# dense): search a per-head config on the SYNTHETIC video preset at the given length with measured
# kernel costs, then run it through `mmsparse bench` on the same workload (index building on the
# GPU included in the layer time, against dense in the same run). Outputs (config, search summary
# and JSON, bench table and JSON) go to $OUT, else to ./e2e-<seq_len>.
#
#   scripts/mminference-e2e.sh [mmsparse binary] [seq_len] [extra search flags ...]
#
# Defaults: build/tools/cli/mmsparse, 131072, and the search flags
#   --boundary-modes 0             the video preset's bar runs: one modality dominates, and modes
#                                  2/3 add stage-3 candidates whose Q/2D indices cost more (at 128K
#                                  `--boundary-modes 0,2` measured 3.97x against 4.27x; docs/results.md)
#   --target-mean-recall 0.96      the bar is 0.95 over all rows; the search meets its target
#                                  on sampled rows, hence the margin (docs/search.md)
# Needles: 4 planted in the media, read by the final question (the bar's needle task).
# MMSPARSE_E2E_WORKLOAD adds workload flags to both commands, e.g. "--heads 4 --kv-heads 1" for
# the 1M-token run (the bar allows fewer heads there).
set -euo pipefail

cli=${1:-build/tools/cli/mmsparse}
seq_len=${2:-131072}
shift $(( $# > 2 ? 2 : $# ))
search_flags=("$@")
if [[ ${#search_flags[@]} -eq 0 ]]; then
  search_flags=(--boundary-modes 0 --target-mean-recall 0.96)
fi
out=${OUT:-e2e-$seq_len}
mkdir -p "$out"
read -r -a extra_workload <<<"${MMSPARSE_E2E_WORKLOAD:-}"
workload=(--seq-len "$seq_len" --needles 4 --device cuda "${extra_workload[@]}")

"$cli" search "${workload[@]}" "${search_flags[@]}" --output "$out/config.json" \
  --json "$out/search.json" | tee "$out/search.txt"
"$cli" bench "${workload[@]}" --config "$out/config.json" --per-head --json "$out/bench.json" \
  | tee "$out/bench.txt"
