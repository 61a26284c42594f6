// Converters between the plan and the interchange formats of MInference (vertical-slash index) and
// FlexAttention (full/partial block lists). Both directions are exact: the plan a converter returns
// computes the same (query, key) pairs as its input, or the converter throws. MInference's kernel
// leaves gathered columns unmasked because its builder puts them left of the diagonal; here the
// causal mask applies to them as to every pair of a plan, which is the same wherever that holds.

#include <algorithm>
#include <string>
#include <vector>

#include "core/plan_coverage.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"

namespace mmsparse {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string slot_name(int64_t slot) { return "head slot " + std::to_string(slot); }

[[noreturn]] void unsupported(const std::string& converter, const std::string& message) {
  throw Error(ErrorCode::kUnsupported, converter + ": " + message);
}

// The formats index keys in place: a tile reading through a key order has no record there.
void reject_key_orders(const std::string& converter, const Plan& plan) {
  if (plan.has_key_orders()) {
    unsupported(converter,
                "the plan has tiles that read keys through a key order; the format indexes keys "
                "in place");
  }
}

void require_at_least(const std::string& field, int64_t value, int64_t minimum) {
  if (value < minimum) {
    throw_invalid_argument(field, ">= " + std::to_string(minimum), std::to_string(value));
  }
}

void require_size(const std::string& field, size_t size, int64_t expected, const char* layout) {
  if (static_cast<int64_t>(size) != expected) {
    throw_invalid_argument(field, std::to_string(expected) + " entries " + layout,
                           std::to_string(size));
  }
}

bool has_identity_order(const Plan& plan, int64_t slot) {
  int64_t next = 0;
  for (int64_t r = plan.head_run_offsets[slot]; r < plan.head_run_offsets[slot + 1]; ++r) {
    const QueryRun& run = plan.runs[r];
    if (run.count == 0) continue;
    if (run.start != next || (run.count > 1 && run.step != 1)) return false;
    next += run.count;
  }
  return true;
}

// One query block of a MInference index: starts of its key blocks and its gathered columns.
struct BlockKeys {
  std::vector<int32_t> block_starts;
  std::vector<int32_t> columns;
};

// The lists' sizes and fields against q_len and kv_len, and a partial mask the plan can hold.
void check_block_lists(const BlockLists& lists, int64_t q_len, int64_t kv_len,
                       const MaskPolicy& partial_mask) {
  require_at_least("BlockLists.batch", lists.batch, 1);
  require_at_least("BlockLists.heads", lists.heads, 1);
  require_at_least("BlockLists.block_q", lists.block_q, 1);
  require_at_least("BlockLists.block_k", lists.block_k, 1);
  require_at_least("q_len", q_len, 0);
  require_at_least("kv_len", kv_len, 0);
  if (partial_mask.needs_token_arrays()) {
    throw_invalid_argument("partial_mask",
                           "a policy without same_media, media_bidirectional or modality_pairs "
                           "(block lists carry no token arrays)",
                           "one that needs them");
  }
  const int64_t nq = ceil_div(q_len, lists.block_q);
  const int64_t nk = ceil_div(kv_len, lists.block_k);
  if (lists.num_q_blocks != nq) {
    throw_invalid_argument("BlockLists.num_q_blocks",
                           std::to_string(nq) + " (ceil(q_len / block_q))",
                           std::to_string(lists.num_q_blocks));
  }
  if (lists.num_kv_blocks != nk) {
    throw_invalid_argument("BlockLists.num_kv_blocks",
                           std::to_string(nk) + " (ceil(kv_len / block_k))",
                           std::to_string(lists.num_kv_blocks));
  }
  const int64_t slots = lists.batch * lists.heads;
  require_size("BlockLists.kv_num_blocks", lists.kv_num_blocks.size(), slots * nq,
               "[batch, heads, num_q_blocks]");
  require_size("BlockLists.full_kv_num_blocks", lists.full_kv_num_blocks.size(), slots * nq,
               "[batch, heads, num_q_blocks]");
  require_size("BlockLists.kv_indices", lists.kv_indices.size(), slots * nq * nk,
               "[batch, heads, num_q_blocks, num_kv_blocks]");
  require_size("BlockLists.full_kv_indices", lists.full_kv_indices.size(), slots * nq * nk,
               "[batch, heads, num_q_blocks, num_kv_blocks]");
}

// The key blocks of list `list` (one query block of one head slot), checking its count and block
// indices.
std::vector<int32_t> read_block_list(const BlockLists& lists, const char* counts_field,
                                     const std::vector<int32_t>& counts, const char* indices_field,
                                     const std::vector<int32_t>& indices, int64_t list) {
  const int64_t nk = lists.num_kv_blocks;
  const int32_t count = counts[list];
  if (count < 0 || count > nk) {
    throw_invalid_argument(std::string(counts_field) + " entry " + std::to_string(list),
                           "[0, num_kv_blocks = " + std::to_string(nk) + "]",
                           std::to_string(count));
  }
  std::vector<int32_t> blocks(indices.begin() + list * nk, indices.begin() + list * nk + count);
  for (int32_t block : blocks) {
    if (block < 0 || block >= nk) {
      throw_invalid_argument(std::string(indices_field) + " entry " + std::to_string(list),
                             "key blocks in [0, " + std::to_string(nk) + ")",
                             std::to_string(block));
    }
  }
  return blocks;
}

// One mask serves the whole tile, so every full block of list `list` must survive it untouched
// for every query of the block's rows [q_begin, q_end).
void check_full_blocks_kept(const Plan& geometry, const MaskPolicy& mask, const BlockLists& lists,
                            int64_t list, int64_t q_begin, int64_t q_end,
                            const std::vector<int32_t>& full) {
  const int64_t kv_len = geometry.shape.kv_len;
  for (int32_t kb : full) {
    const int64_t k_begin = kb * lists.block_k;
    const int64_t k_end = std::min(kv_len, k_begin + lists.block_k);
    for (int64_t query = q_begin; query < q_end; ++query) {
      int64_t kept = 0;
      detail::for_each_kept_range(geometry, mask, query, k_begin, k_end,
                                  [&](int64_t b, int64_t e) { kept += e - b; });
      if (kept != k_end - k_begin) {
        throw_invalid_argument("BlockLists.full_kv_indices entry " + std::to_string(list),
                               "full blocks the tile's mask keeps whole",
                               "key block " + std::to_string(kb) + ", which query " +
                                   std::to_string(query) + " only partly sees");
      }
    }
  }
}

}  // namespace

