#pragma once
// Offline modality-aware pattern search (MMInference §3.3, App. A Algorithm 4): for one layer's
// Q, K, V and its modality layout, choose each query head's PatternSpec from a kernel-aware search
// space (Table 3) under a cost budget (App. C.5), scoring candidates on the actual attention output
// (V included) of sampled query rows. docs/search.md describes the stages, the objective and what
// a per-head spec loses against the paper's per-modality patterns.
//
// Shapes (host views, any strides, bf16 / fp16 / fp32):
//   q [1, seq_len, q_heads, head_dim], k/v [1, seq_len, kv_heads, head_dim], q_heads % kv_heads == 0;
//   layout.length() == seq_len. One calibration sample: batch 1, prefill (q_len == kv_len).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mmsparse/attention.h"
#include "mmsparse/tools/io.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

// One head's q, k, v on one scope, prepared once for every candidate costed on them: a measured
// cost keeps device copies there, so that a candidate pays only for its own plan.
class CostInputs {
 public:
  virtual ~CostInputs() = default;
};

// What a candidate costs to run. prepare() gets the head's tokens of a scope, q [1, q_len, 1,
// head_dim], k/v [1, kv_len, 1, head_dim] host views (a measured cost runs on them; the views must
// outlive the result); cost() gets a plan with one head slot and those prepared inputs. Plans are
// built with tile_rows(head_dim) rows per query tile.
class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::unique_ptr<CostInputs> prepare(const TensorView& q, const TensorView& k,
                                              const TensorView& v) = 0;
  virtual double cost(const Plan& plan, const CostInputs& inputs) = 0;
  // The cost of a plan prepared on a device (SearchOptions::score_device builds candidates there):
  // a measured cost times it as it is; by default, cost(prepared.plan(), inputs), which needs the
  // host plan (plans prepared on the CPU have one).
  virtual double cost_prepared(const PreparedPlan& prepared, const CostInputs& inputs) {
    return cost(prepared.plan(), inputs);
  }
  // cost_prepared(), or a cheaper reading when it shows the cost is over `limit` (a budget): a
  // measured cost times one run first and returns it when it exceeds kQuickOverBudget × limit,
  // far beyond a timing's noise, so that candidates over the budget are not timed in full. The
  // result is over `limit` exactly when cost_prepared()'s would be (up to that noise).
  virtual double cost_prepared_within(const PreparedPlan& prepared, const CostInputs& inputs,
                                      double limit) {
    (void)limit;
    return cost_prepared(prepared, inputs);
  }
  static constexpr double kQuickOverBudget = 1.25;
  // The cost of building `spec`'s plan from the inputs' q and k (the index of a dynamic pattern:
  // estimate, selection, conversion), in the same unit; 0 for static patterns, whose plans depend
  // on the shape alone and are built once.
  virtual double index_cost(const PatternSpec& spec, const PlanShape& shape,
                            const ModalityLayout& layout, float scale,
                            const CostInputs& inputs) = 0;
  virtual bool measured() const = 0;        // false: modelled
  virtual std::string unit() const = 0;     // "ms", "key chunks"
  virtual std::string gpu() const = 0;      // the GPU measured on; empty when modelled
  virtual int64_t tile_rows(int64_t head_dim) const = 0;  // query tile height of costed plans
};

// Modelled cost, for machines without a GPU: the number of 128×128 key chunks the engine's Hopper
// kernel computes for the plan — per query tile of 128 rows, each span cut into chunks of at most
// 128 keys plus the gathered columns 128 at a time (src/cuda/attention/key_chunks.cuh walks the same
// sequence). It ignores chunk fill and gather cost: an estimate, always labelled "modelled". Its
// index cost is the estimate's chunks (last_q rows against every key); selection and conversion
// are not modelled.
std::unique_ptr<CostModel> make_modelled_cost();

// Measured cost: the median device time (ms) of attention_planned over the plan, prepared on
// `device` with prepare_plan, after `warmup` runs, on the head's q, k, v copied to the device (fp32
// timed as bf16: the engine runs 16-bit inputs). Its index cost is the median time (ms, host clock
// to the end of the build) of prepare_pattern from those device q and k; for a dynamic pattern
// the GPU does not build (docs/index_builders.md) one host build from the host q and k with its
// upload, as `mmsparse bench` would pay. Either is one head's build alone: in a layer, heads of one
// spec share launches, so this bounds the head's share from above. Needs a build with the CUDA
// engine and a visible GPU; otherwise throws Error(kUnsupported).
std::unique_ptr<CostModel> make_measured_cost(Device device, int warmup, int repeats);

// Where a spec's numbers were set (Table 2/3 values are for 128K tokens): scaled to `seq_len` the
// way `mmsparse bench` scales its defaults — A-shape / Tri-shape local windows and vertical-slash
// line budgets keep their fraction of the sequence, never below the lines vertical-slash always
// keeps nor 64 keys of window; sinks, grid strides and everything at >= 128K stay as they are.
// Scaled specs come back resolved; other specs come back unchanged.
PatternSpec scale_spec_to_length(const PatternSpec& spec, int64_t seq_len);

