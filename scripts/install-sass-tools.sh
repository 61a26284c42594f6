#!/usr/bin/env bash
# cuobjdump and nvdisasm from NVIDIA's PyPI wheels (pinned) under .tools/sass, for the checks that
# read the compiled kernels' SASS (ctest: sass.*, scripts/sass_wait_order.py). Building and running
# mmsparse does not need them; CMake registers the checks when it finds cuobjdump.
set -euo pipefail
cd "$(dirname "$0")/.."

target=.tools/sass
if [[ -x $target/nvidia/cu13/bin/cuobjdump && -x $target/nvidia/cu13/bin/nvdisasm ]]; then
  echo "SASS tools are installed."
  exit 0
fi
python3 -m pip install --quiet --disable-pip-version-check --target "$target" \
  nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
echo "SASS tools installed in $target."
