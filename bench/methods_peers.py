"""The peers of bench/methods.py: each sparse-prefill method people use, as an adapter with one
interface, so that every method is timed, probed and reported the same way.

An adapter sweeps one knob. For each setting, `prepare(setting)` is the method's index step (the
part a prefill pays once per input: estimation and whatever turns it into the kernel's input) and
returns a state; `attend(state, v)` is its attention kernel over that fixed selection and returns
(out [1, seq, q_heads, head_dim], lse [1, q_heads, seq] natural log, or None when the kernel gives
none). `attend` takes V so that the harness can rerun the same selection on probe values
(methods.py: sentinel and needle probes). `setup(t)` is the one-time cost on an input's shapes
(JIT compilation), run before any timing and recorded apart; `describe` adds point fields only the
method knows (density); `exact_accuracy` marks dense methods, which need no probe.

Peer packages are imported inside the adapters; `available()` says why one cannot run ("not
installed: ...") instead of failing. MInference is loaded module by module (`_minference_module`):
its package __init__ patches transformers' Llama classes, which newer transformers releases no
longer have, and none of that is needed for its kernels and estimators.

The vertical-slash estimate follows MInference's published procedure (the last 64 queries' softmax,
summed over columns and over diagonals; the first 30 columns and the 100 nearest diagonals always
kept) in our own torch code; the sparse kernel and the index conversion are MInference's.
"""

import importlib
import importlib.util
import math
import os
import sys
import types

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

# MInference's vertical-slash estimate (MInference paper §3, its reference code's constants).
VS_LAST_Q = 64
VS_FORCED_COLUMNS = 30
VS_FORCED_DIAGONALS = 100
VS_MIN_VERTICAL, VS_MIN_SLASH = 30, 50
# Block size of XAttention's and FlexPrefill's selections, and of the Flex masks built from them.
BLOCK = 128
XATTN_STRIDE = 8
FLEXPREFILL_TAU = 0.1          # FlexPrefill paper's default JS-divergence threshold
FLEXPREFILL_MIN_BUDGET = 1024  # tokens, the paper's minimum budget
FLASHINFER_WORKSPACE_BYTES = 256 << 20


class Tensors:
    """The input in the layouts the peers take, made once per input (not timed)."""

    def __init__(self, q, k, v):
        self.q, self.k, self.v = q, k, v                      # [1, seq, heads, dim] bf16, CUDA
        self.seq_len, self.heads, self.head_dim = q.shape[1], q.shape[2], q.shape[3]
        self.kv_heads = k.shape[2]
        self.group = self.heads // self.kv_heads
        self.scale = self.head_dim ** -0.5
        self.qt = q.transpose(1, 2)                           # [1, heads, seq, dim] views
        self.kt, self.vt = k.transpose(1, 2), v.transpose(1, 2)
        self.qt_contiguous = self.qt.contiguous()
        # K/V with each KV head repeated for its query heads, [1, heads, seq, dim], for the kernels
        # that take no GQA; made once here so that no kernel's time includes the copy.
        self.kt_full = self.expand(k).transpose(1, 2).contiguous()
        self.vt_full = self.expand(v).transpose(1, 2).contiguous()

    def expand(self, x):
        """K or V [1, seq, kv_heads, dim] with each KV head repeated for its query heads."""
        return x.repeat_interleave(self.group, 2)

    def v_full(self, v):
        """vt_full for the input's V, else `v` (probe values) expanded the same way."""
        return self.vt_full if v is self.v else self.expand(v).transpose(1, 2).contiguous()


def causal(b, h, q, k):
    return k <= q


def synchronize(t):
    if t.q.device.type == "cuda":
        torch.cuda.synchronize(t.q.device)


class Adapter:
    family = "?"
    kernel = "?"

    def __init__(self, name, settings):
        self.name, self.settings = name, list(settings)

    def available(self):
        """None when the adapter can run, else the reason it cannot."""
        return None

    def knob(self, setting):
        return str(setting)

    def prepare(self, t, setting):
        return None

    def attend(self, t, state, v):
        raise NotImplementedError

    def lse_for_recall(self, t, state):
        """An LSE of the same selection from another kernel, for kernels that return none."""
        return None

    def setup(self, t):
        """The method's one-time cost on this input's shapes (JIT compilation, autotuning): one
        prepare and attend of its first setting, run before any timing so that no point's time
        holds a compilation; the harness times it apart (setup_s in methods.json)."""
        state = self.prepare(t, self.settings[0])
        self.attend(t, state, t.v)
        synchronize(t)

    def describe(self, t, state):
        """Point fields only this method knows (e.g. density); measured once, not timed."""
        return {}

    def exact_accuracy(self):
        """The accuracy of a method that computes every causal pair (dense), else None: no probe
        is needed for it."""
        return None


