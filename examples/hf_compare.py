"""Compare a VLM's prefill with mmsparse against SDPA: time to first token and outputs.

    python examples/hf_compare.py /models/Qwen2.5-VL-7B-Instruct --config model.json \
        --video clip.mp4 --prompt "Describe the video."

Loads the model from a local path (nothing is downloaded), builds the prompt with the model's
processor (images with --image, a video with --video), runs the prefill with transformers' SDPA
and with mmsparse (mmsparse.hf.enable with --config, a pattern config from `mmsparse search`, or
--pattern), and prints TTFT (median of --repeats prefills after a warm-up), the last position's
logits difference and top-1 agreement, and both greedy continuations.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

import mmsparse
import mmsparse.hf


def build_inputs(processor, args, device) -> dict:
    content = [{"type": "image", "path": path} for path in args.image]
    content += [{"type": "video", "path": path} for path in args.video]
    content.append({"type": "text", "text": args.prompt})
    messages = [{"role": "user", "content": content}]
    inputs = processor.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                           return_dict=True, return_tensors="pt")
    return {key: value.to(device) if hasattr(value, "to") else value
            for key, value in inputs.items()}


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


@torch.no_grad()
def ttft(model, inputs: dict, repeats: int) -> tuple[float, torch.Tensor]:
    logits = model(**inputs, logits_to_keep=1).logits[0, -1].float()  # warm-up
    seconds = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        model(**inputs, logits_to_keep=1)
        synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="local model directory")
    parser.add_argument("--config", help="pattern config JSON (mmsparse search)")
    parser.add_argument("--pattern", help="one pattern spec for every layer and head instead")
    parser.add_argument("--image", action="append", default=[])
    parser.add_argument("--video", action="append", default=[])
    parser.add_argument("--prompt", default="Describe what you see.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    processor = AutoProcessor.from_pretrained(args.model, local_files_only=True)
    model = AutoModelForImageTextToText.from_pretrained(
        args.model, local_files_only=True, dtype=dtype, attn_implementation="sdpa").to(device)
    model.eval()
    inputs = build_inputs(processor, args, device)
    length = inputs["input_ids"].shape[-1]
    print(f"{args.model}: {length} prompt tokens on {device}")

    sdpa_seconds, sdpa_logits = ttft(model, inputs, args.repeats)
    sdpa_text = model.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False)
    state = mmsparse.hf.enable(model, config=args.config, pattern=args.pattern)
    sparse_seconds, sparse_logits = ttft(model, inputs, args.repeats)
    sparse_text = model.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False)
    mmsparse.hf.disable(model)
    layout = state.layouts[0] if state.layouts else None

    print(f"layout: {layout}")
    print(f"TTFT  sdpa {sdpa_seconds:.3f} s  mmsparse {sparse_seconds:.3f} s  "
          f"speedup {sdpa_seconds / sparse_seconds:.2f}x")
    difference = (sparse_logits - sdpa_logits).abs().max().item()
    agree = sparse_logits.argmax().item() == sdpa_logits.argmax().item()
    print(f"last-position logits: max |difference| {difference:.3e}, top-1 "
          f"{'agrees' if agree else 'differs'}")
    decode = processor.batch_decode
    print("sdpa:    ", decode(sdpa_text[:, length:], skip_special_tokens=True)[0])
    print("mmsparse:", decode(sparse_text[:, length:], skip_special_tokens=True)[0])


if __name__ == "__main__":
    main()
