#!/usr/bin/env bash
# Installs mmsparse's build dependencies from Debian (bookworm) at pinned versions.
# GoogleTest, Google Benchmark, CMake, Ninja and the CUDA toolkit are expected on the machine image.
set -euo pipefail

packages=(
  nlohmann-json3-dev=3.11.2-2
  libcli11-dev=2.1.2+ds-1
  libfmt-dev=9.1.0+ds1-2
  libstb-dev=0.0~git20220908.8b5f1f3+ds-1
  libgtest-dev=1.12.1-0.2
  libgmock-dev=1.12.1-0.2
  cmake
  ninja-build
)

missing=()
for spec in "${packages[@]}"; do
  name=${spec%%=*}
  want=${spec#*=}
  have=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)
  if [[ -z "$have" || ( "$spec" == *=* && "$have" != "$want" ) ]]; then missing+=("$spec"); fi
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "mmsparse dependencies are installed."
