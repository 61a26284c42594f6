#pragma once
// Host interface of the CUDA attention engine (sm_90a). Plain C++: no CUDA types appear here, so
// src/core can call it from ordinary .cpp files. Streams travel as void* (a cudaStream_t; nullptr
// is the legacy default stream); device memory travels as raw pointers with strides in elements.
//
//   mmsparse::cuda::DevicePlan device_plan(plan, stream);      // upload once, reuse across calls
//   mmsparse::cuda::attention_planned(device_plan, args);      // O and LSE of the plan's pairs
//
// Every function reports bad input by throwing mmsparse::Error (kInvalidArgument, kUnsupported for
// valid requests this engine cannot serve, kBackendError when a CUDA call fails).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mmsparse/attention.h"
#include "mmsparse/layout.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse::cuda {

// What the attention kernels of this build serve. Other requests throw kUnsupported.
inline constexpr int64_t kMmaSyncTileRows = 64;  // mma.sync kernel: 4 warps × 16 query rows
inline constexpr int64_t kMaxTileRows = 128;     // wgmma kernel: 2 warpgroups × 64 query rows
inline constexpr int64_t kWgmmaHeadDim = 128;    // the wgmma kernel's head_dim for every plan
// The wgmma kernel's other head_dim, in chunks of 64 keys (the budget in sm90/traits.cuh) and two
// consumer warpgroups whatever the tiles; no other kernel serves it (wgmma_serves).
inline constexpr int64_t kWgmmaWideHeadDim = 256;
// float16 / bfloat16, head_dim 64, 128 or 256
bool supports_attention(DType dtype, int64_t head_dim);

// The kernel that runs a call. kAuto takes the wgmma kernel (sm_90a: tensor copies, warp
// specialisation) where it serves the plan (see wgmma_serves) and the mma.sync kernel elsewhere;
// the others force one kernel and throw kUnsupported where it cannot serve the call.
enum class AttentionKernel { kAuto, kMmaSync, kWgmma };

// How the wgmma kernel's tiles become CTAs. kOneTilePerCta: one CTA per (tile, batch element),
// which the hardware hands to the SMs in the plan's heaviest-first launch order. kPersistent: at
// most one CTA per SM, each taking that order's items from a dynamic queue (cuda/attention/sm90/
// persistent.cuh), so that a CTA's launch and set-up are paid once and the next tile's first K/V
// chunks load while the current one drains, which may pay where tiles read few key chunks
// (BlindSight's sparse templates at 36K tokens: docs/blindsight.md). It is compiled for plans
// without lattice records (with or without gathered keys), at head_dim 128 with tiles of more than
// 64 rows, on the wgmma kernel; elsewhere kPersistent throws kUnsupported. kAuto: persistent
// CTAs where they are compiled, the plan's tiles list few key chunks on average (DevicePlan::
// listed_keys; the bound and its measurements are in cuda/attention/engine.cu) and there are more
// items than SMs; one tile per CTA elsewhere, and for plans whose keys are not counted. For A/B
// measurements in one build, the environment variable MMSPARSE_CTA_SCHEDULE overrides kAuto:
// "tile" runs one tile per CTA everywhere, "persistent" persistent CTAs wherever they are
// compiled (one tile per CTA elsewhere).
enum class CtaSchedule { kAuto, kOneTilePerCta, kPersistent };

using Strides4 = std::array<int64_t, 4>;  // in elements, like DLPack
using Strides3 = std::array<int64_t, 3>;

// One attention call on device memory. The last dimension of q, k, v and out must be contiguous,
// their base pointers 16-byte aligned and their other strides multiples of 8 elements (rows are
// moved as 16-byte vectors).
struct AttentionArgs {
  DType dtype = DType::kBFloat16;  // of q, k, v and out
  int64_t batch = 0;
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads =
      0;  // q_heads % kv_heads == 0; query head h reads KV head h / (q_heads / kv_heads)
  int64_t head_dim = 0;
  float scale = 0.0f;  // softmax scale, already resolved (never 0 here)

  const void* q = nullptr;  // [batch, q_len, q_heads, head_dim]
  Strides4 q_strides{};
  const void* k = nullptr;  // [batch, kv_len, kv_heads, head_dim]
  Strides4 k_strides{};
  const void* v = nullptr;  // [batch, kv_len, kv_heads, head_dim]
  Strides4 v_strides{};
  void* out = nullptr;  // [batch, q_len, q_heads, head_dim]
  Strides4 out_strides{};
  float* lse = nullptr;  // [batch, q_heads, q_len], natural log; -inf for rows with no keys
  Strides3 lse_strides{};

