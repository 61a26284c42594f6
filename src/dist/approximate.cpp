// Spava, APB-style and StarAttention on one rank, over the engine's attention and LSE merge.
//
// A rank's local sequence is [anchor | its hosts' blocks | query] (split.cpp). Per call:
//  1. each local block's essential KVs are selected into this rank's slot of a passing buffer
//     ordered by virtual host, and all-gathered (one all-gather per local block position);
//  2. the query attends, exactly, this rank's anchor slice, its blocks and (on one rank) itself;
//     the three partials are all-gathered;
//  3. the anchor attends itself causally;
//  4. each block attends the passing rows of all earlier hosts (a prefix of the passing buffer),
//     the anchor and itself causally: separate engine calls over views, merged by LSE;
//  5. the query partials of every rank are merged (fp32 inside the merge).
// With overlap (Spava), steps 2-4 run while the gathers are in flight; APB waits at once.

#include "dist/approximate.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/selection.h"
#include "dist/views.h"
#include "dist/workspace.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace mmsparse::dist::detail {
namespace {

// Query partials per rank: its anchor slice, its context blocks, the query's own keys.
constexpr int64_t kQueryParts = 3;
// Block partials: passing rows, anchor, the block itself (the last two fused where adjacent).
constexpr int64_t kMaxBlockParts = 3;

struct Rank {
  const DistConfig& config;
  const SequenceSplit& split;
  Communicator& communicator;
  const TensorView& q;
  const TensorView& k;
  const TensorView& v;
  const TensorView& out;
  const TensorView& lse;  // [1, q_heads, local_len] fp32, or no data: not kept
  const AttentionOptions& options;
  Workspace::Impl& workspace;
  int rank = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<Segment> layout;          // [anchor, blocks..., query]
  std::vector<int64_t> passing_offset;  // rows before each host in the passing buffer
  void* passing = nullptr;              // [rows, kv_heads, 2, head_dim]
};

int64_t passing_row_bytes(const Rank& rank) {
  return rank.kv_heads * 2 * rank.head_dim * static_cast<int64_t>(dtype_size(rank.q.dtype));
}

const Segment& query_segment(const Rank& rank) { return rank.layout.back(); }

// Where the LSE of local rows [begin, begin + len) goes: the caller's when kept, else scratch.
TensorView output_lse(Rank& rank, const std::string& name, int64_t begin, int64_t len) {
  if (rank.lse.data != nullptr) return lse_rows(rank.lse, begin, len);
  return rank.workspace.tensor(name, DType::kFloat32, {1, rank.q_heads, len}, rank.q.device);
}

// Parts of the gathered query buffer start on this boundary: the CUDA engine reads and writes
// 16-byte vectors, and NCCL is fastest on aligned buffers.
constexpr int64_t kPartAlignment = 256;
int64_t align_bytes(int64_t bytes) {
  return (bytes + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
}

AttentionOptions with_causal(const AttentionOptions& options, bool causal) {
  AttentionOptions copy = options;
  copy.causal = causal;
  return copy;
}

// Starts the all-gather of local block position `slot` (every rank's slot-th host).
Communicator::Ticket gather_passing(Rank& rank, std::size_t slot) {
  const int64_t row_bytes = passing_row_bytes(rank);
  std::vector<GatherSlot> slots;
  for (int peer = 0; peer < rank.split.world; ++peer) {
    const int host = rank.split.rank_hosts[static_cast<std::size_t>(peer)][slot];
    slots.push_back({rank.passing_offset[static_cast<std::size_t>(host)] * row_bytes,
                     rank.split.hosts[static_cast<std::size_t>(host)].passing * row_bytes});
  }
  const GatherSlot& own = slots[static_cast<std::size_t>(rank.rank)];
  std::byte* send = static_cast<std::byte*>(rank.passing) + own.offset;
  return rank.communicator.all_gather(send, own.bytes, rank.passing, slots, rank.options.stream);
}

void select_block(Rank& rank, std::size_t slot) {
  const int host = rank.split.rank_hosts[static_cast<std::size_t>(rank.rank)][slot];
  const VirtualHost& block = rank.split.hosts[static_cast<std::size_t>(host)];
  const Segment& segment = rank.layout[slot + 1];
  const Segment& query = query_segment(rank);
  std::byte* message =
      static_cast<std::byte*>(rank.passing) +
      rank.passing_offset[static_cast<std::size_t>(host)] * passing_row_bytes(rank);
  select_and_pack(rows(rank.q, query.local_begin, query.len),
                  rows(rank.k, segment.local_begin, segment.len),
                  rows(rank.v, segment.local_begin, segment.len), block.passing,
                  rank.config.pool_width, message, rank.options.stream);
}

// The query's partials on this rank, written into its slot of the gathered buffer.
struct QueryBuffer {
  void* data = nullptr;
  int64_t rank_bytes = 0;
  int64_t lse_bytes = 0;  // per part
  int64_t out_bytes = 0;  // per part
};

QueryBuffer query_buffer(Rank& rank) {
  const int64_t query_len = query_segment(rank).len;
  QueryBuffer buffer;
  buffer.lse_bytes = align_bytes(rank.q_heads * query_len * static_cast<int64_t>(sizeof(float)));
  buffer.out_bytes = align_bytes(query_len * rank.q_heads * rank.head_dim *
                                 static_cast<int64_t>(dtype_size(rank.q.dtype)));
  // A rank's slot: its LSE parts, then its output parts, each on a kPartAlignment boundary.
  buffer.rank_bytes = kQueryParts * (buffer.lse_bytes + buffer.out_bytes);
  buffer.data =
      rank.workspace.bytes("query_parts", rank.split.world * buffer.rank_bytes, rank.q.device);
  return buffer;
}

TensorView query_part_out(const Rank& rank, const QueryBuffer& buffer, int peer, int64_t part) {
  std::byte* base = static_cast<std::byte*>(buffer.data) + peer * buffer.rank_bytes +
                    kQueryParts * buffer.lse_bytes + part * buffer.out_bytes;
  return sequence_view(base, rank.q.dtype, query_segment(rank).len, rank.q_heads, rank.head_dim,
                       rank.q.device);
}

TensorView query_part_lse(const Rank& rank, const QueryBuffer& buffer, int peer, int64_t part) {
  std::byte* base =
      static_cast<std::byte*>(buffer.data) + peer * buffer.rank_bytes + part * buffer.lse_bytes;
  return lse_view(base, rank.q_heads, query_segment(rank).len, rank.q.device);
}

Communicator::Ticket query_attention(Rank& rank, const QueryBuffer& buffer) {
  const Segment& query = query_segment(rank);
  const TensorView query_q = rows(rank.q, query.local_begin, query.len);
  // The anchor is split in W slices so that every anchor key is counted once over the ranks.
  const int64_t anchor = rank.split.anchor_len;
  const int64_t world = rank.split.world;
  const int64_t slice_begin = anchor * rank.rank / world;
  const int64_t slice_end = anchor * (rank.rank + 1) / world;
  const int64_t blocks_begin = rank.layout[1].local_begin;
  const int64_t blocks_len = query.local_begin - blocks_begin;
  const bool holds_query_keys = rank.rank == rank.split.query_keys_rank;
  const int64_t self_len = holds_query_keys ? query.len : 0;
  struct KeyRange {
    int64_t begin, len;
    bool causal;
  };
  // Every key of the anchor and the blocks precedes the query: no mask there (non-causal).
  const KeyRange ranges[kQueryParts] = {{slice_begin, slice_end - slice_begin, false},
                                        {blocks_begin, blocks_len, false},
                                        {query.local_begin, self_len, true}};
  for (int64_t part = 0; part < kQueryParts; ++part) {
    const KeyRange& range = ranges[part];
    attention_dense(
        query_q, rows(rank.k, range.begin, range.len), rows(rank.v, range.begin, range.len),
        query_part_out(rank, buffer, rank.rank, part),
        query_part_lse(rank, buffer, rank.rank, part), with_causal(rank.options, range.causal));
  }
  std::vector<GatherSlot> slots;
  for (int peer = 0; peer < rank.split.world; ++peer) {
    slots.push_back({peer * buffer.rank_bytes, buffer.rank_bytes});
  }
  std::byte* own = static_cast<std::byte*>(buffer.data) + rank.rank * buffer.rank_bytes;
  return rank.communicator.all_gather(own, buffer.rank_bytes, buffer.data, slots,
                                      rank.options.stream);
}

void merge_query(Rank& rank, const QueryBuffer& buffer) {
  std::vector<TensorView> outs;
  std::vector<TensorView> lses;
  for (int peer = 0; peer < rank.split.world; ++peer) {
    for (int64_t part = 0; part < kQueryParts; ++part) {
      outs.push_back(query_part_out(rank, buffer, peer, part));
      lses.push_back(query_part_lse(rank, buffer, peer, part));
    }
  }
  const Segment& query = query_segment(rank);
  const TensorView lse = output_lse(rank, "query_lse", query.local_begin, query.len);
  merge_partials(outs, lses, rows(rank.out, query.local_begin, query.len), lse, rank.options);
}

void anchor_attention(Rank& rank) {
  const int64_t anchor = rank.split.anchor_len;
  if (anchor == 0) return;
  const TensorView lse = output_lse(rank, "anchor_lse", 0, anchor);
  attention_dense(rows(rank.q, 0, anchor), rows(rank.k, 0, anchor), rows(rank.v, 0, anchor),
                  rows(rank.out, 0, anchor), lse, with_causal(rank.options, true));
}

// The local pattern's plan over a block's own keys (square, causal), for this rank's shape; built
// from the block's q and k where the pattern is dynamic, on the device when they are CUDA tensors.
// Its device memory is freed in stream order on the rank's stream, after the attention using it.
PreparedPlan local_block_plan(const Rank& rank, const TensorView& block_q,
                              const TensorView& block_k) {
  const PatternSpec spec = PatternSpec::parse(rank.config.local_pattern);
  const int64_t len = block_q.shape[1];
  const PlanShape shape{1, rank.q_heads, len, len,
                        preferred_tile_rows(rank.q.device, rank.head_dim)};
  const PatternInputs inputs{block_q, block_k, rank.options.scale};
  return prepare_pattern(spec, shape, nullptr, rank.q.device, rank.options.stream,
                         is_dynamic(spec) ? &inputs : nullptr);
}

// Block `slot` of this rank: passing rows of earlier hosts, the anchor and the block (causal).
void block_attention(Rank& rank, std::size_t slot) {
  const int host = rank.split.rank_hosts[static_cast<std::size_t>(rank.rank)][slot];
  const Segment& block = rank.layout[slot + 1];
  if (block.len == 0) return;
  struct Part {
    TensorView k, v;
    bool causal;
    const PreparedPlan* plan = nullptr;  // the local pattern over the block's own keys
  };
  std::vector<Part> parts;
  const int64_t passing_rows = rank.passing_offset[static_cast<std::size_t>(host)];
  if (passing_rows > 0) {
    parts.push_back({passing_keys(rank.passing, rank.k.dtype, passing_rows, rank.kv_heads,
                                  rank.head_dim, rank.k.device),
                     passing_values(rank.passing, rank.v.dtype, passing_rows, rank.kv_heads,
                                    rank.head_dim, rank.v.device),
                     false});
  }
  const int64_t anchor = rank.split.anchor_len;
  const TensorView block_k = rows(rank.k, block.local_begin, block.len);
  const TensorView block_v = rows(rank.v, block.local_begin, block.len);
  const bool sparse = !rank.config.local_pattern.empty();
  std::optional<PreparedPlan> local_plan;
  if (block.local_begin == anchor && !sparse) {
    // Adjacent to the anchor: one causal call, bottom-right aligned, covers both.
    parts.push_back(
        {rows(rank.k, 0, anchor + block.len), rows(rank.v, 0, anchor + block.len), true});
  } else {
    if (anchor > 0) parts.push_back({rows(rank.k, 0, anchor), rows(rank.v, 0, anchor), false});
    if (sparse) {
      local_plan.emplace(
          local_block_plan(rank, rows(rank.q, block.local_begin, block.len), block_k));
      parts.push_back({block_k, block_v, true, &*local_plan});
    } else {
      parts.push_back({block_k, block_v, true});
    }
  }
  const TensorView block_q = rows(rank.q, block.local_begin, block.len);
  const TensorView block_out = rows(rank.out, block.local_begin, block.len);
  const std::string name = "block" + std::to_string(slot);
  const TensorView lse = output_lse(rank, name + "_lse", block.local_begin, block.len);
  const auto attend = [&](const Part& part, const TensorView& out, const TensorView& part_lse) {
    if (part.plan != nullptr) {
      attention_planned(*part.plan, block_q, part.k, part.v, out, part_lse, rank.options);
    } else {
      attention_dense(block_q, part.k, part.v, out, part_lse,
                      with_causal(rank.options, part.causal));
    }
  };
  if (parts.size() == 1) {
    attend(parts[0], block_out, lse);
    return;
  }
  const TensorView part_outs = rank.workspace.tensor(
      name + "_parts", rank.q.dtype, {kMaxBlockParts, block.len, rank.q_heads, rank.head_dim},
      rank.q.device);
  const TensorView part_lses =
      rank.workspace.tensor(name + "_part_lses", DType::kFloat32,
                            {kMaxBlockParts, rank.q_heads, block.len}, rank.q.device);
  std::vector<TensorView> outs;
  std::vector<TensorView> lses;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const auto index = static_cast<int64_t>(p);
    outs.push_back(sequence_view(static_cast<std::byte*>(part_outs.data) +
                                     index * block.len * rank.q_heads * rank.head_dim *
                                         static_cast<int64_t>(dtype_size(rank.q.dtype)),
                                 rank.q.dtype, block.len, rank.q_heads, rank.head_dim,
                                 rank.q.device));
    lses.push_back(lse_view(static_cast<float*>(part_lses.data) + index * rank.q_heads * block.len,
                            rank.q_heads, block.len, rank.q.device));
    attend(parts[p], outs.back(), lses.back());
  }
  merge_partials(outs, lses, block_out, lse, rank.options);
}

}  // namespace

