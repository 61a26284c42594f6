// Measuring one pattern run of a layer: its plan built and prepared where the executor runs, the
// attention timed, and per head the density, index time, accuracy and needle coverage.

#include "report.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli_common.h"
#include "mmsparse/attention.h"

namespace mmsparse::cli {

namespace {

// A run's prepared plan, how long each head slot's index took and where it was built. The metrics
// read the prepared plan's host copy (for a plan estimated on the GPU, its download).
struct RunPlan {
  std::shared_ptr<const PreparedPlan> prepared;
  std::vector<double> head_seconds;
  std::vector<std::string> head_built;  // "gpu" or "host", per head slot
};

// Builds and prepares the run's plan where the executor runs: on the GPU one pattern at once or a
// per-head config head by head, on the CPU on the host. Fills the report's index (and assembly)
// times.
RunPlan build_run_plan(Executor& executor, const PatternRun& run, const LayerInputs& inputs,
                       const PlanShape& shape, int64_t head_dim, RunReport& report) {
  const PatternInputs pattern_inputs{inputs.q, inputs.k};
  RunPlan result;
  if (run.specs.size() == 1 && !any_dynamic(run.specs)) {
    // Built once per shape and reused: the per-call index is nothing, the build is reported apart.
    const Executor::StaticPlan built =
        executor.static_plan(run.specs.front(), shape, inputs.layout, head_dim);
    result.prepared = built.prepared;
    report.plan_once_seconds = built.build_seconds;
    report.plan_reused = built.reused;
    const auto slots = static_cast<std::size_t>(built.prepared->shape().head_slots());
    result.head_seconds.assign(slots, 0.0);
    result.head_built.assign(slots, built.built_on_device ? "gpu" : "host");
  } else if (executor.gpu() && run.specs.size() == 1) {
    Executor::PatternPlan built;
    report.index_seconds = executor.median_build_seconds([&] {
      built = executor.prepare_pattern_plan(run.specs.front(), shape, inputs.layout, pattern_inputs,
                                            head_dim);
    });
    result.prepared = std::make_shared<const PreparedPlan>(std::move(built.prepared));
    // One build for every head slot: each is given an equal share.
    const int64_t slots = shape.head_slots();
    result.head_seconds.assign(static_cast<std::size_t>(slots), report.index_seconds / slots);
    result.head_built.assign(static_cast<std::size_t>(slots),
                             built.built_on_device ? "gpu" : "host");
  } else if (executor.gpu()) {
    Executor::ConfigPlan built;
    report.index_seconds = executor.median_build_seconds([&] {
      built =
          executor.prepare_config_plan(run.specs, shape, inputs.layout, pattern_inputs, head_dim);
    });
    report.assembly_seconds = built.times.assembly_seconds;
    result.prepared = std::make_shared<const PreparedPlan>(std::move(built.prepared));
    for (const HeadBuildTime& head : built.times.heads) {
      result.head_seconds.push_back(head.seconds);
      result.head_built.push_back(head.on_device ? "gpu" : "host");
    }
  } else {
    const auto index_start = std::chrono::steady_clock::now();
    result.prepared = std::make_shared<const PreparedPlan>(executor.prepare(executor.build(
        run.specs, shape, inputs.layout, &pattern_inputs, head_dim, &result.head_seconds)));
    report.index_seconds = seconds_since(index_start);
    result.head_built.assign(result.head_seconds.size(), "host");
  }
  return result;
}

}  // namespace

std::vector<int64_t> static_slot_pairs(const std::vector<PatternSpec>& resolved_specs,
                                       const PlanShape& shape, const ModalityLayout* layout,
                                       Executor* executor) {
  PlanShape one_slot = shape;
  one_slot.batch = 1;
  one_slot.heads = 1;
  std::map<std::string, int64_t> pairs_of_spec;
  std::vector<int64_t> pairs;
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    const PatternSpec& spec =
        resolved_specs[resolved_specs.size() == 1 ? 0
                                                  : static_cast<std::size_t>(slot % shape.heads)];
    const auto [found, added] = pairs_of_spec.emplace(spec.to_string(), 0);
    if (added) {
      found->second = executor != nullptr
                          ? executor->static_slot_pair_count(spec, one_slot, layout)
                          : count_plan_pairs(build_plan(spec, one_slot, layout), 0);
    }
    pairs.push_back(found->second);
  }
  return pairs;
}

RunReport measure_run(Executor& executor, const PatternRun& run, const LayerInputs& inputs,
                      const TensorView& out, const TensorView& lse) {
  const int64_t batch = inputs.q.shape[0], q_len = inputs.q.shape[1];
  const int64_t heads = inputs.q.shape[2], head_dim = inputs.q.shape[3];
  const int64_t kv_len = inputs.k.shape[1];
  RunReport report;
  report.run = run;

  const PlanShape shape{inputs.plan_batch, heads, q_len, kv_len, kDefaultTileRows};
  const RunPlan built = build_run_plan(executor, run, inputs, shape, head_dim, report);
  const PreparedPlan& prepared = *built.prepared;
  const std::vector<double>& head_seconds = built.head_seconds;
  const std::vector<std::string>& head_built = built.head_built;
  report.attention_seconds = executor.run(prepared, out, lse);

  std::vector<PatternSpec> resolved;
  std::vector<std::string> head_specs;
  for (const PatternSpec& spec : run.specs) {
    resolved.push_back(resolve_pattern(spec, inputs.layout));
    head_specs.push_back(resolved.back().to_string());
  }
  const int64_t reference_pairs = causal_pair_count(q_len, kv_len, inputs.causal);
  const bool has_needles = inputs.needles != nullptr && !inputs.needles->empty();
  // A plan the GPU built from static specs has no host copy until asked for; the pair counts need
  // one head slot per spec, only the needles every head slot's plan. A plan with dynamic heads is
  // downloaded from the GPU (untimed, once) by prepared.plan().
  const bool whole_plan = has_needles || !executor.gpu() || any_dynamic(run.specs);
  const Plan* plan = whole_plan ? &prepared.plan() : nullptr;
  const std::vector<int64_t> slot_pairs =
      plan != nullptr ? count_plan_pairs(*plan)
                      : static_slot_pairs(resolved, prepared.shape(), inputs.layout, &executor);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t head = 0; head < heads; ++head) {
      const int64_t slot = (inputs.plan_batch == 1 ? 0 : b) * heads + head;
      HeadReport entry;
      entry.batch = b;
      entry.head = head;
      entry.spec = head_specs[head_specs.size() == 1 ? 0 : head];
      if (!inputs.behaviours.empty()) entry.behaviour = inputs.behaviours[head];
      const int64_t pairs = slot_pairs[static_cast<std::size_t>(slot)];
      report.computed_pairs += pairs;
      entry.density = reference_pairs > 0 ? static_cast<double>(pairs) / reference_pairs : 0.0;
      entry.index_seconds = head_seconds[slot];
      entry.index_built = head_built[slot];
      if (inputs.dense_lse != nullptr) {
        entry.accuracy = compare_head(out, lse, *inputs.dense_out, *inputs.dense_lse, b, head);
      }
      if (has_needles) {
        const NeedleDenseInputs dense{
            inputs.q, inputs.k, inputs.dense_lse != nullptr ? *inputs.dense_lse : TensorView{}, b};
        entry.needles = needle_coverage(*plan, slot, inputs.needles->keys, inputs.needles->rows,
                                        inputs.dense_lse != nullptr ? &dense : nullptr);
      }
      report.heads.push_back(std::move(entry));
    }
  }
  return report;
}

}  // namespace mmsparse::cli
