#!/usr/bin/env bash
# The main job on a GPU (configs/README.md, docs/report.md "The default run"): search the
# MMInference config the GPU default run needs (SYNTHETIC video preset at 131072 tokens, seed 1:
# another seed than the bench's 0) unless configs/ already has it, rebuild the CLI so that it is
# compiled in, then run `mmsparse bench --device cuda` with no other flag (dense, the static
# baselines and the config, ending in the verdict). With `1m`, also the 1M-token run with all 28
# heads: a config searched on the 1M preset at 131072 tokens (no window or budget scales at 128K
# and more, and the preset's frames keep their size, so it applies at 1M) against dense in one
# bench. Outputs go to $OUT (else <build>/mminference-default); the searched configs are copied
# there to be committed under configs/.
#
#   scripts/mminference-default.sh [build-dir] [1m]
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
with_1m=${2:-}
cli=$build/tools/cli/mmsparse
out=${OUT:-$build/mminference-default}
mkdir -p "$out/configs"
# The search flags of scripts/mminference-e2e.sh: boundary mode 0 (one modality dominates; Q/2D
# indices cost more), a 0.96 target for the 0.95 bar over all rows, the bench's needle task.
search_flags=(--seed 1 --needles 4 --device cuda --boundary-modes 0 --target-mean-recall 0.96)

search_config() {  # preset seq_len
  local file="configs/$1-$2.json"
  if [[ -f "$repo/$file" ]]; then
    echo "$file exists: not searched again"
    return 0
  fi
  "$cli" search --preset "$1" --seq-len "$2" "${search_flags[@]}" --output "$repo/$file" \
    --json "$out/search-$1-$2.json" 2>&1 | tee "$out/search-$1-$2.txt" || return 1
  cp "$repo/$file" "$out/configs/"
}

status=0
search_config video-qwen2.5vl-128k 131072 || status=1
[[ $with_1m == 1m ]] && { search_config video-qwen2.5vl-1m 131072 || status=1; }
# configs/ is compiled into the CLI: a new file re-runs the configuration at this build.
cmake --build "$build" --target mmsparse_cli -j >"$out/rebuild.txt" 2>&1 || status=1

"$cli" bench --device cuda --json "$out/bench-default.json" 2>&1 | tee "$out/bench-default.txt" \
  || status=1
if [[ $with_1m == 1m ]]; then
  # Dense once (about 14 s for 28 heads at 1M on an H100): one timed run each keeps the call
  # inside 10 minutes; fewer sampled rows for the oracle density.
  "$cli" bench --device cuda --preset video-qwen2.5vl-1m --heads 28 --kv-heads 4 --needles 4 \
    --config "$repo/configs/video-qwen2.5vl-1m-131072.json" --warmup 0 --repeats 1 \
    --oracle-rows 16 --per-head --json "$out/bench-1m.json" 2>&1 | tee "$out/bench-1m.txt" \
    || status=1
fi
exit $status