class DenseSdpa(Adapter):
    """Dense causal attention through torch's SDPA (cuDNN or FlashAttention-2)."""
    family = "dense"

    def __init__(self, backend):
        label = {SDPBackend.CUDNN_ATTENTION: "cudnn", SDPBackend.FLASH_ATTENTION: "flash2"}[backend]
        super().__init__(f"sdpa-{label} dense", ["dense"])
        self.backend, self.kernel = backend, f"torch SDPA {label}"

    def exact_accuracy(self):
        return {"recall": 1.0, "recall_min": 1.0, "recall_source": "dense (every causal pair)",
                "density": 1.0}

    def attend(self, t, state, v):
        vt = v.transpose(1, 2)
        with sdpa_kernel(self.backend):
            if self.backend == SDPBackend.CUDNN_ATTENTION:  # cuDNN takes no GQA: K/V expanded
                out = torch.nn.functional.scaled_dot_product_attention(
                    t.qt, t.kt_full, t.v_full(v), is_causal=True)
            else:
                out = torch.nn.functional.scaled_dot_product_attention(
                    t.qt, t.kt, vt, is_causal=True, enable_gqa=True)
        return out.transpose(1, 2), None


_compiled_flex = None
# Each setting's mask_mod is a new closure over tensors; should dynamo recompile for some of them,
# the default limit (8) would drop FlexAttention to its eager path, which materialises every score.
FLEX_RECOMPILE_LIMIT = 64


def compiled_flex():
    global _compiled_flex
    if _compiled_flex is None:
        import torch._dynamo
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name,
                        max(getattr(torch._dynamo.config, name), FLEX_RECOMPILE_LIMIT))
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


def flex_attend(t, block_mask, v):
    out, lse = compiled_flex()(t.qt, t.kt, v.transpose(1, 2), block_mask=block_mask,
                               enable_gqa=True, return_lse=True)
    return out.transpose(1, 2), lse


# One mask_mod per (selection shape, device), reading the selection from a buffer that each new
# selection is copied into: a new closure per selection could make dynamo recompile the compiled
# FlexAttention (tens of seconds each) for every setting and round. A BlockMask built here is
# therefore valid until the next one of the same shape is built; the harness runs each selection's
# attention right after building it.
_selection_masks = {}


def _selection_mask_mod(selected):
    key = (tuple(selected.shape), str(selected.device))
    if key not in _selection_masks:
        buffer = torch.zeros_like(selected)

        def selected_causal(b, h, q, k):
            return (k <= q) & buffer[h, q // BLOCK, k // BLOCK]
        _selection_masks[key] = (buffer, selected_causal)
    buffer, mask_mod = _selection_masks[key]
    if buffer.data_ptr() != selected.data_ptr():
        buffer.copy_(selected)
    return mask_mod


def block_mask_from_bool(selected, seq_len):
    """A FlexAttention BlockMask from selected BLOCK x BLOCK tiles [heads, q_blocks, kv_blocks]
    (bool): tiles below the diagonal run as full blocks, diagonal tiles as partial blocks, tiles
    above it are dropped. The mask_mod states the same selection element by element (causal and
    selected): the compiled kernel evaluates it on partial blocks only, and FlexAttention's eager
    path, which evaluates it everywhere, then computes the same pairs."""
    blocks = selected.shape[-1]
    rows = torch.arange(blocks, device=selected.device)
    below = rows[:, None] > rows[None, :]
    diagonal = rows[:, None] == rows[None, :]
    full = selected & below
    partial = selected & diagonal

    def lists(mask):
        count = mask.sum(-1, dtype=torch.int32)
        order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return count[None], order[None]

    kv_num, kv_idx = lists(partial)
    full_num, full_idx = lists(full)
    # No query-side lists: only a backward pass reads them, and building them would add to the
    # peer's index time.
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=BLOCK,
                                    mask_mod=_selection_mask_mod(selected),
                                    seq_lengths=(seq_len, seq_len), compute_q_blocks=False)


class FlexAShape(Adapter):
    """FlexAttention with the A-shape mask (sink + local window), swept over the window."""
    family, kernel = "flexattention", "FlexAttention"

    def __init__(self, locals_, sink=128):
        super().__init__("flexattention a-shape", locals_)
        self.sink, self._masks = sink, {}

    def knob(self, setting):
        return f"sink={self.sink},local={setting}"

    def prepare(self, t, local):
        return create_block_mask(self.mask_mod(local, t.q.device), None, None, t.seq_len,
                                 t.seq_len, device=t.q.device, BLOCK_SIZE=BLOCK, _compile=True)

    def mask_mod(self, local, device):
        """One mask_mod per device for every window: sink and window are tensors (a changed int
        would recompile the mask), the window set here for the BlockMask built next (valid until
        the next window is set; the harness runs each window's attention right after)."""
        key = str(device)
        if key not in self._masks:
            sink = torch.tensor(self.sink, device=device)
            window = torch.tensor(local, device=device)

            def mask(b, h, q, k):
                return (k <= q) & ((k < sink) | (q - k < window))
            self._masks[key] = (window, mask)
        window, mask = self._masks[key]
        window.fill_(local)
        return mask

    def attend(self, t, state, v):
        return flex_attend(t, state, v)


