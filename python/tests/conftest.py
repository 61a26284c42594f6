"""Shared fixtures. GPU tests (marker `gpu`) skip without a CUDA device or a CUDA build."""

from __future__ import annotations

import pytest
import torch

import mmsparse


def cuda_ready() -> bool:
    return torch.cuda.is_available() and mmsparse.build_info()["cuda_enabled"]


def pytest_collection_modifyitems(config, items):
    if cuda_ready():
        return
    reason = ("needs a CUDA device and a CUDA build of mmsparse (pip install . where nvcc is, or "
              "-DMMSPARSE_CUDA=ON -DMMSPARSE_BUILD_PYTHON=ON)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)