// --- MInference ----------------------------------------------------------------------------------

MInferenceIndex to_minference_index(const Plan& plan) {
  const char* converter = "to_minference_index";
  plan.validate();
  const PlanShape& shape = plan.shape;
  MInferenceIndex index;
  index.batch = shape.batch;
  index.heads = shape.heads;
  index.block_size = shape.tile_rows;
  index.num_blocks = ceil_div(shape.q_len, index.block_size);
  const int64_t bs = index.block_size;
  const MaskPolicy causal_only{};
  reject_key_orders(converter, plan);
  if (plan.num_passes() != 1) {
    unsupported(converter, "the plan has " + std::to_string(plan.num_passes()) +
                               " passes; the index holds one");
  }

  std::vector<BlockKeys> blocks(plan.head_slots() * index.num_blocks);
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    if (!has_identity_order(plan, slot)) {
      unsupported(converter,
                  slot_name(slot) + " has a permuted query order; the index needs the identity");
    }
    for (int64_t t = plan.head_tile_offsets[slot]; t < plan.head_tile_offsets[slot + 1]; ++t) {
      const QueryTile& tile = plan.tiles[t];
      const std::string name =
          "tile " + std::to_string(t - plan.head_tile_offsets[slot]) + " of " + slot_name(slot);
      if (tile.begin % bs != 0 || tile.end != std::min(tile.begin + bs, shape.q_len)) {
        unsupported(converter, name + " is [" + std::to_string(tile.begin) + ", " +
                                   std::to_string(tile.end) + "), not a block of " +
                                   std::to_string(bs) + " rows");
      }
      if (plan.masks[plan.tile_masks[t]] != causal_only) {
        unsupported(converter, name + " has a mask beyond causal; the index has causal masks only");
      }
      BlockKeys& keys = blocks[slot * index.num_blocks + tile.begin / bs];
      std::vector<KeySpan> spans(plan.spans.begin() + plan.tile_span_offsets[t],
                                 plan.spans.begin() + plan.tile_span_offsets[t + 1]);
      std::sort(spans.begin(), spans.end(),
                [](const KeySpan& a, const KeySpan& b) { return a.begin < b.begin; });
      for (const KeySpan& span : spans) {
        // Whole key blocks of bs, then the remainder as columns: a block must not reach past the
        // span into keys the plan does not cover.
        int32_t start = span.begin;
        for (; start + bs <= span.end; start += static_cast<int32_t>(bs))
          keys.block_starts.push_back(start);
        for (; start < span.end; ++start) keys.columns.push_back(start);
      }
      for (int64_t s = plan.tile_strided_offsets[t]; s < plan.tile_strided_offsets[t + 1]; ++s) {
        const StridedSpan& lattice = plan.strided_spans[s];
        for (int32_t key = lattice.begin; key < lattice.end; key += lattice.step) {
          keys.columns.push_back(key);
        }
      }
      keys.columns.insert(keys.columns.end(), plan.columns.begin() + plan.tile_column_offsets[t],
                          plan.columns.begin() + plan.tile_column_offsets[t + 1]);
      std::sort(keys.columns.begin(), keys.columns.end());
    }
  }

  for (const BlockKeys& keys : blocks) {
    index.max_blocks = std::max<int64_t>(index.max_blocks, keys.block_starts.size());
    index.max_columns = std::max<int64_t>(index.max_columns, keys.columns.size());
  }
  // Entries past a block's counts are padding and stay 0, as in MInference's zero-filled buffers.
  index.block_count.resize(blocks.size());
  index.column_count.resize(blocks.size());
  index.block_offset.assign(blocks.size() * index.max_blocks, 0);
  index.column_index.assign(blocks.size() * index.max_columns, 0);
  for (size_t b = 0; b < blocks.size(); ++b) {
    index.block_count[b] = static_cast<int32_t>(blocks[b].block_starts.size());
    index.column_count[b] = static_cast<int32_t>(blocks[b].columns.size());
    std::copy(blocks[b].block_starts.begin(), blocks[b].block_starts.end(),
              index.block_offset.begin() + b * index.max_blocks);
    std::copy(blocks[b].columns.begin(), blocks[b].columns.end(),
              index.column_index.begin() + b * index.max_columns);
  }
  return index;
}