  void* stream = nullptr;  // cudaStream_t
  AttentionKernel kernel = AttentionKernel::kAuto;
  CtaSchedule schedule = CtaSchedule::kAuto;  // of the wgmma kernel
  // out and lse already hold a result over keys disjoint from the plan's (an earlier pass): every
  // row the plan's tiles hold is merged with it, as merge_partials would, and rows outside them
  // keep it.
  bool accumulate = false;
};

// The arguments of validated views (see describe_attention / check_outputs in attention.h).
AttentionArgs make_attention_args(const AttentionProblem& problem, const TensorView& q,
                                  const TensorView& k, const TensorView& v, const TensorView& out,
                                  const TensorView& lse, void* stream);

// DevicePlanLayout::shared_runs of a plan whose heads each have an order of their own.
inline constexpr int64_t kPerHeadRuns = -1;

// Byte offsets of the plan's arrays inside a DevicePlan's single device buffer.
struct DevicePlanLayout {
  std::size_t head_run_offsets = 0;  // int64 [head_slots + 1] into runs
  std::size_t runs = 0;              // run records [runs] (runs of count 0 dropped)
  std::size_t tiles = 0;             // tile records [tiles], each with its head slot
  std::size_t schedule = 0;          // int32 [tiles]: tile indices in launch order, heaviest first
  std::size_t masks = 0;             // mask records [masks]
  std::size_t spans = 0;             // key spans [spans]
  std::size_t columns = 0;           // int32 [columns]
  std::size_t token_info = 0;        // int32 [kv_len] packed media and modality; when masks need it
  std::size_t bytes = 0;             // total size of the buffer
  bool has_token_info = false;
  // The period of the spans section's lattice records (plan_view.cuh), which the wgmma kernel
  // copies through views of that period; 0 without any (device builders make none).
  int32_t lattice_step = 0;
  // Whether any tile gathers keys (columns or strided spans), which the wgmma kernel's whole
  // producer warpgroup loads; plans without run an instantiation of tensor copies only
  // (ChunkSources). Builders whose counts live on the device say true.
  bool gathers = true;
  // Every head slot's query order is runs [0, shared_runs) (0: the identity order, no runs), so a
  // kernel finds a head's runs without loading its run offsets; kPerHeadRuns where the heads'
  // orders differ or live on the device (builders with runs).
  int64_t shared_runs = kPerHeadRuns;
  // Only an upload for attention (RecordForm::kForAttention) writes this: per CTA in launch order
  // its tile record, tiles[schedule[i]], with the tile's first key range (plan_view.cuh), so that
  // a CTA starts its query and key copies after one load instead of two or three dependent ones.
  bool has_launch_records = false;
  std::size_t launch_records = 0;  // launch records [tiles], when has_launch_records
  // Only an upload of a plan with key orders (Plan::key_orders) writes these: int32 [spans]
  // span_shifts (plan_view.cuh's kSpanInPlace), and int32 [key_order_rows] the orders' original
  // keys, order o at rows [o * key_order_slots, (o + 1) * key_order_slots), kPaddingKey for
  // padding and past an order's end. The engine copies K and V into that layout per call.
  bool has_key_orders = false;
  std::size_t span_shifts = 0;
  std::size_t key_orders = 0;
  int64_t key_order_slots = 0;
  int64_t key_order_rows = 0;
};

// How many records each section of a buffer built on the device holds.
struct PlanSectionCounts {
  int64_t head_slots = 0;
  int64_t runs = 0;
  int64_t tiles = 0;  // and as many schedule entries
  int64_t masks = 0;
  int64_t spans = 0;
  int64_t columns = 0;
  // kv_len where a mask reads token arrays (DevicePlanLayout::token_info), else 0.
  int64_t token_info = 0;
};
// The layout of those sections in the upload's order, each on a section boundary.
DevicePlanLayout plan_layout(const PlanSectionCounts& counts);
// Writes the packed token array of `layout` (DevicePlanLayout::token_info, kv_len entries; the
// upload's packing) at `token_info` in device memory, asynchronously on `stream` (cudaStream_t).
void write_token_info(const ModalityLayout& layout, int32_t* token_info, void* stream);

