// Exact ZigZag ring attention. The sequence is cut into 2W chunks; rank r holds [chunk r | chunk
// 2W-1-r]. In step s the rank holds the K/V of rank src = r - s (mod W), and passes them on to r+1
// while it computes (double-buffered):
//   s = 0:    its own rows over its own keys, causal (the local concatenation gives the right
//   mask); src < r:  all its rows over chunk src (every key precedes them), non-causal; src > r:
//   only its second chunk over both received chunks (both precede it), non-causal.
// Every step costs about chunk x 2 chunks. The partials are merged once at the end (fp32 inside the
// merge), one rounding of the result.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/approximate.h"
#include "dist/views.h"
#include "mmsparse/status.h"

namespace mmsparse::dist::detail {
namespace {

void check_contiguous(const char* argument, const TensorView& view) {
  if (!view.is_contiguous()) {
    throw_invalid_argument(argument,
                           "contiguous [1, local_len, kv_heads, head_dim] for zigzag-ring "
                           "(its K/V are sent as they are)",
                           view.shape_string() + " strided");
  }
}

struct Chunks {
  int64_t first = 0;
  int64_t second = 0;
  int64_t total() const { return first + second; }
};

Chunks chunks_of(const SequenceSplit& split, int rank) {
  const std::vector<int>& hosts = split.rank_hosts[static_cast<std::size_t>(rank)];
  return {split.hosts[static_cast<std::size_t>(hosts[0])].len,
          split.hosts[static_cast<std::size_t>(hosts[1])].len};
}

}  // namespace

void ring_attention(const SequenceSplit& split, Communicator& communicator, const TensorView& q,
                    const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const AttentionOptions& options,
                    Workspace::Impl& workspace) {
  check_contiguous("k", k);
  check_contiguous("v", v);
  const int world = split.world;
  const int rank = communicator.rank();
  const Chunks local = chunks_of(split, rank);
  const int64_t q_heads = q.shape[2];
  const int64_t kv_heads = k.shape[2];
  const int64_t head_dim = q.shape[3];
  const int64_t row_bytes = kv_heads * head_dim * static_cast<int64_t>(dtype_size(k.dtype));
  int64_t max_rows = 0;
  for (int r = 0; r < world; ++r) max_rows = std::max(max_rows, chunks_of(split, r).total());

  // One partial per step over all local rows (half-q steps fill only the second chunk's rows).
  const TensorView part_outs =
      workspace.tensor("ring_parts", q.dtype, {world, local.total(), q_heads, head_dim}, q.device);
  const TensorView part_lses = workspace.tensor("ring_part_lses", DType::kFloat32,
                                                {world, q_heads, local.total()}, q.device);
  const auto part_out = [&](int step) {
    return sequence_view(
        static_cast<std::byte*>(part_outs.data) +
            step * local.total() * q_heads * head_dim * static_cast<int64_t>(dtype_size(q.dtype)),
        q.dtype, local.total(), q_heads, head_dim, q.device);
  };
  const auto part_lse = [&](int step) {
    return lse_view(static_cast<float*>(part_lses.data) + step * q_heads * local.total(), q_heads,
                    local.total(), q.device);
  };
  void* buffers[2][2] = {{workspace.bytes("ring_k0", max_rows * row_bytes, k.device),
                          workspace.bytes("ring_v0", max_rows * row_bytes, k.device)},
                         {workspace.bytes("ring_k1", max_rows * row_bytes, k.device),
                          workspace.bytes("ring_v1", max_rows * row_bytes, k.device)}};

  const void* current_k = k.data;
  const void* current_v = v.data;
  const int next = (rank + 1) % world;
  const int previous = (rank + world - 1) % world;
  AttentionOptions non_causal = options;
  non_causal.causal = false;
  for (int step = 0; step < world; ++step) {
    const int source = (rank - step + world) % world;
    const Chunks held = chunks_of(split, source);
    std::vector<Communicator::Ticket> tickets;
    void* const* receive = buffers[step % 2];
    if (step + 1 < world) {
      const Chunks incoming = chunks_of(split, (source + world - 1) % world);
      tickets.push_back(communicator.send_recv(current_k, held.total() * row_bytes, next,
                                               receive[0], incoming.total() * row_bytes, previous,
                                               options.stream));
      tickets.push_back(communicator.send_recv(current_v, held.total() * row_bytes, next,
                                               receive[1], incoming.total() * row_bytes, previous,
                                               options.stream));
    }
    const TensorView held_k = sequence_view(const_cast<void*>(current_k), k.dtype, held.total(),
                                            kv_heads, head_dim, k.device);
    const TensorView held_v = sequence_view(const_cast<void*>(current_v), v.dtype, held.total(),
                                            kv_heads, head_dim, v.device);
    std::optional<TracedPhase> phase;
    phase.emplace(communicator, "step " + std::to_string(step) + " attention", options.stream);
    if (step == 0) {
      AttentionOptions causal = options;
      causal.causal = true;
      attention_dense(q, k, v, part_out(0), part_lse(0), causal);
    } else if (source < rank) {
      attention_dense(q, rows(held_k, 0, held.first), rows(held_v, 0, held.first), part_out(step),
                      part_lse(step), non_causal);
    } else {
      attention_dense(rows(q, local.first, local.second), held_k, held_v,
                      rows(part_out(step), local.first, local.second),
                      lse_rows(part_lse(step), local.first, local.second), non_causal);
    }
    phase.reset();  // the wait is not attention: a gap in the trace shows it
    for (Communicator::Ticket ticket : tickets) communicator.wait(ticket, options.stream);
    current_k = receive[0];
    current_v = receive[1];
  }

  // First chunk: step 0 and the steps from lower ranks; second chunk: every step.
  const TracedPhase phase(communicator, "merge", options.stream);
  std::vector<TensorView> outs, lses;
  for (int step = 0; step < world; ++step) {
    const int source = (rank - step + world) % world;
    if (step == 0 || source < rank) {
      outs.push_back(rows(part_out(step), 0, local.first));
      lses.push_back(lse_rows(part_lse(step), 0, local.first));
    }
  }
  const TensorView merged_lse =
      lse.data != nullptr
          ? lse
          : workspace.tensor("ring_lse", DType::kFloat32, {1, q_heads, local.total()}, q.device);
  merge_partials(outs, lses, rows(out, 0, local.first), lse_rows(merged_lse, 0, local.first),
                 options);
  outs.clear();
  lses.clear();
  for (int step = 0; step < world; ++step) {
    outs.push_back(rows(part_out(step), local.first, local.second));
    lses.push_back(lse_rows(part_lse(step), local.first, local.second));
  }
  merge_partials(outs, lses, rows(out, local.first, local.second),
                 lse_rows(merged_lse, local.first, local.second), options);
}

}  // namespace mmsparse::dist::detail
