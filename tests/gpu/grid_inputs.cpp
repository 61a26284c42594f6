#include "grid_inputs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/estimation.h"
#include "methods/estimate/modality_boundary.h"
#include "plan_records.h"

namespace mmsparse::test {
namespace {

// A grid choice is clear when the host's best (stride, phase) outscores every other candidate by
// this much per estimate row (each row's softmax sums to 1): far above the rounding the GPU's other
// summation order adds (about 1e-6 of a row's mass).
constexpr double kGridClearMargin = 1e-4;
// The planted grid (as tests/cpu/test_dynamic_patterns.cpp plants it): queries match keys of their
// own phase with this logit, and the keys of the vertical phase with another.
constexpr double kSlashLogit = 8.0;
constexpr double kVerticalLogit = 4.0;
constexpr float kKeyNoise = 0.05f;

int64_t floor_mod_int(int64_t a, int64_t b) { return ((a % b) + b) % b; }

// The head slots of `heads` (all when empty) in a head selection's order: batch-major.
std::vector<int64_t> searched_slots(const PlanShape& shape, const std::vector<int64_t>& heads) {
  std::vector<int64_t> slots;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      if (heads.empty() || std::find(heads.begin(), heads.end(), h) != heads.end()) {
        slots.push_back(b * shape.heads + h);
      }
    }
  }
  return slots;
}

}  // namespace

PatternSpec grid(int64_t stride, int64_t max_stride, int64_t hline, int64_t vline, int64_t slash,
                 int64_t sink, int64_t local, int64_t last_q, int64_t boundary) {
  return {"grid",
          {{"stride", stride},
           {"max_stride", max_stride},
           {"hline", hline},
           {"vline", vline},
           {"slash", slash},
           {"sink", sink},
           {"local", local},
           {"last_q", last_q},
           {"boundary", boundary}}};
}

void plant_grid(Random& random, AttentionInputs& inputs, const ProblemSize& size, int64_t stride,
                int64_t vertical_phase) {
  const int64_t line_dim = size.head_dim - 1;
  const float slash = static_cast<float>(kSlashLogit / size.scale);
  const float vertical = static_cast<float>(kVerticalLogit / size.scale);
  const int64_t offset = size.kv_len - size.q_len;
  const auto element = [](const TensorView& view, int64_t b, int64_t i, int64_t h, int64_t d) {
    return b * view.strides[0] + i * view.strides[1] + h * view.strides[2] + d * view.strides[3];
  };
  for (int64_t b = 0; b < size.batch; ++b) {
    for (int64_t h = 0; h < size.q_heads(); ++h) {
      for (int64_t i = 0; i < size.q_len; ++i) {
        const int64_t phase = floor_mod_int(i + offset, stride);
        for (int64_t d = 0; d < size.head_dim; ++d) {
          const float value = d == phase ? slash : (d == line_dim ? vertical : 0.0f);
          store_float(inputs.q.view, element(inputs.q.view, b, i, h, d), value);
        }
      }
    }
    for (int64_t h = 0; h < size.kv_heads; ++h) {
      for (int64_t j = 0; j < size.kv_len; ++j) {
        for (int64_t d = 0; d < size.head_dim; ++d) {
          float value = kKeyNoise * random.normal();
          if (d == j % stride) value += 1.0f;
          if (d == line_dim && j % stride == vertical_phase) value += 1.0f;
          store_float(inputs.k.view, element(inputs.k.view, b, j, h, d), value);
        }
      }
    }
  }
}

bool HostGridSearch::clear(std::size_t search) const {
  return margins[search] > kGridClearMargin * static_cast<double>(rows[search]);
}

bool HostGridSearch::all_clear() const {
  for (std::size_t search = 0; search < margins.size(); ++search) {
    if (!clear(search)) return false;
  }
  return true;
}

