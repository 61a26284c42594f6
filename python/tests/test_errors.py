"""Bad input raises TypeError / ValueError naming the argument."""

from __future__ import annotations

import pytest
import torch

import mmsparse
from reference import qkv


@pytest.fixture
def tensors(generator):
    return qkv(generator, q_len=32)


def call(q, k, v, **kwargs):
    return mmsparse.attention(q, k, v, **kwargs)


@pytest.mark.parametrize("mutate, error, match", [
    (lambda q, k, v: (q.numpy(), k, v), TypeError, "^q: expected a torch.Tensor"),
    (lambda q, k, v: (q[0], k, v), ValueError, r"^q: expected 4 dimensions"),
    (lambda q, k, v: (q, k[..., 0], v), ValueError, r"^k: expected 4 dimensions"),
    (lambda q, k, v: (q.int(), k, v), ValueError, "^q dtype"),
    (lambda q, k, v: (q, k.double(), v), ValueError, r"^k dtype: expected torch.float32"),
    (lambda q, k, v: (q, k, v.half()), ValueError, "^v dtype"),
    (lambda q, k, v: (q[:, :, :3], k, v), ValueError, r"^q heads: expected a positive multiple of"),
    (lambda q, k, v: (q, k, v[:, :5]), ValueError, r"^v shape: expected \[1, 32, 2, 32\]"),
    (lambda q, k, v: (q[..., :16], k, v), ValueError, "^k head_dim"),
    (lambda q, k, v: (torch.cat([q, q]), k, v), ValueError, "^k batch"),
    (lambda q, k, v: (q, k.to("meta"), v), ValueError, r"^k device: expected cpu \(the device"),
])
def test_bad_tensors(tensors, mutate, error, match):
    with pytest.raises(error, match=match):
        call(*mutate(*tensors))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"pattern": "a-shape:sink=x"}, ValueError, "sink"),
    ({"pattern": "no-such-pattern"}, ValueError, "no-such-pattern"),
    ({"pattern": "a-shape:bogus=3"}, ValueError, "bogus"),
    ({"pattern": ["dense", "dense", "dense"]}, ValueError, r"^pattern: expected 1 spec or 4"),
    ({"pattern": 3}, TypeError, "^pattern"),
    ({"pattern": ""}, ValueError, "^pattern"),
    ({"pattern": "dense", "config": {"default": "dense"}}, ValueError, "^pattern, config"),
    ({"config": "/no/such/config.json"}, ValueError, "^config: .*does not exist"),
    ({"config": '{"schema_version": 2, "default": "a-shape:local=oops"}'}, ValueError, "local"),
    ({"config": 3.5}, TypeError, "^config"),
    ({"pattern": "a-shape", "causal": False}, ValueError, "^causal"),
    ({"causal": 1}, TypeError, "^causal"),
    ({"scale": -1.0}, ValueError, "^scale"),
    ({"scale": "big"}, TypeError, "^scale"),
    ({"layer": -2}, ValueError, "^layer"),
    ({"layer": 1.5}, TypeError, "^layer"),
    ({"layout": 7}, TypeError, "^layout"),
    ({"layout": [{"type": "text", "length": 31}], "pattern": "a-shape"}, ValueError,
     r"^layout: expected 32 tokens"),
    ({"layout": [{"type": "pixels", "length": 3}]}, ValueError, "pixels"),
    ({"tensor_layout": "sbhd"}, ValueError, "^tensor_layout"),
])
def test_bad_arguments(tensors, kwargs, error, match):
    with pytest.raises(error, match=match):
        call(*tensors, **kwargs)


def test_bad_out(tensors):
    q, k, v = tensors
    with pytest.raises(ValueError, match=r"^out shape: expected \[1, 32, 4, 32\]"):
        call(q, k, v, out=torch.empty(1, 32, 4, 16))
    with pytest.raises(ValueError, match="^out dtype"):
        call(q, k, v, out=torch.empty_like(q, dtype=torch.float16))
    with pytest.raises(TypeError, match="^out: expected a torch.Tensor"):
        call(q, k, v, out=[0.0])


def test_engine_errors_keep_their_message(tensors, generator):
    q, k, v = tensors
    plan = mmsparse.prepare(q, k, pattern="a-shape:sink=4,local=8")
    q_long, k_long, v_long = qkv(generator, q_len=48)
    # The engine's own check, mapped to ValueError with its message.
    with pytest.raises(ValueError, match=r"plan q_len: expected 48 \(q_len of q\), got 32"):
        plan.run(q_long, k_long, v_long)
    with pytest.raises(ValueError, match="expected"):
        mmsparse.Layout.from_token_types([0, 1, 1, 0], image_grids=[(1, 1, 3)])
