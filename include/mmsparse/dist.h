#pragma once
// Sequence-parallel attention across ranks (GPUs, or threads for tests): Spava (zigzag virtual
// hosts, essential-KV passing, exact query attention), its APB-style and StarAttention relatives,
// and exact ZigZag ring attention. Every rank's attention runs on the engine (attention_dense /
// attention_planned / merge_partials); communication goes through a Communicator, so the
// algorithm never names NCCL. docs/dist.md explains the split and the choices.
//
// Shapes: the global sequence is [context | query]; each rank holds a local sequence of its own
// (local_layout) as q, k, v [1, local_len, heads, head_dim] on its device, and writes out
// [1, local_len, q_heads, head_dim].

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mmsparse/attention.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tensor.h"

namespace mmsparse::dist {

enum class Scheme {
  kSpava,       // 2W virtual hosts in zigzag, anchor, passing blocks, overlapped communication
  kApb,         // one host per rank in order, anchor, passing blocks, no overlap
  kStar,        // one host per rank, anchor = the first block, no context communication
  kZigzagRing,  // exact ring attention over 2W zigzag chunks
};
std::string_view scheme_name(Scheme scheme);  // "spava", "apb", "star", "zigzag-ring"
Scheme scheme_from_name(std::string_view name, const std::string& argument);

inline constexpr int64_t kDefaultTile = 128;
inline constexpr int64_t kUseDefault = -1;

struct DistConfig {
  Scheme scheme = Scheme::kSpava;
  // Anchor length; kUseDefault: context/64 rounded up to `tile` (Spava, APB), the first block of
  // context/W rounded up to `tile` (Star). Clipped so that every virtual host keeps a token.
  int64_t anchor_len = kUseDefault;
  // Essential KVs each virtual host passes on, per KV head; kUseDefault: context/128 (Spava),
  // context/64 (APB; the paper's setting, equal compute with half the hosts); Star passes none.
  // Clipped to each host's block length, so a value >= every block passes whole blocks (exact).
  int64_t passing_len = kUseDefault;
  int64_t tile = kDefaultTile;  // alignment of the anchor and of block boundaries (kernel tile)
  int64_t pool_width = 5;       // max-pool width over selection scores (odd)
  // Sparse attention inside each rank: a pattern spec (patterns.h) for each block's own keys (a
  // square causal plan, built per rank for its block's shape; dynamic patterns estimate from the
  // block's q and k, on the GPU for CUDA tensors). Anchor and passing keys stay dense. Empty:
  // dense.
  std::string local_pattern;
};

// One virtual host: a contiguous block of context tokens at global positions [begin, begin + len).
struct VirtualHost {
  int64_t begin = 0;
  int64_t len = 0;
  int64_t passing = 0;  // essential KVs it passes (per KV head), <= len
};

// The context split, identical on every rank.
struct SequenceSplit {
  Scheme scheme = Scheme::kSpava;
  int world = 1;
  int64_t context_len = 0;  // anchor + context blocks
  int64_t query_len = 0;
  int64_t anchor_len = 0;
  std::vector<VirtualHost> hosts;            // in sequence order (ring: the 2W chunks)
  std::vector<std::vector<int>> rank_hosts;  // hosts of each rank, in local order
  int query_keys_rank = 0;                   // the rank whose query attention holds the query keys
  int64_t total_len() const { return context_len + query_len; }
};

// Splits `context_len` context tokens followed by `query_len` query tokens over `world` ranks.
// Throws kInvalidArgument naming the argument for lengths, world sizes or configs that cannot be
// split (e.g. fewer context tokens after the anchor than virtual hosts).
SequenceSplit split_sequence(const DistConfig& config, int64_t context_len, int64_t query_len,
                             int world);

// A rank's local sequence: contiguous segments of the global sequence, in local order.
// Spava / APB / Star: [anchor | its hosts' blocks | query]; ring: [chunk r | chunk 2W-1-r].
struct Segment {
  int64_t global_begin = 0;
  int64_t local_begin = 0;
  int64_t len = 0;
};
std::vector<Segment> local_layout(const SequenceSplit& split, int rank);
int64_t local_length(const SequenceSplit& split, int rank);
// Global position of every local row (positions are kept: RoPE and masks use them).
std::vector<int64_t> local_positions(const SequenceSplit& split, int rank);

// Copies a rank's rows out of a global host tensor [1, total_len, heads, dim] into a local host
// tensor [1, local_len, heads, dim], and back (scatter writes only the rows this rank owns in the
// result: its blocks, plus the anchor and query rows when `with_shared_rows`).
void gather_local(const SequenceSplit& split, int rank, const TensorView& global,
                  const TensorView& local);
void scatter_local(const SequenceSplit& split, int rank, const TensorView& local,
                   const TensorView& global, bool with_shared_rows);

// --- Communication ------------------------------------------------------------------------------

// A destination range of an all-gather: rank i's bytes land at recv + offset, bytes long.
struct GatherSlot {
  int64_t offset = 0;
  int64_t bytes = 0;
};

// A timeline hook: the algorithm marks the beginning and the end of each phase (query attention,
// block 1, block 2, merge, ...) on the stream it enqueues it on, and a transport marks each
// operation on the stream the operation runs on. `stream` is a cudaStream_t on CUDA, null on the
// CPU; a tracer records a device event there (mmsparse-dist-bench --trace), so marking costs no
// host synchronisation. Marks of one phase nest as begin ... end on one stream.
class PhaseTracer {
 public:
  virtual ~PhaseTracer() = default;
  virtual void mark(std::string_view phase, bool begin, void* stream) = 0;
};

// What the algorithm needs from a transport. Buffers live on the communicator's device. Operations
// are ordered after the work enqueued on `stream` so far (a cudaStream_t on CUDA, ignored on the
// CPU) and return a ticket; work enqueued on `stream` after wait(ticket, stream) sees the data.
// Every rank must issue the same operations in the same order. Faults (a dead peer, mismatched
// sizes, a timeout) end the operation, or the next synchronize(), with Error(kBackendError)
// naming what went wrong, on every rank, within the communicator's timeout.
class Communicator {
 public:
  using Ticket = int64_t;
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Device device() const = 0;
  // Every rank sends `send_bytes` (== slots[rank].bytes); every rank receives all slots.
  virtual Ticket all_gather(const void* send, int64_t send_bytes, void* recv,
                            std::span<const GatherSlot> slots, void* stream) = 0;
  // Sends to `to` and receives from `from` in one step (a ring shift).
  virtual Ticket send_recv(const void* send, int64_t send_bytes, int to, void* recv,
                           int64_t recv_bytes, int from, void* stream) = 0;
  virtual void wait(Ticket ticket, void* stream) = 0;
  // Waits for `stream` and every operation issued, polling for faults; throws on one.
  virtual void synchronize(void* stream) = 0;
  virtual void barrier() = 0;
  // Ends every pending and future operation on every rank with an error carrying `reason`.
  virtual void abort(const std::string& reason) = 0;

