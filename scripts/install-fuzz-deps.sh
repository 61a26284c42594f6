#!/usr/bin/env bash
# Installs what scripts/fuzz.sh needs from Debian (bookworm) at pinned versions: clang 14 and its
# compiler runtime, which holds libFuzzer and the ASan/UBSan runtimes.
set -euo pipefail

packages=(
  clang-14=1:14.0.6-12
  libclang-rt-14-dev=1:14.0.6-12
)

missing=()
for spec in "${packages[@]}"; do
  name=${spec%%=*}
  want=${spec#*=}
  have=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)
  if [[ -z "$have" || "$have" != "$want" ]]; then missing+=("$spec"); fi
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "fuzzing dependencies are installed (clang++-14, libFuzzer)."
