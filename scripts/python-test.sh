#!/usr/bin/env bash
# The Python package's tests, as a user installs the package: a virtual environment with the pinned
# requirements (python/requirements-ci.txt: torch from PyPI, transformers, safetensors, pytest and
# the build requirements), `pip install .` built for the CPU (MMSPARSE_CUDA=OFF: the CUDA engine
# would add a quarter of an hour of nvcc on two cores; the GPU tests need a GPU anyway), then pytest
# over python/tests. GPU tests (marker gpu) are skipped without a CUDA device; pytest's exit code is
# the script's, so a run that collects no test (exit 5) fails.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${MMSPARSE_PYTHON_VENV:-.venv-python}
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q -r python/requirements-ci.txt

build_options=(-C cmake.define.MMSPARSE_CUDA="${MMSPARSE_CUDA:-OFF}")
if command -v ccache >/dev/null; then
  build_options+=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# No build isolation: the pinned nanobind and scikit-build-core of the requirements file build it.
"$venv/bin/python" -m pip install -q --no-deps --no-build-isolation "${build_options[@]}" .

"$venv/bin/python" -m pytest python/tests -p no:cacheprovider -q "$@"