Plan from_minference_index(const MInferenceIndex& index, int64_t q_len, int64_t kv_len) {
  require_at_least("MInferenceIndex.batch", index.batch, 1);
  require_at_least("MInferenceIndex.heads", index.heads, 1);
  require_at_least("MInferenceIndex.block_size", index.block_size, 1);
  require_at_least("q_len", q_len, 0);
  require_at_least("kv_len", kv_len, 0);
  require_at_least("MInferenceIndex.max_blocks", index.max_blocks, 0);
  require_at_least("MInferenceIndex.max_columns", index.max_columns, 0);
  const int64_t bs = index.block_size;
  if (index.num_blocks != ceil_div(q_len, bs)) {
    throw_invalid_argument("MInferenceIndex.num_blocks",
                           std::to_string(ceil_div(q_len, bs)) + " (ceil(q_len / block_size))",
                           std::to_string(index.num_blocks));
  }
  const int64_t rows = index.batch * index.heads * index.num_blocks;
  require_size("MInferenceIndex.block_count", index.block_count.size(), rows,
               "[batch, heads, num_blocks]");
  require_size("MInferenceIndex.column_count", index.column_count.size(), rows,
               "[batch, heads, num_blocks]");
  require_size("MInferenceIndex.block_offset", index.block_offset.size(), rows * index.max_blocks,
               "[batch, heads, num_blocks, max_blocks]");
  require_size("MInferenceIndex.column_index", index.column_index.size(), rows * index.max_columns,
               "[batch, heads, num_blocks, max_columns]");

  PlanBuilder builder({index.batch, index.heads, q_len, kv_len, bs});
  for (int64_t slot = 0; slot < index.batch * index.heads; ++slot) {
    builder.begin_head();
    for (int64_t block = 0; block < index.num_blocks; ++block) {
      const int64_t row = slot * index.num_blocks + block;
      const std::string where = "entry " + std::to_string(row) + " (" + slot_name(slot) +
                                ", block " + std::to_string(block) + ")";
      const int32_t block_count = index.block_count[row];
      const int32_t column_count = index.column_count[row];
      if (block_count < 0 || block_count > index.max_blocks) {
        throw_invalid_argument("MInferenceIndex.block_count " + where,
                               "[0, max_blocks = " + std::to_string(index.max_blocks) + "]",
                               std::to_string(block_count));
      }
      if (column_count < 0 || column_count > index.max_columns) {
        throw_invalid_argument("MInferenceIndex.column_count " + where,
                               "[0, max_columns = " + std::to_string(index.max_columns) + "]",
                               std::to_string(column_count));
      }
      builder.begin_tile(block * bs, std::min(q_len, (block + 1) * bs));
      std::vector<int32_t> starts(
          index.block_offset.begin() + row * index.max_blocks,
          index.block_offset.begin() + row * index.max_blocks + block_count);
      std::sort(starts.begin(), starts.end());
      for (int32_t start : starts) {
        if (start < 0 || start >= kv_len) {
          throw_invalid_argument("MInferenceIndex.block_offset " + where,
                                 "key block starts in [0, kv_len = " + std::to_string(kv_len) + ")",
                                 std::to_string(start));
        }
        builder.add_span(start, std::min<int64_t>(kv_len, start + bs));
      }
      for (int64_t c = 0; c < column_count; ++c) {
        const int32_t column = index.column_index[row * index.max_columns + c];
        if (column < 0 || column >= kv_len) {
          throw_invalid_argument("MInferenceIndex.column_index " + where,
                                 "keys in [0, kv_len = " + std::to_string(kv_len) + ")",
                                 std::to_string(column));
        }
        builder.add_column(column);
      }
    }
  }
  return builder.finish();
}