  // The timeline hook of this rank (null: none, the default). Not owned.
  void set_tracer(PhaseTracer* tracer) { tracer_ = tracer; }
  PhaseTracer* tracer() const { return tracer_; }

 private:
  PhaseTracer* tracer_ = nullptr;
};

// Marks `phase` on `stream` for the communicator's tracer while it lives (begin, then end).
class TracedPhase {
 public:
  TracedPhase(const Communicator& communicator, std::string_view phase, void* stream)
      : tracer_(communicator.tracer()), phase_(phase), stream_(stream) {
    if (tracer_ != nullptr) tracer_->mark(phase_, true, stream_);
  }
  ~TracedPhase() {
    if (tracer_ != nullptr) tracer_->mark(phase_, false, stream_);
  }
  TracedPhase(const TracedPhase&) = delete;
  TracedPhase& operator=(const TracedPhase&) = delete;

 private:
  PhaseTracer* tracer_;
  std::string phase_;
  void* stream_;
};

// Runs `body(communicator)` on `world` threads sharing memory: the in-process transport the tests
// use. On `device` (default: the host) the ranks share it: one GPU runs W virtual ranks, taking
// turns between operations, which copy through host memory (a test transport). The first exception
// of any rank aborts the others and is rethrown after every thread has ended.
void run_in_process(int world, const std::function<void(Communicator&)>& body,
                    double timeout_seconds = 60.0, Device device = {});

// Checks that every rank runs the same config and shapes (one all-gather of a fingerprint);
// throws kInvalidArgument naming the first rank that differs, on every rank.
void check_same_config(Communicator& communicator, const DistConfig& config,
                       const SequenceSplit& split, const TensorView& q, const TensorView& k);

// --- Attention ----------------------------------------------------------------------------------

// Scratch a rank reuses across calls (passing blocks, partial results, ring buffers) on its device.
// Keep one per rank: without one, every call allocates and frees its scratch (on a GPU a free waits
// for the device).
class Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(Workspace&&) noexcept;
  Workspace& operator=(Workspace&&) noexcept;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// One rank's attention for `split.scheme`. q, k, v, out: [1, local_len, heads, head_dim] on the
// communicator's device (k, v contiguous in the last dimension). Every rank returns its local
// rows of the global result: anchor and query rows are the same on every rank. `lse`, when it has
// data: [1, q_heads, local_len] fp32 on the same device, receives each row's log-sum-exp over the
// keys the scheme gave it (recall against dense: exp(lse - lse_dense)); without, it is not kept.
void attention(const DistConfig& config, const SequenceSplit& split, Communicator& communicator,
               const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionOptions& options = {}, Workspace* workspace = nullptr,
               const TensorView& lse = {});

// --- Essential KVs and the single-process reference ---------------------------------------------

// The positions (relative to the block) each KV head of a block passes on, ascending:
// [kv_heads][count]. score = K · mean(Q_query over query rows and the GQA group), max-pooled over
// `pool_width` neighbours inside the block, top-`count` (ties: the earlier position).
// query_q [1, query_len, q_heads, dim], block_k [1, len, kv_heads, dim], host tensors.
std::vector<std::vector<int64_t>> select_essential(const TensorView& query_q,
                                                   const TensorView& block_k, int64_t count,
                                                   int64_t pool_width);

// The approximation the split describes, computed on one process by the masked CPU oracle over the
// global tensors (q [1, total_len, q_heads, dim], k, v [1, total_len, kv_heads, dim], host): each
// block row attends passing KVs of earlier hosts (selected by select_essential from the global
// tensors), the anchor and its block causally; anchor and query rows attend causally. Small
// lengths only (the mask is total_len^2 per head). Ring and exactness settings give dense causal.
void reference_attention(const DistConfig& config, const SequenceSplit& split, const TensorView& q,
                         const TensorView& k, const TensorView& v, const TensorView& out,
                         const TensorView& lse, const AttentionOptions& options = {});

}  // namespace mmsparse::dist
