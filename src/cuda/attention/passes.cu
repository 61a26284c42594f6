// Plans of several passes on the GPU: each pass runs as an ordinary plan into the caller's out and
// lse, pass 0 as a fresh result and each later one accumulating (AttentionArgs::accumulate): its
// rows resume from what the passes before left, so that the last pass leaves the merge of all.
// The passes cover disjoint pairs (Plan::extra_passes), so that is the attention of their union.
//
// A pass reads the result before it in the call's dtype, so each further pass adds one rounding
// of the result so far; the merge kernel this replaced rounded each pass's partial output alike.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/runtime/engine.h"
#include "mmsparse/status.h"

namespace mmsparse::cuda {

std::vector<DevicePlan> upload_passes(const Plan& plan, void* stream) {
  // One validation covers every pass (on a large plan it costs nearly as much as building it).
  plan.validate();
  std::vector<DevicePlan> passes;
  for (int64_t p = 0; p < plan.num_passes(); ++p) {
    passes.push_back(
        DevicePlan(DevicePlan::Validated{}, plan, p, stream, RecordForm::kForAttention));
  }
  return passes;
}

void attention_passes(std::span<const DevicePlan> passes, const AttentionArgs& args) {
  if (passes.empty()) throw_invalid_argument("passes", "at least one pass", "0");
  for (std::size_t p = 1; p < passes.size(); ++p) {
    if (!(passes[p].shape() == passes[0].shape())) {
      throw_invalid_argument("passes[" + std::to_string(p) + "] shape", "the shape of passes[0]",
                             "another shape");
    }
  }
  attention_planned(passes[0], args);
  AttentionArgs later = args;
  later.accumulate = true;
  for (std::size_t p = 1; p < passes.size(); ++p) attention_planned(passes[p], later);
}

}  // namespace mmsparse::cuda
