#pragma once
// Accuracy of Spava's approximation against dense attention, swept over the anchor length l_a and
// the passing length l_p for several world sizes, in one process: W virtual ranks through the
// in-process transport (dist::run_in_process) on the CPU or on one GPU, each running the real
// dist::attention. Plain C++ (the CPU tests compile it); mmsparse-dist-bench --accuracy runs it.
//
// Recall is the CLI's: per query head and row, exp(LSE_approx - LSE_dense), the share of the dense
// softmax mass the approximation's keys hold. The query rows attend exactly in Spava (every key,
// split over the ranks and merged), so their recall is 1 in one layer by construction; the
// approximation shows in the context rows (anchor, own block causally, passing KVs of earlier
// hosts), whose outputs are the next layer's keys and values. Both are reported.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mmsparse/dist.h"
#include "mmsparse/tensor.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse::dist_bench {

struct AccuracySweep {
  std::vector<int> worlds{2, 4, 8};
  std::vector<int64_t> anchor_divisors{256, 128, 64, 32};    // l_a = context / divisor
  std::vector<int64_t> passing_divisors{512, 256, 128, 64};  // l_p = context / divisor
  bool with_exact = true;          // per world, one more row passing whole blocks: recall must be 1
  double timeout_seconds = 300.0;  // of each in-process run
};

struct AccuracyRow {
  int world = 0;
  int64_t anchor_divisor = 0;
  int64_t passing_divisor = 0;  // 0: whole blocks passed (the exactness mode)
  int64_t anchor_len = 0;       // as split (clipped where the context is short)
  int64_t passing_len = 0;      // the first host's (later ones are clipped to their blocks alike)
  double query_recall_mean = 0.0;
  double query_recall_min = 0.0;
  double context_recall_mean = 0.0;  // rows after the anchor and before the query
  double context_recall_min = 0.0;
  int64_t needles_kept = 0;  // (needle, KV head) pairs the passing blocks keep
  int64_t needle_pairs = 0;  // (needle, KV head) pairs in blocks whose passing rows are read
};

// The global problem: q [1, total, q_heads, dim], k, v [1, total, kv_heads, dim], bf16 or fp32.
struct AccuracyInputs {
  Workload::Tensors host;  // host copies (selection for the needle count)
  TensorView q, k, v;      // the same on the device the ranks run on (host views on the CPU)
  int64_t context_len = 0;
  int64_t query_len = 0;
  std::vector<Needle> needles;
};

// Copies `from` to `to` (same shape and dtype, both on the sweep's device; rows of contiguous
// [1, seq, heads, dim] tensors): memcpy on the CPU, cudaMemcpy in the GPU bench.
using RowCopy = std::function<void(const TensorView& from, const TensorView& to)>;
RowCopy host_row_copy();

// Runs every (world, l_a, l_p) of `sweep` (and the exact rows) through dist::attention on W
// in-process ranks on the device of `inputs.q`, against dense attention on the same device.
std::vector<AccuracyRow> accuracy_sweep(const AccuracySweep& sweep, const AccuracyInputs& inputs,
                                        const RowCopy& copy);

// How many (needle, KV head) pairs the passing blocks of `split` keep, over blocks whose passing
// rows some later host reads (host-side selection, the same keys the device selects).
struct NeedlesKept {
  int64_t kept = 0;
  int64_t pairs = 0;
};
NeedlesKept count_needles_kept(const dist::DistConfig& config, const dist::SequenceSplit& split,
                               const Workload::Tensors& host, const std::vector<Needle>& needles);

void print_accuracy(const std::vector<AccuracyRow>& rows, const std::string& title);
std::string accuracy_json(const std::vector<AccuracyRow>& rows, const std::string& title);

}  // namespace mmsparse::dist_bench