// --- FlexAttention block lists -------------------------------------------------------------------

BlockLists to_block_lists(const Plan& plan, int64_t block_q, int64_t block_k) {
  plan.validate();
  reject_key_orders("to_block_lists", plan);
  require_at_least("block_q", block_q, 1);
  require_at_least("block_k", block_k, 1);
  const PlanShape& shape = plan.shape;
  BlockLists lists;
  lists.batch = shape.batch;
  lists.heads = shape.heads;
  lists.block_q = block_q;
  lists.block_k = block_k;
  lists.num_q_blocks = ceil_div(shape.q_len, block_q);
  lists.num_kv_blocks = ceil_div(shape.kv_len, block_k);
  const int64_t nq = lists.num_q_blocks;
  const int64_t nk = lists.num_kv_blocks;
  const int64_t slots = plan.head_slots();
  lists.kv_num_blocks.assign(slots * nq, 0);
  lists.full_kv_num_blocks.assign(slots * nq, 0);
  lists.kv_indices.assign(slots * nq * nk, 0);  // entries past the counts are padding
  lists.full_kv_indices.assign(slots * nq * nk, 0);

  std::vector<int64_t> covered(nq * nk);  // computed pairs per (query block, key block)
  for (int64_t slot = 0; slot < slots; ++slot) {
    std::fill(covered.begin(), covered.end(), 0);
    detail::for_each_covered_range(plan, slot, [&](int64_t query, int64_t begin, int64_t end) {
      int64_t* row = covered.data() + (query / block_q) * nk;
      for (int64_t kb = begin / block_k; kb * block_k < end; ++kb) {
        row[kb] += std::min(end, (kb + 1) * block_k) - std::max(begin, kb * block_k);
      }
    });
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t rows = std::min(shape.q_len, (qb + 1) * block_q) - qb * block_q;
      const int64_t list = slot * nq + qb;
      for (int64_t kb = 0; kb < nk; ++kb) {
        const int64_t area = rows * (std::min(shape.kv_len, (kb + 1) * block_k) - kb * block_k);
        const int64_t pairs = covered[qb * nk + kb];
        if (pairs == 0) continue;
        if (pairs == area) {
          lists.full_kv_indices[list * nk + lists.full_kv_num_blocks[list]++] =
              static_cast<int32_t>(kb);
        } else {
          lists.kv_indices[list * nk + lists.kv_num_blocks[list]++] = static_cast<int32_t>(kb);
        }
      }
    }
  }
  return lists;
}

Plan from_block_lists(const BlockLists& lists, int64_t q_len, int64_t kv_len,
                      MaskPolicy partial_mask) {
  check_block_lists(lists, q_len, kv_len, partial_mask);
  const int64_t nq = ceil_div(q_len, lists.block_q);
  const int64_t slots = lists.batch * lists.heads;
  const PlanShape shape{lists.batch, lists.heads, q_len, kv_len, lists.block_q};
  Plan geometry;  // only its shape: the mask arithmetic needs the causal offset
  geometry.shape = shape;
  const MaskPolicy causal_only{};
  PlanBuilder builder(shape);
  for (int64_t slot = 0; slot < slots; ++slot) {
    builder.begin_head();
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t list = slot * nq + qb;
      std::vector<int32_t> partial =
          read_block_list(lists, "BlockLists.kv_num_blocks", lists.kv_num_blocks,
                          "BlockLists.kv_indices", lists.kv_indices, list);
      const std::vector<int32_t> full =
          read_block_list(lists, "BlockLists.full_kv_num_blocks", lists.full_kv_num_blocks,
                          "BlockLists.full_kv_indices", lists.full_kv_indices, list);
      const MaskPolicy& mask = partial.empty() ? causal_only : partial_mask;
      const int64_t q_begin = qb * lists.block_q;
      const int64_t q_end = std::min(q_len, q_begin + lists.block_q);
      check_full_blocks_kept(geometry, mask, lists, list, q_begin, q_end, full);
      builder.begin_tile(q_begin, q_end, mask);
      partial.insert(partial.end(), full.begin(), full.end());
      std::sort(partial.begin(), partial.end());
      for (int32_t kb : partial) {
        builder.add_span(kb * lists.block_k, std::min(kv_len, (kb + 1) * lists.block_k));
      }
    }
  }
  return builder.finish();
}

}  // namespace mmsparse
