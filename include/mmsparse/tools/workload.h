#pragma once
// Synthetic VLM-like workloads (they are synthetic, and every figure quoted on them says so).
//
// A workload is a modality layout (text, images with start/end markers, video as frames × h × w
// tokens) and a deterministic generator of Q, K, V whose attention behaves like a long-context VLM's:
// Qwen2-VL-style 3D rotary positions (M-RoPE), a first-token sink, per-image sinks, content that is
// coherent across frames (so the same spatial position in other frames attends: grid heads), and
// heads of several behaviours. It is calibrated so that, at 128K, keeping the true top 5.78% of
// attention weights recalls 95% on average over heads, with about half the heads under 2%
// (MMInference §2, Fig. 2b). Every token's vectors are a pure function of (seed, head, position),
// so any rows can be generated without the whole tensor.

// The DiT presets (dit-*) use the same generator for a video DiT's full, non-causal attention over
// frames × h × w tokens (3D-local, cross-frame and global heads); they are not calibrated.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

enum class HeadBehaviour : uint8_t {
  kLocal,     // local window and slash lines (relative position)
  kGrid,      // same spatial position in other frames (content coherent across frames)
  kVertical,  // a few retrieval keys every query reads (sinks, image starts, needles)
  kDense,     // spread, hard to sparsify
};
std::string_view head_behaviour_name(HeadBehaviour behaviour);
// The behaviour of a name head_behaviour_name gives; throws Error(kInvalidArgument) naming
// `argument` and the four names otherwise.
HeadBehaviour head_behaviour_from_name(std::string_view name, const std::string& argument);

struct WorkloadSpec {
  std::string preset = "video-qwen2.5vl-128k";
  int64_t seq_len = 0;   // 0: the preset's length; otherwise the layout is scaled to exactly this
  int64_t q_heads = 0;   // 0: preset default (28)
  int64_t kv_heads = 0;  // 0: preset default (4)
  int64_t head_dim = 0;  // 0: preset default (128)
  uint64_t seed = 0;
  int64_t needles = 0;   // retrieval keys planted in the media that the final text queries attend to
  // Every query head with this behaviour (their sparsity still spread by rank, as within a
  // behaviour of the mix), for studies of one head type such as grid vs vertical-slash on grid
  // heads; default: the preset's mix of 11 local, 7 grid, 6 vertical and 4 dense heads.
  std::optional<HeadBehaviour> head_behaviour;
};

struct PresetInfo {
  std::string name;
  std::string description;
  int64_t seq_len;
  // Needles the CLI plants when --needles is not given: presets modelled on needle benchmarks
  // (mixed-interleaved, MM-NIAH-style) are retrieval tasks; WorkloadSpec::needles stays explicit.
  int64_t default_needles = 0;
  // false: every query attends every key (video DiTs' full attention); the CLI then compares with
  // non-causal dense attention and counts density over all query × key pairs.
  bool causal = true;
  // Query and KV heads when WorkloadSpec leaves them 0; 0 here: the generator's 28 / 4.
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
};
const std::vector<PresetInfo>& workload_presets();

struct Needle {
  int64_t key = 0;           // position of the planted key
  int64_t first_query = 0;   // queries [first_query, seq_len) are meant to attend to it
};

class Workload {
 public:
  static Workload create(const WorkloadSpec& spec);  // throws naming unknown presets / bad sizes

  const WorkloadSpec& spec() const { return spec_; }  // with defaults resolved
  const ModalityLayout& layout() const { return layout_; }
  // The preset's attention: causal (VLM prefill) or full (video DiTs), PresetInfo::causal.
  bool causal() const { return causal_; }
  int64_t seq_len() const { return layout_.length(); }
  HeadBehaviour behaviour(int64_t q_head) const { return behaviours_.at(q_head); }
  const std::vector<Needle>& needles() const { return needles_; }
  // The final question is rows [question_begin(), seq_len()): the queries that read the needles
  // (seq_len() when the layout ends in media).
  int64_t question_begin() const { return question_begin_; }

  // One KV head's keys and values at all positions: k, v [seq_len, head_dim] fp32.
  void generate_kv(int64_t kv_head, float* k, float* v) const;
  // One query head's rows at `positions`: q [positions.size(), head_dim] fp32.
  void generate_q(int64_t q_head, const std::vector<int64_t>& positions, float* q) const;

  // The whole problem as [1, seq_len, heads, head_dim] tensors of `dtype`.
  struct Tensors {
    Tensor q, k, v;
  };
  Tensors materialize(DType dtype) const;
  // The rows at `positions` (global, any order) of what materialize() returns, bit for bit, as
  // [1, positions.size(), heads, head_dim] tensors of `dtype`, without generating the other rows:
  // a rank of a sequence-parallel run generates only its own. On `threads` threads (0: all).
  Tensors materialize_rows(std::span<const int64_t> positions, DType dtype, int threads = 0) const;

 private:
  WorkloadSpec spec_;
  ModalityLayout layout_;
  std::vector<HeadBehaviour> behaviours_;
  std::vector<Needle> needles_;
  int64_t question_begin_ = 0;
  bool causal_ = true;
  // M-RoPE id of each layout segment's first token (text) or frame-0 origin (vision).
  std::vector<int64_t> segment_rope_start_;
  // cos/sin of rope ids split as id = coarse · kRopeFineSpan + fine, per rotary pair, so a token's
  // rotation costs a few multiplies instead of libm calls: [ids, pairs] each.
  std::vector<float> rope_fine_cos_, rope_fine_sin_, rope_coarse_cos_, rope_coarse_sin_;
  friend class WorkloadGenerator;
};

}  // namespace mmsparse
