#pragma once
// M-RoPE positions and rotary tables of the synthetic workloads (synthetic.cpp describes the
// model): Qwen2-VL rope ids per layout segment and the cos/sin tables a token's rotation reads.

#include <cstdint>
#include <vector>

#include "mmsparse/layout.h"

namespace mmsparse::detail {

// Temporal id advance per token step: second_per_grid_t · tokens_per_second = (2 / 2 fps) · 2.
inline constexpr int64_t kTemporalIdsPerStep = 2;
// Rope ids split as coarse · kRopeFineSpan + fine for the cos/sin tables.
inline constexpr int64_t kRopeFineSpan = 256;

// M-RoPE starts, walking the segments as get_rope_index does: fills `starts` with one id per
// segment of `layout` and returns the largest table id needed (at least 1).
int64_t segment_rope_starts(const ModalityLayout& layout, std::vector<int64_t>& starts);

// cos/sin tables: fine ids [0, kRopeFineSpan), coarse multiples of kRopeFineSpan up to max_id,
// [ids, pairs] each.
void fill_rope_tables(int64_t pairs, int64_t max_id, std::vector<float>& fine_cos,
                      std::vector<float>& fine_sin, std::vector<float>& coarse_cos,
                      std::vector<float>& coarse_sin);

}  // namespace mmsparse::detail
