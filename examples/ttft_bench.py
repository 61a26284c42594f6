"""TTFT of a Qwen2.5-VL-7B-shaped text backbone: mmsparse vs SDPA (cuDNN) and FlashAttention.

SYNTHETIC: random bf16 weights (28 layers, hidden 3584, 28 query / 4 KV heads, head_dim 128) and
random input embeddings laid out as a video prompt (text, then frames of 16 x 28 tokens, then
text); no model is downloaded. Needs a CUDA GPU and a CUDA build of mmsparse.

    python examples/ttft_bench.py --lengths 65536 131072 --config model.json --json ttft.json
    python examples/ttft_bench.py --device cpu --layers 1 --lengths 1024   # a smoke run

Reports, per length: TTFT per backend (median of --repeats prefills after a warm-up), the share of
the SDPA prefill spent in attention (28 layers of SDPA alone on the same shapes), mmsparse's
attention-only speedup, and the end-to-end speedup against what that share allows (Amdahl:
1 / ((1 - share) + share / attention_speedup)).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLTextConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLTextModel
from transformers.utils import is_flash_attn_2_available

import mmsparse
import mmsparse.hf

QWEN25_VL_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                    num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                    max_position_embeddings=262144, rms_norm_eps=1e-6,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                     "mrope_section": [16, 24, 24]})
# SDPA's backends in the order tried: cuDNN first, as the comparison is with cuDNN attention.
SDPA_BACKENDS = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                 SDPBackend.EFFICIENT_ATTENTION]
FRAME_TOKENS = (16, 28)  # a 448 x 784 video frame pair after merging (h, w tokens)
TEXT_BEFORE, TEXT_AFTER = 256, 128


def video_layout(length: int) -> mmsparse.Layout:
    """SYNTHETIC video prompt of `length` tokens: text, whole frames, text (padding the rest)."""
    h, w = FRAME_TOKENS
    frames = (length - TEXT_BEFORE - TEXT_AFTER) // (h * w)
    tail = length - TEXT_BEFORE - frames * h * w
    return mmsparse.Layout.from_segments([
        {"type": "text", "length": TEXT_BEFORE},
        {"type": "video", "grid": [frames, h, w], "markers": False},
        {"type": "text", "length": tail}])


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(run, repeats: int, device: str) -> float:
    run()  # warm-up
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def backends(device: str) -> list[str]:
    names = ["sdpa"]
    if device != "cuda":
        return names
    if is_flash_attn_2_available():
        names.append("flash_attention_2")
    try:
        from transformers.utils import is_flash_attn_3_available
        if is_flash_attn_3_available():
            names.append("flash_attention_3")
    except ImportError:
        pass
    return names


def attention_only(length: int, config, repeats: int, layers: int,
                   device: str) -> dict[str, float]:
    """Seconds for `layers` attention calls alone: SDPA (cuDNN) and mmsparse's config per layer."""
    heads, kv_heads = QWEN25_VL_7B["num_attention_heads"], QWEN25_VL_7B["num_key_value_heads"]
    head_dim = QWEN25_VL_7B["hidden_size"] // heads
    generator = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(1, length, heads, head_dim, device=device, dtype=torch.bfloat16,
                    generator=generator)
    k = torch.randn(1, length, kv_heads, head_dim, device=device, dtype=torch.bfloat16,
                    generator=generator)
    v = torch.randn_like(k)
    layout = video_layout(length)

    def sdpa_layers():
        with sdpa_kernel(SDPA_BACKENDS, set_priority=True):
            for _ in range(layers):
                torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                    enable_gqa=True)

    def mmsparse_layers():
        for layer in range(layers):
            mmsparse.attention(q, k, v, config=config, layer=layer, layout=layout)

    return {"sdpa": timed(sdpa_layers, repeats, device),
            "mmsparse": timed(mmsparse_layers, repeats, device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[65536, 131072])
    parser.add_argument("--config", help="pattern config JSON (mmsparse search); default: "
                        "--pattern on every layer and head")
    parser.add_argument("--pattern", default="a-shape:sink=128,local=4096")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=QWEN25_VL_7B["num_hidden_layers"])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: a smoke run of the script on the CPU reference backend")
    args = parser.parse_args()
    cuda_ready = torch.cuda.is_available() and mmsparse.build_info()["cuda_enabled"]
    if args.device == "cuda" and not cuda_ready:
        raise SystemExit("ttft_bench: needs a CUDA GPU and a CUDA build of mmsparse "
                         "(--device cpu for a smoke run)")
    device = args.device

    config = mmsparse.PatternConfig.load(args.config) if args.config else \
        mmsparse.PatternConfig.uniform(args.pattern)
    torch.manual_seed(0)
    model_config = Qwen2_5_VLTextConfig(**dict(QWEN25_VL_7B, num_hidden_layers=args.layers))
    model_config._attn_implementation = "sdpa"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = Qwen2_5_VLTextModel(model_config).eval()
    torch.set_default_dtype(torch.float32)
    device_name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"SYNTHETIC Qwen2.5-VL-7B-shaped text backbone, {args.layers} layers, random bf16 "
          f"weights; {device_name}; config {args.config or args.pattern}")
    results = []
    for length in args.lengths:
        embeds = torch.randn(1, length, model_config.hidden_size, device=device,
                             dtype=torch.bfloat16) * 0.02
        row = {"length": length, "layout": "SYNTHETIC video", "ttft_s": {}}

        @torch.no_grad()
        def prefill():
            with sdpa_kernel(SDPA_BACKENDS, set_priority=True):
                model(inputs_embeds=embeds, use_cache=False)

        for name in backends(device):
            model.set_attn_implementation(name)
            row["ttft_s"][name] = timed(prefill, args.repeats, device)
        mmsparse.hf.enable(model, config=config)
        with mmsparse.hf.use_layout(model, video_layout(length)):
            row["ttft_s"]["mmsparse"] = timed(prefill, args.repeats, device)
        mmsparse.hf.disable(model)
        attention = attention_only(length, config, args.repeats, args.layers, device)
        share = attention["sdpa"] / row["ttft_s"]["sdpa"]
        attention_speedup = attention["sdpa"] / attention["mmsparse"]
        row.update(attention_s=attention, attention_share=share,
                   attention_speedup=attention_speedup,
                   e2e_speedup=row["ttft_s"]["sdpa"] / row["ttft_s"]["mmsparse"],
                   amdahl_bound=1 / ((1 - share) + share / attention_speedup))
        results.append(row)
        ttft = "  ".join(f"{name} {seconds:.3f}s" for name, seconds in row["ttft_s"].items())
        print(f"{length:>7} tokens  TTFT {ttft}  | attention share {share:.1%}, attention "
              f"speedup {attention_speedup:.2f}x -> e2e {row['e2e_speedup']:.2f}x of Amdahl "
              f"bound {row['amdahl_bound']:.2f}x")
        del embeds
        if device == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump({"model": "SYNTHETIC Qwen2.5-VL-7B text backbone", "device": device_name,
                       "config": args.config or args.pattern,
                       "results": results}, file, indent=2)


if __name__ == "__main__":
    main()
