#!/usr/bin/env bash
# Regenerates the README's CPU sample: runs the command the README shows and replaces the block
# between that command line and the closing fence with its output, so the sample cannot go stale.
#   scripts/readme-sample.sh [path/to/mmsparse]   (default: build-cpu/tools/cli/mmsparse)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cli="${1:-$root/build-cpu/tools/cli/mmsparse}"
readme="$root/README.md"
# The command as the README prints it; run here with the binary given.
# No flags: the main job (dense, the static baselines, the shipped MMInference config, the verdict).
shown='$ ./build/tools/cli/mmsparse bench'
args=(bench --quiet --device cpu)

if [[ ! -x "$cli" ]]; then
  echo "readme-sample.sh: expected an mmsparse binary at '$cli' (build it, or pass its path)" >&2
  exit 1
fi
if ! grep -qxF -- "$shown" "$readme"; then
  echo "readme-sample.sh: expected the line '$shown' in $readme" >&2
  exit 1
fi

output="$(mktemp)"
trap 'rm -f "$output"' EXIT
start=$(date +%s)
"$cli" "${args[@]}" >"$output"
# The wall time, so that the sample shows the default run's bound (under 2 minutes on 2 cores).
echo "(wall time $(( $(date +%s) - start )) s, $(nproc) cores)" >>"$output"

# Keep everything up to the command line, then the fresh output, then the README from the fence on.
awk -v shown="$shown" -v output="$output" '
  skipping && /^```$/ { skipping = 0 }
  skipping { next }
  { print }
  $0 == shown { while ((getline line < output) > 0) print line; skipping = 1 }
' "$readme" >"$readme.new"
mv "$readme.new" "$readme"
echo "README.md: sample regenerated with $cli"