def _minference_module(name):
    """minference.<name> without running the package's __init__ (see the module docstring)."""
    if "minference" not in sys.modules:
        spec = importlib.util.find_spec("minference")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("minference is not installed")
        package = types.ModuleType("minference")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["minference"] = package
    return importlib.import_module(f"minference.{name}")


def _check_import(loader):
    # A package installed while this process runs (MInference's CUDA extension, built beside the
    # benchmark) is only seen once the import system's directory caches are dropped.
    importlib.invalidate_caches()
    try:
        loader()
    except Exception as error:  # a peer that cannot load is reported, never fatal
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"not installed or not loadable: {type(error).__name__}: {first_line}"
    return None


def diagonal_sums(probabilities):
    """Sum of [.., rows, seq] along diagonals: result[.., o] = sum over r of p[r, row_r - o], where
    the rows are the last `rows` query rows (row_r = seq - rows + r). Skews the flipped rows by
    r."""
    rows, seq = probabilities.shape[-2], probabilities.shape[-1]
    # flipped[r, j'] = p[r, seq - 1 - j'], whose offset is o = j' + r - rows + 1
    flipped = probabilities.flip(-1)
    padded = torch.nn.functional.pad(flipped, (0, rows))
    flat = padded.flatten(-2)[..., : rows * (seq + rows - 1)]
    skewed = flat.view(*probabilities.shape[:-2], rows, seq + rows - 1)  # [r, j' + r]
    return skewed.sum(-2)[..., rows - 1: rows - 1 + seq]


class MInferenceVerticalSlash(Adapter):
    """MInference's vertical-slash: last-q estimate (ours, its procedure) + its index conversion
    and Triton kernel (`vertical_slash_sparse_attention`), swept over (vertical, slash) counts."""
    family, kernel = "minference", "MInference vertical-slash (Triton)"

    def __init__(self, counts):
        super().__init__("minference vertical-slash", counts)

    def available(self):
        return _check_import(lambda: _minference_module("ops.pit_sparse_flash_attention_v2"))

    def knob(self, setting):
        return f"vertical={setting[0]},slash={setting[1]}"

    def prepare(self, t, setting):
        seq = t.seq_len
        vertical_count = min(seq, max(setting[0], VS_MIN_VERTICAL))
        slash_count = min(seq, max(setting[1], VS_MIN_SLASH))
        last = t.qt_contiguous[:, :, -VS_LAST_Q:, :]
        scores = torch.einsum("bhmd,bhnd->bhmn", last, t.kt_full).float() * t.scale
        rows = torch.arange(seq - VS_LAST_Q, seq, device=scores.device)
        cols = torch.arange(seq, device=scores.device)
        scores.masked_fill_(cols[None, :] > rows[:, None], -math.inf)
        probabilities = torch.softmax(scores, dim=-1)
        vertical = probabilities.sum(-2)
        vertical[..., :VS_FORCED_COLUMNS] = math.inf
        slash = diagonal_sums(probabilities)
        slash[..., :VS_FORCED_DIAGONALS] = math.inf
        vertical_idx = torch.topk(vertical, vertical_count, -1).indices
        slash_offsets = torch.topk(slash, slash_count, -1).indices  # o = row - key
        return vertical_idx, slash_offsets

    def attend(self, t, state, v):
        kernel = _minference_module("ops.pit_sparse_flash_attention_v2")
        out = kernel.vertical_slash_sparse_attention(t.qt_contiguous, t.kt_full, t.v_full(v),
                                                     state[0], state[1])
        return out.transpose(1, 2), None


class MInferenceXAttention(Adapter):
    """XAttention's antidiagonal estimate (MInference's `xattn_estimate`, Triton), swept over its
    threshold; its kernel (block_sparse_attn) is not on PyPI, so FlexAttention runs the blocks."""
    family, kernel = "minference", "FlexAttention on XAttention's blocks"

    def __init__(self, thresholds):
        super().__init__("minference xattention", thresholds)

    def available(self):
        return _check_import(lambda: _minference_module("modules.xattention"))

    def knob(self, setting):
        return f"threshold={setting},stride={XATTN_STRIDE}"

    def selected_blocks(self, t, threshold):
        module = _minference_module("modules.xattention")
        _, mask = module.xattn_estimate(t.qt_contiguous, t.kt_full, block_size=BLOCK,
                                        stride=XATTN_STRIDE, threshold=threshold, use_triton=True,
                                        causal=True)
        blocks = math.ceil(t.seq_len / BLOCK)
        return mask[0, :, :blocks, :blocks].bool()

    def prepare(self, t, threshold):
        return block_mask_from_bool(self.selected_blocks(t, threshold), t.seq_len)

    def attend(self, t, state, v):
        return flex_attend(t, state, v)


