"""transformers integration: an attention backend for the text backbone of Qwen2.5-VL, Qwen3-VL
and Gemma 3 (and decoder-only text models), with the modality layout found from the inputs.

    mmsparse.hf.enable(model, config="model.json")   # prefill sparse, decode dense
    with mmsparse.hf.dump(model, "calib.safetensors", layers=[0, 14]):
        model(**inputs)                               # Q/K/V for `mmsparse search`
"""

from ._backend import NAME, attention_forward, disable, enable, use_layout
from ._dump import dump
from ._layout import layout_from_inputs

__all__ = ["NAME", "attention_forward", "disable", "dump", "enable", "layout_from_inputs",
           "use_layout"]