// The records an upload writes, each form adding to the one before.
enum class RecordForm {
  // Exactly as the device builders write them (tests compare the two record for record): every
  // strided span its own record.
  kAsDeviceBuilders,
  // Groups of strided spans merged into lattice records (plan_view.cuh), which the wgmma kernel
  // copies as tensor boxes. A per-head config's host section is uploaded so.
  kLattices,
  // And what only the attention kernels read: the tiles in launch order with their first key
  // ranges (DevicePlanLayout::launch_records). upload_passes uploads so.
  kForAttention,
};

// A host Plan uploaded to the device: validated once, its arrays packed into one stream-ordered
// allocation (mmsparse's pool, device_pool.h) together with derived arrays the kernels need (run
// prefix counts, per-tile head slots, a heaviest-first launch order, packed token arrays).
// Reusable across calls on the upload stream; using it on another stream needs that stream to
// wait for the upload. Freed in stream order on the upload stream when destroyed, so that stream
// must outlive the plan (or call release() first).
class DevicePlan {
 public:
  DevicePlan() = default;
  DevicePlan(const Plan& plan, void* stream);  // a plan of one pass; stream: cudaStream_t
  // Pass `pass` of `plan` (the whole plan is validated), its records in `form`.
  DevicePlan(const Plan& plan, int64_t pass, void* stream, RecordForm form = RecordForm::kLattices);
  // Every pass of `plan`, validated once for all of them (cuda/attention/passes.cu).
  friend std::vector<DevicePlan> upload_passes(const Plan& plan, void* stream);
  ~DevicePlan();
  DevicePlan(DevicePlan&& other) noexcept;
  DevicePlan& operator=(DevicePlan&& other) noexcept;
  DevicePlan(const DevicePlan&) = delete;
  DevicePlan& operator=(const DevicePlan&) = delete;

  // Frees the buffer in stream order on `stream` (cudaStream_t) now.
  void release(void* stream);

  const PlanShape& shape() const { return shape_; }
  int64_t num_tiles() const { return num_tiles_; }
  // Gathered keys over all tiles; for a plan estimated on the device (index_builders.h), the
  // capacity of its columns section, an upper bound (the count lives on the device).
  int64_t num_columns() const { return num_columns_; }
  // Every query row of every head slot lies in a tile, so the kernel writes every output row.
  bool covers_every_row() const { return covers_every_row_; }
  // The keys the tiles list (spans, strided spans, columns) summed over every tile, which with
  // num_tiles() gives the mean key chunks a tile reads, and the most one tile lists (the engine's
  // CTA schedule rule); kUnknownKeys where a device builder does not count them on the host.
  static constexpr int64_t kUnknownKeys = -1;
  int64_t listed_keys() const { return listed_keys_; }
  int64_t longest_tile_keys() const { return longest_tile_keys_; }
  const void* data() const { return buffer_; }  // device buffer described by layout()
  void* stream() const { return stream_; }      // cudaStream_t the buffer is ordered on
  const DevicePlanLayout& layout() const { return layout_; }

  // For device builders (the methods' *_device.cu, the per-head config assembly): a buffer of
  // `layout` allocated on `stream` (cudaStream_t) for kernels to fill instead of an upload, its
  // first `zeroed_bytes` zeroed (the identity order's run offsets and the padding between
  // sections, as an upload has them). `num_columns` may be a capacity (see num_columns()).
  // `listed_keys`, `longest_tile_keys`: see listed_keys().
  static DevicePlan for_builder(const PlanShape& shape, const DevicePlanLayout& layout,
                                int64_t num_tiles, int64_t num_columns, bool covers_every_row,
                                std::size_t zeroed_bytes, void* stream,
                                int64_t listed_keys = kUnknownKeys,
                                int64_t longest_tile_keys = kUnknownKeys) {
    return DevicePlan(shape, layout, num_tiles, num_columns, covers_every_row, zeroed_bytes, stream,
                      listed_keys, longest_tile_keys);
  }
  // The buffer a device builder fills, ordered on the stream it was allocated on.
  void* builder_data() { return buffer_; }

 private:
  // Pass `pass` of a plan the caller has validated.
  struct Validated {};
  DevicePlan(Validated, const Plan& whole, int64_t pass, void* stream, RecordForm form);
  // Packs and uploads a validated plan of one pass (both constructors above).
  void upload(const Plan& plan, void* stream, RecordForm form);