class MInferenceFlexPrefill(Adapter):
    """FlexPrefill (MInference's `get_active_blocks` + `triton_block_wise_attention`), swept over
    gamma, the cumulative attention its vertical-slash or query-aware blocks must cover."""
    family, kernel = "minference", "FlexPrefill block-wise (Triton)"

    def __init__(self, gammas):
        super().__init__("minference flexprefill", gammas)

    def available(self):
        return _check_import(lambda: _minference_module("modules.flexprefill"))

    def knob(self, setting):
        return f"gamma={setting},tau={FLEXPREFILL_TAU},min_budget={FLEXPREFILL_MIN_BUDGET}"

    def prepare(self, t, gamma):
        module = _minference_module("modules.flexprefill")
        return module.get_active_blocks(t.q, t.k, t.v, BLOCK, gamma,
                                        math.ceil(FLEXPREFILL_MIN_BUDGET / BLOCK), 2 ** 31 - 1,
                                        FLEXPREFILL_TAU)

    def attend(self, t, state, v):
        module = _minference_module("modules.flexprefill")
        return module.triton_block_wise_attention(t.q, t.k, v, state, BLOCK), None


class FlashInferBlocks(Adapter):
    """FlashInfer's VariableBlockSparseAttentionWrapper (kernel vs kernel) fed XAttention's blocks
    at each threshold. Its block map is per KV head, so K/V are expanded to the query heads (one
    map per query head). FlashInfer has no selection of its own. Recall comes from FlexAttention's
    LSE on the same blocks (the same pairs, so the same LSE)."""
    family, kernel = "flashinfer", "FlashInfer VariableBlockSparse"

    def __init__(self, thresholds):
        super().__init__("flashinfer on xattention blocks", thresholds)
        self.selector = MInferenceXAttention(thresholds)

    def available(self):
        return _check_import(lambda: importlib.import_module("flashinfer")) or \
            self.selector.available()

    def knob(self, setting):
        return self.selector.knob(setting)

    def prepare(self, t, threshold):
        import flashinfer
        selected = self.selector.selected_blocks(t, threshold)
        heads, blocks = selected.shape[0], selected.shape[1]
        sizes = torch.full((heads, blocks), BLOCK, dtype=torch.int32, device="cuda")
        sizes[:, -1] = t.seq_len - BLOCK * (blocks - 1)
        workspace = torch.empty(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        wrapper = flashinfer.sparse.VariableBlockSparseAttentionWrapper(workspace)
        wrapper.plan(selected, sizes, sizes, t.heads, t.heads, t.head_dim, causal=True,
                     q_data_type=t.q.dtype)
        return wrapper, selected

    def attend(self, t, state, v):
        wrapper, _ = state
        out = wrapper.run(t.qt_contiguous[0], t.kt_full[0], t.v_full(v)[0])  # [heads, seq, dim]
        return out.transpose(0, 1)[None], None

    def lse_for_recall(self, t, state):
        _, lse = flex_attend(t, block_mask_from_bool(state[1], t.seq_len), t.v)
        return lse


def fa4_status():
    """FlashAttention 4 (PyPI flash-attn-4, CuTe DSL): why it is not among the peers."""
    return ("not carried: flash-attn-4 4.0.0b36 has an SM90 forward with block sparsity in its "
            "source, but needs nvidia-cutlass-dsl, whose CUDA 13 libraries are one 92 MB wheel: "
            "more than a device call can carry (64 MiB) and than this benchmark's wheel budget")


def build_adapters(args):
    """Every adapter the arguments ask for, in the order they are listed in reports."""
    adapters = [DenseSdpa(SDPBackend.CUDNN_ATTENTION), DenseSdpa(SDPBackend.FLASH_ATTENTION)]
    if "flex" in args.peers:
        adapters.append(FlexAShape(args.flex_locals))
    if "minference" in args.peers:
        adapters += [MInferenceVerticalSlash(args.vs_counts),
                     MInferenceXAttention(args.xattn_thresholds),
                     MInferenceFlexPrefill(args.flexprefill_gammas)]
    if "flashinfer" in args.peers:
        adapters.append(FlashInferBlocks(args.xattn_thresholds))
    return adapters


def installed_versions(names=("torch", "triton", "minference", "flashinfer-python",
                              "flash-attn-4", "transformers")):
    from importlib import metadata
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def site_note():
    return os.environ.get("PYTHONPATH", "")
