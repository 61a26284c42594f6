// The CPU reference backend: the functions of reference_attention.h behind the Backend interface.
// It has no memory of its own, so device.h's functions keep Backend's refusals.

#include "cpu/cpu_backend.h"

#include "cpu/reference_attention.h"

namespace mmsparse {
namespace {

// The host plan is all a CPU-prepared plan needs; PreparedPlan keeps it.
class HostPlanState final : public PreparedState {};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu-reference"; }

  void attention_dense(const AttentionProblem& problem, const TensorView& q, const TensorView& k,
                       const TensorView& v, const TensorView& out, const TensorView& lse,
                       const AttentionOptions& options) override {
    cpu::attention_dense(problem, q, k, v, out, lse, options);
  }

  void attention_planned(const AttentionProblem& problem, const Plan& plan, const TensorView& q,
                         const TensorView& k, const TensorView& v, const TensorView& out,
                         const TensorView& lse, const AttentionOptions& options) override {
    // The oracle walks the plan's arrays directly, so it proves them consistent first.
    plan.validate();
    cpu::attention_planned(problem, plan, q, k, v, out, lse, options);
  }

  void attention_prepared(const AttentionProblem& problem, const PreparedPlan& prepared,
                          const PreparedState&, const TensorView& q, const TensorView& k,
                          const TensorView& v, const TensorView& out, const TensorView& lse,
                          const AttentionOptions& options) override {
    // prepare_plan validated the plan.
    cpu::attention_planned(problem, prepared.plan(), q, k, v, out, lse, options);
  }

  void attention_masked(const AttentionProblem& problem, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& mask, const TensorView& out,
                        const TensorView& lse, const AttentionOptions& options) override {
    cpu::attention_masked(problem, q, k, v, mask, out, lse, options);
  }

  void merge_partials(std::span<const TensorView> outs, std::span<const TensorView> lses,
                      const TensorView& out, const TensorView& lse,
                      const AttentionOptions& options) override {
    cpu::merge_partials(outs, lses, out, lse, options.num_threads);
  }

  std::unique_ptr<PreparedState> prepare_plan(const Plan& plan, Device, void*) override {
    plan.validate();
    return std::make_unique<HostPlanState>();
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace mmsparse