  // The buffer of `for_builder`.
  DevicePlan(const PlanShape& shape, const DevicePlanLayout& layout, int64_t num_tiles,
             int64_t num_columns, bool covers_every_row, std::size_t zeroed_bytes, void* stream,
             int64_t listed_keys, int64_t longest_tile_keys);

  PlanShape shape_{};
  int64_t num_tiles_ = 0;
  int64_t num_columns_ = 0;
  bool covers_every_row_ = false;
  int64_t listed_keys_ = kUnknownKeys;
  int64_t longest_tile_keys_ = kUnknownKeys;
  DevicePlanLayout layout_{};
  void* buffer_ = nullptr;  // device memory, layout_.bytes long
  void* stream_ = nullptr;  // cudaStream_t it was allocated on
};

// Attention over exactly the pairs the plan covers (semantics of cpu::attention_planned). Rows in
// no tile get O = 0 and LSE = -inf (with args.accumulate they keep out's and lse's). The plan's
// shape must match the arguments (heads == q_heads, q_len, kv_len, batch 1 or equal).
// Asynchronous on args.stream.
void attention_planned(const DevicePlan& plan, const AttentionArgs& args);

// The CTA schedule attention_planned runs `plan` with under `args`, after MMSPARSE_CTA_SCHEDULE:
// kPersistent or kOneTilePerCta (also where the mma.sync kernel runs the call), assuming that the
// driver encodes the K/V views (else the mma.sync kernel runs it). Throws kUnsupported where
// args.schedule is kPersistent and persistent CTAs are not compiled for the call.
CtaSchedule resolved_cta_schedule(const DevicePlan& plan, const AttentionArgs& args);

// Uploads `plan` for this one call (freed in stream order afterwards) and runs it, every pass.
void attention_planned(const Plan& plan, const AttentionArgs& args);

// Every pass of `plan`, uploaded in order on `stream`.
std::vector<DevicePlan> upload_passes(const Plan& plan, void* stream);

// Attention over the passes of one plan (each DevicePlan one pass, all of one shape): pass 0 writes
// args.out and args.lse (or accumulates, as args says), every further pass accumulates into them
// (AttentionArgs::accumulate), which merges the passes. Asynchronous on args.stream.
void attention_passes(std::span<const DevicePlan> passes, const AttentionArgs& args);

// Whether the wgmma kernel serves the call: head_dim 128, tiles of at most kMaxTileRows rows (key
// spans and gathered columns alike), any positional mask, and masks that read tokens (same-media,
// modality pairs, bidirectional media) on plans without lattice records; head_dim 256
// (kWgmmaWideHeadDim) alike. Tiles of more than kMmaSyncTileRows rows and head_dim 256 run on no
// other kernel.
bool wgmma_serves(const DevicePlan& plan, const AttentionArgs& args);

// One partial (O, LSE) result for merge_partials.
struct MergePart {
  DType dtype = DType::kBFloat16;  // of out: float32, float16 or bfloat16
  const void* out = nullptr;       // [batch, q_len, heads, head_dim]
  Strides4 out_strides{};
  const float* lse = nullptr;  // [batch, heads, q_len]
  Strides3 lse_strides{};
};

// Combines partials over disjoint key sets: lse = log(sum exp(lse_i)), out = sum exp(lse_i - lse)
// out_i. Rows where every part has LSE = -inf get out = 0 and LSE = -inf. Any strides, any
// head_dim. `out` and `lse` may alias one of the parts. Asynchronous on `stream`.
struct MergeArgs {
  int64_t batch = 0;
  int64_t q_len = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  std::span<const MergePart> parts;
  DType dtype = DType::kBFloat16;  // of out
  void* out = nullptr;             // [batch, q_len, heads, head_dim]
  Strides4 out_strides{};
  float* lse = nullptr;  // [batch, heads, q_len]
  Strides3 lse_strides{};
  void* stream = nullptr;  // cudaStream_t
};
void merge_partials(const MergeArgs& args);

// Parts and arguments from validated views (see merge_partials in attention.h); `parts` must
// outlive the returned arguments.
std::vector<MergePart> make_merge_parts(std::span<const TensorView> outs,
                                        std::span<const TensorView> lses);
MergeArgs make_merge_args(std::span<const MergePart> parts, const TensorView& out,
                          const TensorView& lse, void* stream);

}  // namespace mmsparse::cuda
