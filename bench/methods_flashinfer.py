"""FlashInfer's block-sparse kernel on mmsparse's own plans (kernel vs kernel), for methods.py.

Each setting is an mmsparse plan (a spec for every head, or a config such as the shipped one);
the plan's blocks (bench/plan_blocks.py: every block holding a pair the plan computes, a SUPERSET
of its pairs) go to FlashInfer's VariableBlockSparseAttentionWrapper, which then computes every
pair of those blocks that its causal mask keeps. FlashInfer has no selection of its own, so its
choice is the plan's. Recall and needles come from FlashInfer's own output (the sentinel probe:
its run gives no LSE we use), as for every peer without an LSE.

Timed as index: `mmsparse.prepare` (as for mmsparse's own points) + the wrapper's `plan`. The block
map is made once per setting on the host (numpy over the host plan's records), untimed, its seconds
in the point's note: a converter for this benchmark, not a step a prefill would pay in this form.
"""

import importlib
import time

import methods_peers as peers_lib

METHOD = "flashinfer on mmsparse blocks"


class FlashInferOnPlans(peers_lib.Adapter):
    """Settings: (label, spec, config path); one of spec and config path is None."""
    family, kernel = "flashinfer", "FlashInfer VariableBlockSparse"

    def __init__(self, module, settings, block):
        super().__init__(METHOD, settings)
        self.module, self.block, self._maps, self._configs = module, block, {}, {}

    def available(self):
        why = peers_lib._check_import(lambda: importlib.import_module("flashinfer"))
        return why or peers_lib._check_import(lambda: importlib.import_module("plan_blocks"))

    def knob(self, setting):
        return f"{setting[0]},block={self.block}"

    def _plan(self, t, setting):
        label, spec, config = setting
        if spec is not None:
            return self.module.prepare(t.q, t.k, pattern=spec, layout=t.layout)
        if label not in self._configs:
            self._configs[label] = self.module.PatternConfig.load(config)
        return self.module.prepare(t.q, t.k, config=self._configs[label], layout=t.layout)

    def ready(self, t, setting, timeout_s):
        """Builds the setting's block map once (host, untimed); returns the point's note."""
        import plan_blocks
        import torch
        plan = self._plan(t, setting)
        start = time.perf_counter()
        blocks = plan_blocks.plan_block_map(plan, self.block, self.block)
        seconds = time.perf_counter() - start
        if blocks.shape[0] != t.heads:
            raise ValueError(f"plan head slots: expected {t.heads} (batch 1), got "
                             f"{blocks.shape[0]}")
        self._maps[setting[0]] = torch.from_numpy(blocks).to(t.q.device)
        causal_blocks = sum(min(blocks.shape[2], row + 1) for row in range(blocks.shape[1]))
        share = blocks.sum() / (blocks.shape[0] * causal_blocks)
        return (f"the plan's {self.block}x{self.block} blocks (a superset of its pairs; "
                f"{share:.3f} of the causal blocks), converted on the host in {seconds:.2f} s, "
                f"untimed")

    def _wrapper(self, t, selected):
        import flashinfer
        import torch
        heads, rows, columns = selected.shape
        row_sizes = torch.full((heads, rows), self.block, dtype=torch.int32, device=t.q.device)
        row_sizes[:, -1] = t.seq_len - self.block * (rows - 1)
        column_sizes = torch.full((heads, columns), self.block, dtype=torch.int32,
                                  device=t.q.device)
        column_sizes[:, -1] = t.seq_len - self.block * (columns - 1)
        workspace = torch.empty(peers_lib.FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8,
                                device=t.q.device)
        wrapper = flashinfer.sparse.VariableBlockSparseAttentionWrapper(workspace)
        wrapper.plan(selected, row_sizes, column_sizes, t.heads, t.heads, t.head_dim, causal=True,
                     q_data_type=t.q.dtype)
        return wrapper

    def setup(self, t):
        """FlashInfer's JIT on this input's shapes, on the causal block map (no plan needed)."""
        import torch
        blocks = -(-t.seq_len // self.block)
        causal = torch.ones(blocks, blocks, dtype=torch.bool, device=t.q.device).tril()
        wrapper = self._wrapper(t, causal.expand(t.heads, blocks, blocks).contiguous())
        self.attend(t, wrapper, t.v)
        peers_lib.synchronize(t)

    def prepare(self, t, setting):
        self._plan(t, setting)  # the plan's own index step, as mmsparse's points pay it
        return self._wrapper(t, self._maps[setting[0]])

    def attend(self, t, wrapper, v):
        out = wrapper.run(t.qt_contiguous[0], t.kt_full[0], t.v_full(v)[0])  # [heads, seq, dim]
        return out.transpose(0, 1)[None], None


def settings_for_input(args, configs):
    """(label, spec, config) per plan fed to FlashInfer: the input's configs (shipped,
    --config-file: `configs` is methods.config_settings's list) and --flashinfer-specs."""
    specs = args.flashinfer_specs
    if specs is None:
        specs = [spec for spec in args.mmsparse_patterns if spec.startswith("vertical-slash")]
    return [(label, None, path) for label, path, *_ in configs] + \
        [(spec, spec, None) for spec in specs]
