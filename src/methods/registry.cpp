// The pattern table: listing, spec resolution, and building plans head slot by head slot.

#include "methods/registry.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <vector>

#include "core/plan_coverage.h"
#include "methods/blindsight/blindsight.h"
#include "methods/estimate/estimation.h"
#include "methods/grid/grid.h"
#include "methods/pattern_names.h"
#include "methods/static/static_patterns.h"
#include "methods/vec/vec.h"
#include "methods/vertical_slash/vertical_slash.h"
#include "mmsparse/status.h"

namespace mmsparse {

namespace detail {

int64_t checked_param(const PatternSpec& spec, const std::string& key, int64_t minimum) {
  const int64_t value = spec.params.at(key);
  if (value < minimum) {
    throw_invalid_argument(spec.name + " parameter " + key, ">= " + std::to_string(minimum),
                           std::to_string(value));
  }
  return value;
}

bool checked_flag(const PatternSpec& spec, const std::string& key) {
  const int64_t value = spec.params.at(key);
  if (value != 0 && value != 1) {
    throw_invalid_argument(spec.name + " parameter " + key, "0 or 1", std::to_string(value));
  }
  return value == 1;
}

const std::vector<const PatternEntry*>& pattern_entries() {
  static const std::vector<const PatternEntry*> table = [] {
    std::vector<const PatternEntry*> entries;
    for (StaticPattern pattern : kStaticPatterns) entries.push_back(&static_pattern_entry(pattern));
    entries.push_back(&vertical_slash_entry());
    entries.push_back(&grid_entry());
    entries.push_back(&grid_mask_entry());
    entries.push_back(&full_attention_entry());
    entries.push_back(&vec_entry());
    for (BlindSightMask mask : kBlindSightMasks) entries.push_back(&blindsight_entry(mask));
    return entries;
  }();
  return table;
}

const PatternEntry* find_pattern_entry(std::string_view name) {
  for (const PatternEntry* entry : pattern_entries()) {
    if (entry->info.name == name) return entry;
  }
  return nullptr;
}

namespace {

// Appends head slot `slot` of `source` to `builder` as its next head: the same query order, tiles,
// masks, spans, strided spans and columns, in their stored order, so that the builder stores them
// as it stored them for `source`. `builder_orders[o]`: the builder's index of source key order o.
void append_plan_head(PlanBuilder& builder, const Plan& source, int64_t slot,
                      const std::vector<int32_t>& builder_orders) {
  const auto at = [](const std::vector<int64_t>& offsets, int64_t i) {
    return offsets[static_cast<std::size_t>(i)];
  };
  builder.begin_head(std::vector<QueryRun>(
      source.runs.begin() + at(source.head_run_offsets, slot),
      source.runs.begin() + at(source.head_run_offsets, slot + 1)));
  for (int64_t t = at(source.head_tile_offsets, slot); t < at(source.head_tile_offsets, slot + 1);
       ++t) {
    const auto tile = static_cast<std::size_t>(t);
    const int32_t order = source.tile_key_order(t);
    builder.begin_tile(source.tiles[tile].begin, source.tiles[tile].end,
                       source.masks[static_cast<std::size_t>(source.tile_masks[tile])],
                       order == kKeysInPlace ? kKeysInPlace
                                             : builder_orders[static_cast<std::size_t>(order)]);
    for (int64_t i = at(source.tile_span_offsets, t); i < at(source.tile_span_offsets, t + 1); ++i) {
      const KeySpan& span = source.spans[static_cast<std::size_t>(i)];
      builder.add_span(span.begin, span.end);
    }
    for (int64_t i = at(source.tile_strided_offsets, t); i < at(source.tile_strided_offsets, t + 1);
         ++i) {
      const StridedSpan& strided = source.strided_spans[static_cast<std::size_t>(i)];
      builder.add_strided_span(strided.begin, strided.end, strided.step);
    }
    for (int64_t i = at(source.tile_column_offsets, t); i < at(source.tile_column_offsets, t + 1);
         ++i) {
      builder.add_column(source.columns[static_cast<std::size_t>(i)]);
    }
  }
}

}  // namespace

bool StaticHeads::serves(const PatternSpec& resolved_spec) {
  const PatternEntry* entry = find_pattern_entry(resolved_spec.name);
  return entry != nullptr && !entry->info.dynamic && entry->passes == 1;
}

void StaticHeads::append(PlanBuilder& builder, const PatternSpec& resolved_spec,
                         const PlanShape& shape, const ModalityLayout* layout) {
  const std::string key = resolved_spec.to_string();
  auto found = heads_.find(key);
  if (found == heads_.end()) {
    const PlanShape one_slot{.q_len = shape.q_len, .kv_len = shape.kv_len,
                             .tile_rows = shape.tile_rows};
    PlanBuilder one(one_slot);
    find_pattern_entry(resolved_spec.name)->build(one, resolved_spec, HeadContext{one_slot, layout});
    Head head{one.finish(), {}};
    // In the order the head added them, as a rebuild would.
    for (const std::vector<int32_t>& order : head.plan.key_orders) {
      head.builder_orders.push_back(builder.add_key_order(order));
    }
    if (!head.plan.token_media.empty()) builder.attach_layout(*layout);
    found = heads_.emplace(key, std::move(head)).first;
  }
  append_plan_head(builder, found->second.plan, 0, found->second.builder_orders);
}

}  // namespace detail

namespace {

// Tokens per frame for the SF patterns when no layout with a video gives it.
constexpr int64_t kDefaultTokensPerFrame = 256;

const detail::PatternEntry& known_pattern(std::string_view name) {
  const detail::PatternEntry* entry = detail::find_pattern_entry(name);
  if (entry == nullptr) {
    throw_invalid_argument("pattern", "one of " + known_pattern_names(),
                           "\"" + std::string(name) + "\"");
  }
  return *entry;
}

}  // namespace

bool is_known_pattern(std::string_view name) { return detail::find_pattern_entry(name) != nullptr; }

std::string known_pattern_names() {
  std::string names;
  for (const detail::PatternEntry* entry : detail::pattern_entries()) {
    names += (names.empty() ? "" : ", ") + entry->info.name;
  }
  return names;
}

const std::vector<PatternInfo>& known_patterns() {
  static const std::vector<PatternInfo> infos = [] {
    std::vector<PatternInfo> list;
    for (const detail::PatternEntry* entry : detail::pattern_entries()) list.push_back(entry->info);
    return list;
  }();
  return infos;
}

bool is_dynamic(const PatternSpec& spec) {
  const std::vector<PatternInfo>& known = known_patterns();
  return std::any_of(known.begin(), known.end(), [&](const PatternInfo& info) {
    return info.dynamic && info.name == spec.name;
  });
}

namespace {

// Whether tile `t` of one head's pass keeps only pairs that causal attention with bidirectional
// media keeps (MaskPolicy{.causal = true, .media_bidirectional = true}: a key after its query's
// aligned position only inside the query's own media item), judged on the keys it lists before
// its mask. A pair (row, key) past the row is such a pair when key and row share a media item;
// so every listed key past the tile's first aligned row, and every row before the last of those
// keys, must lie in one media item. Costs a step per listed key and row.
bool tile_within_bidirectional_media(const Plan& pass, int64_t t,
                                     const std::vector<int64_t>& query_order,
                                     const std::vector<int32_t>& token_media) {
  const int64_t offset = pass.shape.causal_offset();
  int64_t first_aligned = pass.shape.kv_len;
  for (int64_t i = pass.tiles[t].begin; i < pass.tiles[t].end; ++i) {
    first_aligned = std::min(first_aligned, query_order[i] + offset);
  }
  // Text, and positions before the layout's tokens (a query when kv_len < q_len): no media.
  const auto media_of = [&](int64_t position) {
    return position >= 0 && position < static_cast<int64_t>(token_media.size())
               ? token_media[position]
               : -1;
  };
  int32_t media = -1;
  int64_t last_key = -1;
  bool within = true;
  detail::for_each_tile_key(pass, t, [&](int64_t key) {
    if (key <= first_aligned) return;
    within = within && media_of(key) >= 0 && (last_key < 0 || media_of(key) == media);
    media = media_of(key);
    last_key = std::max(last_key, key);
  });
  if (last_key < 0) return true;  // causal pairs only
  for (int64_t i = pass.tiles[t].begin; within && i < pass.tiles[t].end; ++i) {
    const int64_t aligned = query_order[i] + offset;
    within = aligned >= last_key || media_of(aligned) == media;
  }
  return within;
}

}  // namespace

bool attends_causally(const PatternSpec& spec, const PlanShape& shape,
                      const ModalityLayout* layout) {
  const detail::PatternEntry& entry = known_pattern(spec.name);
  if (entry.info.dynamic) {
    return entry.attends_causally == nullptr ||
           entry.attends_causally(resolve_pattern(spec, layout));
  }
  const PlanShape one_head{1, 1, shape.q_len, shape.kv_len, shape.tile_rows};
  const Plan plan = build_plan(spec, one_head, layout);
  // Causal with bidirectional media counts as causal, as the in-place lifted mask says: a
  // key-ordered bidirectional image tile reads its image unmasked, the same pairs.
  const std::vector<int32_t> token_media =
      layout != nullptr ? layout->token_media() : std::vector<int32_t>{};
  for (int64_t p = 0; p < plan.num_passes(); ++p) {
    const Plan& pass = plan.pass(p);
    const std::vector<int64_t> query_order = pass.query_order(0);
    for (int64_t t = 0; t < pass.num_tiles(); ++t) {
      if (pass.masks[pass.tile_masks[t]].causal) continue;
      if (layout == nullptr ||
          !tile_within_bidirectional_media(pass, t, query_order, token_media)) {
        return false;
      }
    }
  }
  return true;
}

PatternSpec resolve_pattern(const PatternSpec& spec, const ModalityLayout* layout) {
  const detail::PatternEntry& entry = known_pattern(spec.name);
  const int64_t frame_tokens = layout != nullptr ? layout->video_frame_tokens() : 0;
  PatternSpec resolved{spec.name,
                       entry.defaults(frame_tokens > 0 ? frame_tokens : kDefaultTokensPerFrame)};
  if (entry.list_defaults != nullptr) resolved.lists = entry.list_defaults();
  for (const auto& [key, value] : spec.params) {
    if (resolved.params.count(key) == 0) {
      if (resolved.lists.count(key) != 0) {
        throw_invalid_argument(spec.name + " parameter " + key, "a list such as " + key + "=[" +
                                                                    std::to_string(value) + "]",
                               std::to_string(value));
      }
      std::string names;
      for (const auto& known : resolved.params) names += (names.empty() ? "" : ", ") + known.first;
      throw_invalid_argument(spec.name, "parameters " + (names.empty() ? "none" : names),
                             "\"" + key + "\"");
    }
    resolved.params[key] = value;
  }
  for (const auto& [key, list] : spec.lists) {
    if (resolved.lists.count(key) == 0) {
      std::string names;
      for (const auto& known : resolved.lists) names += (names.empty() ? "" : ", ") + known.first;
      throw_invalid_argument(spec.name, "list parameters " + (names.empty() ? "none" : names),
                             "\"" + key + "\"");
    }
    resolved.lists[key] = list;
  }
  return resolved;
}

void append_pattern_head(PlanBuilder& builder, const PatternSpec& spec, const PlanShape& shape,
                         const ModalityLayout* layout, const PatternInputs* inputs,
                         int64_t head_slot) {
  const detail::PatternEntry& entry = known_pattern(spec.name);
  if (entry.passes != 1) {
    throw Error(ErrorCode::kUnsupported,
                "append_pattern_head: " + spec.name + " builds " + std::to_string(entry.passes) +
                    " passes, which one builder cannot hold; use build_plan");
  }
  detail::KeyCache keys;
  entry.build(builder, resolve_pattern(spec, layout), {shape, layout, inputs, head_slot, &keys});
}

void check_pattern(const PatternSpec& spec, const PlanShape& shape, const ModalityLayout* layout,
                   const PatternInputs* inputs) {
  const detail::PatternEntry& entry = known_pattern(spec.name);
  if (!entry.info.dynamic) {
    (void)build_plan(spec, {1, 1, shape.q_len, shape.kv_len, shape.tile_rows}, layout);
    return;
  }
  PlanBuilder builder(shape);
  detail::HeadContext context{shape, layout, inputs};
  context.validate_only = true;
  entry.build(builder, resolve_pattern(spec, layout), context);
}

namespace {

// build_plan and build_plan_timed in one: head_seconds (nullable) receives each slot's build time.
Plan build_plan_with_timing(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                            const ModalityLayout* layout, const PatternInputs* inputs,
                            std::vector<double>* head_seconds) {
  const auto count = static_cast<int64_t>(specs.size());
  if (count != 1 && count != shape.heads) {
    throw_invalid_argument("specs",
                           "1 or heads = " + std::to_string(shape.heads) + " pattern specs",
                           std::to_string(count));
  }
  // Resolved once, not per batch element.
  std::vector<PatternSpec> resolved;
  for (const PatternSpec& spec : specs) resolved.push_back(resolve_pattern(spec, layout));
  if (head_seconds != nullptr) {
    head_seconds->assign(static_cast<std::size_t>(shape.head_slots()), 0.0);
  }
  // One builder per pass of the specs' pattern with the most; heads of patterns with fewer passes
  // get no tiles in the others.
  int64_t passes = 1;
  for (const PatternSpec& spec : resolved)
    passes = std::max(passes, known_pattern(spec.name).passes);
  std::vector<PlanBuilder> builders(static_cast<std::size_t>(passes), PlanBuilder(shape));
  detail::KeyCache keys;  // head slots run in order, so a GQA group's query heads reuse one K
  detail::StaticHeads statics;
  for (int64_t slot = 0; slot < shape.head_slots(); ++slot) {
    const PatternSpec& spec = resolved[count == 1 ? 0 : slot % shape.heads];
    const detail::PatternEntry& entry = known_pattern(spec.name);
    const auto start = std::chrono::steady_clock::now();
    const detail::HeadContext context{shape, layout, inputs, slot, &keys};
    if (detail::StaticHeads::serves(spec)) {
      statics.append(builders.front(), spec, shape, layout);
    } else if (entry.passes == 1) {
      entry.build(builders.front(), spec, context);
    } else {
      entry.build_passes(std::span(builders).first(static_cast<std::size_t>(entry.passes)), spec,
                         context);
    }
    for (auto p = static_cast<std::size_t>(entry.passes); p < builders.size(); ++p) {
      builders[p].begin_head();
    }
    if (head_seconds != nullptr) {
      (*head_seconds)[slot] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  Plan plan = builders.front().finish();
  // finish() validated each pass, and they share the shape: no need to validate them again.
  for (std::size_t p = 1; p < builders.size(); ++p)
    plan.extra_passes.push_back(builders[p].finish());
  return plan;
}

}  // namespace

Plan build_plan(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                const ModalityLayout* layout, const PatternInputs* inputs) {
  return build_plan_with_timing(specs, shape, layout, inputs, nullptr);
}

Plan build_plan_timed(const std::vector<PatternSpec>& specs, const PlanShape& shape,
                      const ModalityLayout* layout, const PatternInputs* inputs,
                      std::vector<double>& head_seconds) {
  return build_plan_with_timing(specs, shape, layout, inputs, &head_seconds);
}

Plan build_plan(const PatternSpec& spec, const PlanShape& shape, const ModalityLayout* layout,
                const PatternInputs* inputs) {
  return build_plan(std::vector<PatternSpec>{spec}, shape, layout, inputs);
}

}  // namespace mmsparse