HostGridSearch host_grid_search(const PatternSpec& resolved, const PlanShape& shape,
                                const PatternInputs& inputs, const std::vector<int64_t>& heads) {
  const int64_t last_q = resolved.params.at("last_q");
  std::vector<int64_t> rows;
  for (int64_t row = std::max<int64_t>(0, shape.q_len - last_q); row < shape.q_len; ++row) {
    rows.push_back(row);
  }
  const std::vector<int64_t> slots = searched_slots(shape, heads);
  const detail::KeySpace keys = detail::KeySpace::all_keys(shape.kv_len);
  const detail::GridOptions options = detail::grid_options(resolved);
  detail::KeyCache cache;
  HostGridSearch search;
  for (const int64_t slot : slots) {
    const detail::HeadOperands operands(inputs, shape, slot, cache);
    double margin = 0.0;
    const detail::Estimate estimate =
        detail::estimate_last_queries(operands, rows, keys, shape.causal_offset());
    search.lines.push_back(detail::search_grid(estimate, options, &margin));
    search.margins.push_back(margin);
    search.rows.push_back(estimate.rows());
  }
  return search;
}

HostGridSearch host_grouped_grid_search(const PatternSpec& resolved, const PlanShape& shape,
                                        const PatternInputs& inputs, const ModalityLayout& layout,
                                        const std::vector<int64_t>& heads) {
  const std::vector<detail::QueryGroup> groups = detail::query_groups(resolved, shape, &layout);
  const int64_t last_q = resolved.params.at("last_q");
  const detail::GridOptions options = detail::grid_options(resolved);
  detail::KeyCache cache;
  HostGridSearch search;
  for (const detail::QueryGroup& group : groups) {
    const std::vector<int64_t> rows = group.last_rows(last_q);
    for (const detail::KeySpace& space : group.key_spaces) {
      for (const int64_t slot : searched_slots(shape, heads)) {
        const detail::HeadOperands operands(inputs, shape, slot, cache);
        double margin = 0.0;
        const detail::Estimate estimate =
            detail::estimate_last_queries(operands, rows, space, shape.causal_offset());
        search.lines.push_back(detail::search_grid(estimate, options, &margin));
        search.margins.push_back(margin);
        search.rows.push_back(estimate.rows());
      }
    }
  }
  return search;
}

Plan host_grid_plan(const PatternSpec& resolved, const PlanShape& shape,
                    const PatternInputs& inputs, const std::vector<detail::GridLines>& lines,
                    const ModalityLayout* layout) {
  const detail::GridOptions options = detail::grid_options(resolved);
  PlanBuilder builder(shape);
  detail::KeyCache cache;
  const int64_t slots = shape.head_slots();
  for (int64_t slot = 0; slot < slots; ++slot) {
    // build_dynamic_head asks for the pairs' patterns in pair order.
    int64_t pair = 0;
    detail::build_dynamic_head(
        builder, resolved, {shape, layout, &inputs, slot, &cache}, [&](const detail::Estimate&) {
          return detail::make_grid_pattern(lines[static_cast<std::size_t>(pair++ * slots + slot)],
                                           options);
        });
  }
  return builder.finish();
}

int64_t expect_clear_lines_equal(const HostGridSearch& search,
                                 const std::vector<detail::GridLines>& built) {
  int64_t clear = 0;
  for (std::size_t i = 0; i < search.lines.size() && i < built.size(); ++i) {
    if (!search.clear(i)) continue;
    ++clear;
    EXPECT_EQ(built[i].stride, search.lines[i].stride) << "search " << i;
    EXPECT_EQ(built[i].phase, search.lines[i].phase) << "search " << i;
  }
  return clear;
}

int64_t expect_grouped_grid_matches_host(const PatternSpec& resolved, const PlanShape& shape,
                                         const PatternInputs& host_inputs,
                                         const ModalityLayout& layout, const cuda::DevicePlan& plan,
                                         const std::vector<detail::GridLines>& lines,
                                         cudaStream_t stream, Plan* keep_host) {
  int64_t clear = 0;
  if (shape.q_len > 0) {
    const HostGridSearch search = host_grouped_grid_search(resolved, shape, host_inputs, layout);
    EXPECT_EQ(search.lines.size(), lines.size());
    clear = expect_clear_lines_equal(search, lines);
  }
  Plan host = host_grid_plan(resolved, shape, host_inputs, lines, &layout);
  SCOPED_TRACE(host.summary());
  expect_same_grid_records(plan, host, stream);
  if (keep_host != nullptr) *keep_host = std::move(host);
  return clear;
}

}  // namespace mmsparse::test