// The kernel-aware search space (Table 3), deduplicated, resolved (every parameter explicit):
//   grid: stride = tokens per frame of the layout's first video (when it has one) with
//         (hline, vline, slash) = 100, 010, 001, 011, 111, and stride 0 (online search) with
//         100, 010, 001, 110, 011, 111; max_stride 1024; local 0 when slash lines are on (the
//         diagonal is the slash line at distance 0, gathered cheaply), else 1 (the diagonal);
//   a-shape: sink 128, local 1024 / 2048 / 4096;
//   vertical-slash: (vertical, slash) = (1000, 1024) (1000, 2048) (2000, 2048) (1000, 3096)
//         (2000, 3096) (1000, 4096) (2000, 4096) (3500, 200) (1000, 2500).
// With `scale_to_length`, A-shape and vertical-slash go through scale_spec_to_length(seq_len);
// duplicates that scaling creates are dropped. Dense is not a candidate: it is the fallback.
std::vector<PatternSpec> search_space(const ModalityLayout& layout, int64_t seq_len,
                                      bool scale_to_length);

// Beyond the budget, for a layer-level recall target (SearchOptions::target_mean_recall; an
// mmsparse extension of Alg. 4): vertical-slash (boundary none) with 2, 4 and 8 times Table 3's
// widest line budgets (2000 vertical, 4096 slash), then dense; scaled like the space. A head with
// diffuse attention (oracle density tens of percent) finds nothing in the budget that recalls well.
std::vector<PatternSpec> recall_ladder(int64_t seq_len, bool scale_to_length);

// The budget: App. C.5 sets it to the FLOPs of 1K global and 4K local tokens of A-shape.
inline constexpr const char* kDefaultBudgetSpec = "a-shape:sink=1024,local=4096";


struct CandidateScore {
  PatternSpec spec;
  double recall = 0.0;        // mean over scored rows of exp(LSE_plan - LSE_dense)
  // Standard error of `recall` as an estimate of the mean over every row of the scope (stratified
  // sample; SearchOptions::sample_rows); 0 when every row is scored (score_device).
  double recall_se = 0.0;
  double output_error = 0.0;  // ||O_plan - O_dense|| / ||O_dense|| over scored rows
  double cost = 0.0;          // of its plan on the scored scope, in CostModel units
  // Of building its plan (CostModel::index_cost): charged where the search goes beyond the budget
  // (the "raise" stage and the heads it raises); 0 where it is not charged.
  double index_cost = 0.0;
};

// One stage's search on one scope of one head.
struct ScopeSearch {
  std::string stage;  // "intra", "cross", "inter"; "raise": the recall ladder (target_mean_recall)
  std::string scope;  // "video", "text->video", "full"
  double budget_cost = 0.0;  // the budget spec's cost on this scope
  std::vector<CandidateScore> scored;  // in-budget candidates, in search-space order; cost on the scope
  std::optional<CandidateScore> winner;
  int64_t over_budget = 0;     // candidates dropped for their cost
  int64_t not_applicable = 0;  // candidates that cannot be built on this scope (too short, ...)
  int64_t host_index = 0;      // candidates dropped for a host-built index (index_device)
};

struct HeadSearchResult {
  int64_t q_head = 0;
  CandidateScore chosen;  // scored and costed on the whole sequence
  double budget_cost = 0.0;  // the budget spec's cost on the whole sequence for this head
  bool dense_fallback = false;
  std::string fallback_reason;      // why dense was chosen; empty otherwise
  // Raised beyond the budget for the layer's recall target: `chosen` is then a recall_ladder()
  // step and `within_budget` the search's choice it replaced.
  std::optional<CandidateScore> within_budget;
  std::vector<ScopeSearch> scopes;  // intra per modality, cross per pair, then inter
  int64_t over_budget = 0;          // distinct candidates dropped for their cost, all stages
};

