// The item boundary's pair table and the per-item sinks of the GPU index builders (item_spaces.h).
// Host arithmetic on the layout only: nothing here touches the device.

#include <algorithm>

#include "methods/estimate/dynamic_head.h"
#include "methods/estimate/item_spaces.h"

namespace mmsparse::cuda::index::items {

PairTable pair_table(const std::vector<detail::QueryGroup>& groups) {
  PairTable table;
  table.first_pair.push_back(0);
  for (const detail::QueryGroup& group : groups) {
    table.spaces.insert(table.spaces.end(), group.key_spaces.begin(), group.key_spaces.end());
    table.first_pair.push_back(static_cast<int32_t>(table.spaces.size()));
    table.width = std::max(table.width, static_cast<int64_t>(group.key_spaces.size()));
  }
  return table;
}

std::vector<int64_t> spec_sink_keys(const PatternSpec& resolved_spec, const PlanShape& shape,
                                    const ModalityLayout* layout) {
  const int64_t count = detail::item_sinks_param(resolved_spec, shape, layout);
  return count > 0 ? detail::item_sink_keys(*layout, count) : std::vector<int64_t>{};
}

int32_t visible_sinks(const std::vector<int64_t>& sinks, int64_t last_aligned) {
  return static_cast<int32_t>(std::upper_bound(sinks.begin(), sinks.end(), last_aligned) -
                              sinks.begin());
}

std::vector<KeySpaceView> space_views(const std::vector<detail::KeySpace>& spaces,
                                      const int64_t* begins, const int64_t* prefixes) {
  std::vector<KeySpaceView> views;
  int64_t first_range = 0;
  for (std::size_t s = 0; s < spaces.size(); ++s) {
    const auto ranges = static_cast<int64_t>(spaces[s].ranges().size());
    KeySpaceView view;
    if (!spaces[s].is_identity()) {
      view = {begins + first_range, prefixes + first_range + static_cast<int64_t>(s),
              static_cast<int32_t>(ranges), true};
    }
    views.push_back(view);
    first_range += ranges;
  }
  return views;
}

}  // namespace mmsparse::cuda::index::items