void approximate_attention(const DistConfig& config, const SequenceSplit& split,
                           Communicator& communicator, const TensorView& q, const TensorView& k,
                           const TensorView& v, const TensorView& out, const TensorView& lse,
                           const AttentionOptions& options, Workspace::Impl& workspace) {
  Rank rank{config, split, communicator, q,  k,      v, out, lse, options, workspace, 0, 0,
            0,      0,     {},           {}, nullptr};
  rank.rank = communicator.rank();
  rank.q_heads = q.shape[2];
  rank.kv_heads = k.shape[2];
  rank.head_dim = q.shape[3];
  rank.layout = local_layout(split, rank.rank);
  int64_t passing_rows = 0;
  for (const VirtualHost& host : split.hosts) {
    rank.passing_offset.push_back(passing_rows);
    passing_rows += host.passing;
  }
  rank.passing = workspace.bytes("passing", passing_rows * passing_row_bytes(rank), q.device);
  const bool overlap = config.scheme == Scheme::kSpava;
  const std::size_t local_blocks = split.rank_hosts[static_cast<std::size_t>(rank.rank)].size();

  // Phases are marked for a tracer after the waits that precede them: a gap between two marked
  // phases on the compute stream is time it waited for communication.
  const auto block_phase = [](const char* what, std::size_t slot) {
    return std::string(what) + " " + std::to_string(slot + 1);
  };
  std::vector<Communicator::Ticket> passing_tickets;
  if (passing_rows > 0) {
    for (std::size_t slot = 0; slot < local_blocks; ++slot) {
      {
        const TracedPhase phase(communicator, block_phase("select block", slot), options.stream);
        select_block(rank, slot);
      }
      passing_tickets.push_back(gather_passing(rank, slot));
      if (!overlap) communicator.wait(passing_tickets.back(), options.stream);
    }
  }
  const QueryBuffer buffer = query_buffer(rank);
  Communicator::Ticket query_ticket = 0;
  {
    const TracedPhase phase(communicator, "query attention", options.stream);
    query_ticket = query_attention(rank, buffer);
  }
  if (!overlap) communicator.wait(query_ticket, options.stream);
  {
    const TracedPhase phase(communicator, "anchor attention", options.stream);
    anchor_attention(rank);
  }
  for (std::size_t slot = 0; slot < local_blocks; ++slot) {
    // A block reads hosts gathered by this and earlier slots (Spava's block 2 reads both).
    if (slot < passing_tickets.size()) communicator.wait(passing_tickets[slot], options.stream);
    const TracedPhase phase(communicator, block_phase("block", slot) + " attention",
                            options.stream);
    block_attention(rank, slot);
  }
  communicator.wait(query_ticket, options.stream);
  const TracedPhase phase(communicator, "query merge", options.stream);
  merge_query(rank, buffer);
}

}  // namespace mmsparse::dist::detail
