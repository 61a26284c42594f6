#pragma once
// The attention kernel's parameters (passed by value as a __grid_constant__) and the per-CTA work
// item they resolve to. Strides are in elements; the last dimension is contiguous.

#include <cstdint>

#include "cuda/runtime/plan_view.cuh"

namespace mmsparse::cuda {

struct InputOperand {
  const void* data;  // [batch, seq, heads, head_dim]
  int64_t batch_stride;
  int64_t row_stride;
  int64_t head_stride;
};

struct OutputOperand {
  void* data;  // [batch, q_len, q_heads, head_dim]
  int64_t batch_stride;
  int64_t row_stride;
  int64_t head_stride;
};

struct LseOperand {
  float* data;  // [batch, q_heads, q_len]
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;
};

struct AttentionParams {
  InputOperand q;
  InputOperand k;
  InputOperand v;
  OutputOperand out;
  LseOperand lse;
  int32_t q_len;
  int32_t kv_len;
  int32_t heads;           // query heads; head slot = batch element * heads + head
  int32_t group_size;      // query heads per KV head
  int32_t broadcast_plan;  // the plan has batch 1: grid.y walks the batch
  float scale_log2;        // softmax scale × log2(e): scores live in the exp2 domain
  int32_t accumulate;      // rows resume from out and lse (cuda/attention/resume.cuh)
  PlanView plan;
  // K and V in key-order layout (key_order_copy.h) for key-ordered tiles; null data without.
  InputOperand k_ordered;
  InputOperand v_ordered;
};

// What one CTA computes: a plan tile of one batch element. `block` is the CTA's column
// (blockIdx.x), mapped to a tile through the plan's heaviest-first schedule: its launch record
// where the upload wrote them (one load), else the schedule, the tile and its first key range.
struct TileWork {
  TileRecord tile;
  SpanRecord first_range;  // the tile's first key range, when it has one
  RowLattice rows;         // the tile's rows as arithmetic, or width 0 (query_rows.cuh)
  MaskRecord mask;
  int32_t batch;
  int32_t head;
  int32_t kv_head;
  int32_t causal_offset;  // query position + causal_offset = aligned position (kv_len - q_len)
};

__device__ inline TileWork resolve_tile_work(const AttentionParams& params, int32_t block,
                                             int32_t batch_block) {
  TileWork work;
  const PlanView& plan = params.plan;
  if (plan.launch_records != nullptr) {
    const LaunchRecord& launch = plan.launch_records[block];
    work.tile = launch.tile;
    work.first_range = launch.first_range;
    work.rows = launch.rows;
  } else {
    work.tile = plan.tiles[plan.schedule[block]];
    if (work.tile.span_begin < work.tile.span_end) {
      work.first_range = plan.spans[work.tile.span_begin];
    }
  }
  work.mask = params.plan.masks[work.tile.mask];
  work.head = work.tile.head_slot % params.heads;
  work.batch = params.broadcast_plan ? batch_block : work.tile.head_slot / params.heads;
  work.kv_head = work.head / params.group_size;
  work.causal_offset = params.kv_len - params.q_len;
  return work;
}

}  // namespace mmsparse::cuda