struct SearchOptions {
  // Query rows scored per (sub)problem, a stratified sample: the last `segment_tail_rows` rows of
  // each of its query segments (where modality boundaries bite), all of them, and one row drawn
  // at random (`sample_seed`) from each of `sample_rows` equal blocks of the other query rows,
  // standing for its block. The recall is then an unbiased estimate of the mean over all rows,
  // with a standard error (CandidateScore::recall_se).
  int64_t sample_rows = 64;
  int64_t segment_tail_rows = 4;
  uint64_t sample_seed = 0;
  // A recall is taken to reach a threshold (dense_below_recall, target_mean_recall) only when
  // recall - recall_margin_se * standard error does: the sample's error counts against it.
  double recall_margin_se = 2.0;
  // When set, every scope's candidates are built on this device (prepare_pattern from device q
  // and k), costed there (CostModel::cost_prepared) and scored over every query row by the
  // engine (no sample, no sampling error): `mmsparse search` sets it for a measured (GPU) search.
  // A CPU device gives the same on the CPU reference (for small inputs and tests).
  std::optional<Device> score_device;
  std::string budget_spec = kDefaultBudgetSpec;
  // Scale the search space and the budget spec to the sequence length (scale_spec_to_length):
  // unscaled, the 128K budget covers nearly every pair of a short calibration input (at 4K
  // tokens all of them), and the search degenerates into "the widest candidate wins".
  bool scale_to_length = true;
  // Choose dense for a head when its best in-budget candidate recalls less than this (0: never;
  // the paper has no such fallback, so by default dense is chosen only when no candidate fits).
  double dense_below_recall = 0.0;
  // The inter-modality modes stage 3 tries on grid and vertical-slash winners of a mixed-modality
  // input: 0 none, 2 Q-boundary, 3 2D-boundary, 4 item boundary (1, K-boundary, builds the plan
  // of 0). The GPU index builders serve all of them (docs/index_builders.md).
  std::vector<int64_t> boundary_modes = {0, 2, 3, 4};
  // Per-item sink counts (item_sinks: the first tokens of every frame and media item) stage 3
  // tries with each boundary mode; 0 = none.
  std::vector<int64_t> item_sinks = {0, 1};
  // When set, candidates whose plan prepare_pattern would build on the host for this device
  // (builds_plan_on_device is false: Q/2D/item-boundary heads whose groups' last rows are too many
  // runs for the GPU estimate, item-boundary grids of more media items than the GPU builder's
  // query groups) are dropped
  // in every stage (ScopeSearch::host_index): their index would take host time at every run,
  // hundreds of ms per head at 128K. `mmsparse search` sets it for a measured (GPU) search.
  std::optional<Device> index_device;
  // Layer-level target for the mean recall of the searched heads (0: off). When the in-budget
  // choices recall less on average, heads are raised along recall_ladder(), taking the step with
  // the most recall gained per cost added each time, until the mean reaches the target or no step
  // is left. The budget then holds for the other heads only. Costs here include the index
  // (CostModel::index_cost): a ladder step's wide line budgets can take as long to select and
  // convert as to attend, which a budget of attention FLOPs (App. C.5) never meets.
  double target_mean_recall = 0.0;
  float scale = 0.0f;   // softmax scale; 0 means 1/sqrt(head_dim)
  // VecAttention candidates beside Table 3's (docs/vec.md): one "vec:alpha_ppm=<a>" spec per value,
  // in every stage, a family of its own. Empty (the default): the paper's space only.
  std::vector<int64_t> vec_alphas;
  // CPU threads (0 = hardware concurrency): heads are searched in parallel, one per thread, and
  // threads left over serve each head's reference attention. Results do not depend on it.
  int num_threads = 0;
  // Optional progress: called when a scope of a head is done.
  std::function<void(int64_t q_head, const ScopeSearch&)> on_scope_done;
};

struct LayerSearchResult {
  PatternSpec budget_spec;
  double budget_cost = 0.0;  // on the whole sequence, for the first searched head
  std::vector<PatternSpec> space;
  std::vector<HeadSearchResult> heads;  // in the order of `q_heads`
};

// The mean over heads of the chosen specs' recall (1 for no head): the layer's recall.
double mean_recall(std::span<const HeadSearchResult> heads);
// Its standard error: the heads' samples are independent, so sqrt(Σ se²) / heads.
double mean_recall_se(std::span<const HeadSearchResult> heads);

// Searches the query heads `q_heads` (all heads when empty). Throws Error(kInvalidArgument) naming
// q, k, v, layout, q_heads or the option for bad input.
LayerSearchResult search_layer(const TensorView& q, const TensorView& k, const TensorView& v,
                               const ModalityLayout& layout, CostModel& cost_model,
                               const SearchOptions& options, std::span<const int64_t> q_heads = {});

// Calibration files (safetensors; docs/search.md): layer L's tensors are "layers.<L>.q",
// "layers.<L>.k", "layers.<L>.v" ([1, seq_len, heads, head_dim]), and the modality layout is the
// metadata under kLayoutMetadataKey. A file with plain "q", "k", "v" (what `mmsparse generate`
// writes) holds layer 0.

struct CalibrationLayer {
  int64_t layer = 0;
  TensorView q, k, v;  // views into the file's tensors
};
// The file's layers in ascending order. Throws Error(kInvalidArgument) naming `path` and the tensor
// when a layer lacks one of q, k, v, a tensor is not [1, seq_len, heads, head_dim] with seq_len the
// layout's length, or the file has no layout or no layer.
std::vector<CalibrationLayer> calibration_layers(const TensorFile& file, const std::string& path);

}  // namespace mmsparse
