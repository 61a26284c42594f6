// BlindSight's key orders and the spans of its permuted image tiles (blindsight_order.h).

#include "methods/blindsight/blindsight_order.h"

#include <algorithm>

#include "core/engine_chunks.h"
#include "mmsparse/plan.h"

namespace mmsparse::detail {
namespace {

int64_t align_up(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

int64_t chunks_of(int64_t keys) { return (keys + kGatherChunkKeys - 1) / kGatherChunkKeys; }

// `ranges` minus `removed` (both ascending and disjoint).
std::vector<KeyRange> subtract(const std::vector<KeyRange>& ranges,
                               const std::vector<KeyRange>& removed) {
  std::vector<KeyRange> result;
  std::size_t r = 0;
  for (KeyRange range : ranges) {
    while (r < removed.size() && removed[r].end <= range.begin) ++r;
    for (std::size_t i = r; i < removed.size() && removed[i].begin < range.end; ++i) {
      if (removed[i].begin > range.begin) result.push_back({range.begin, removed[i].begin});
      range.begin = std::max(range.begin, removed[i].end);
    }
    if (range.begin < range.end) result.push_back(range);
  }
  return result;
}

// The keys only image `image`'s queries read under `mask`.
std::vector<KeyRange> own_keys(const ImageLayout& images, std::size_t image, BlindSightMask mask) {
  if (!uses_intra(mask)) return {};
  if (!uses_sinks(mask)) return images.segments[image];
  return subtract(images.segments[image], images.sinks[image]);
}

// The offset inside the image (its tokens counted across its segments) of key `key`.
int64_t offset_in_image(const std::vector<KeyRange>& segments, int64_t key) {
  int64_t offset = 0;
  for (const KeyRange& segment : segments) {
    if (key < segment.end) return offset + std::max<int64_t>(key - segment.begin, 0);
    offset += segment.end - segment.begin;
  }
  return offset;
}

// Places `ranges` at consecutive slots from `slot`; returns the slot after them.
int64_t place(const std::vector<KeyRange>& ranges, int64_t slot, std::vector<OrderedRun>& runs) {
  for (const KeyRange& range : ranges) {
    runs.push_back({slot, range.begin, range.end - range.begin});
    slot += range.end - range.begin;
  }
  return slot;
}

// A span being assembled from runs, with where its keys pass `first`.
struct OpenSpan {
  SlotSpan span;
  int64_t last_key = 0;       // its last key
  int64_t diagonal_slot = 0;  // slot of its first key at or after `first`, or span.end
};

// Appends `span`, split where its diagonal would straddle two chunks if the split costs no chunk:
// [begin, begin + head) holds the keys up to a chunk boundary at the diagonal's slot.
void emit(const OpenSpan& open, std::vector<SlotSpan>& spans) {
  const SlotSpan span = open.span;
  const int64_t head = (open.diagonal_slot - span.begin) % kGatherChunkKeys;
  const bool reaches_rows = open.diagonal_slot < span.end;
  if (reaches_rows && head > 0 &&
      1 + chunks_of(span.end - span.begin - head) <= chunks_of(span.end - span.begin)) {
    spans.push_back({span.begin, span.begin + head});
    spans.push_back({span.begin + head, span.end});
    return;
  }
  spans.push_back(span);
}

// The prefix of a region's runs with keys <= last, as spans. A run joins the open span where the
// keys before it, which the kernels position through the span's one shift at up to the run's first
// key - 1, stay at or before `first` (the key-order rule: visible to every row).
void region_spans(const OrderedRun* runs, std::size_t count, int64_t first, int64_t last,
                  std::vector<SlotSpan>& spans) {
  OpenSpan open;
  bool is_open = false;
  for (std::size_t r = 0; r < count && runs[r].key <= last; ++r) {
    const OrderedRun& run = runs[r];
    const int64_t length = std::min(run.length, last + 1 - run.key);
    const bool joins = is_open && run.slot == open.span.end && run.key - 1 <= first;
    if (is_open && !joins) emit(open, spans);
    if (!joins) open = {{run.slot, run.slot}, 0, run.slot};
    is_open = true;
    open.span.end = run.slot + length;
    open.last_key = run.key + length - 1;
    const bool diagonal_found = joins && open.diagonal_slot < run.slot;
    if (!diagonal_found) {
      open.diagonal_slot =
          open.last_key >= first ? run.slot + std::max<int64_t>(first - run.key, 0) : open.span.end;
    }
  }
  if (is_open) emit(open, spans);
}

}  // namespace

BlindSightKeyOrder blindsight_key_order(const ImageLayout& images, BlindSightMask mask) {
  // Sink and intra+sink heads share the order that holds every image's non-sinks.
  const BlindSightMask family = uses_sinks(mask) ? BlindSightMask::kIntraSink : mask;
  BlindSightKeyOrder order;
  int64_t slot = place(images.shared, 0, order.shared);
  order.own_offsets.push_back(0);
  for (std::size_t image = 0; image < images.segments.size(); ++image) {
    const std::vector<KeyRange> own = own_keys(images, image, family);
    if (!own.empty()) {
      const int64_t offset = offset_in_image(images.segments[image], own.front().begin);
      slot = place(own, align_up(slot, kGatherChunkKeys) + offset % kGatherChunkKeys, order.own);
    }
    order.own_offsets.push_back(static_cast<int64_t>(order.own.size()));
  }
  order.slots.assign(static_cast<std::size_t>(slot), kPaddingKey);
  for (const std::vector<OrderedRun>* runs : {&order.shared, &order.own}) {
    for (const OrderedRun& run : *runs) {
      for (int64_t i = 0; i < run.length; ++i) {
        order.slots[run.slot + i] = static_cast<int32_t>(run.key + i);
      }
    }
  }
  return order;
}

std::vector<SlotSpan> permuted_tile_spans(const BlindSightKeyOrder& order, BlindSightMask mask,
                                          int32_t image, int64_t first, int64_t last) {
  std::vector<SlotSpan> spans;
  region_spans(order.shared.data(), order.shared.size(), first, last, spans);
  if (!uses_intra(mask)) return spans;
  const int64_t own_begin = order.own_offsets[image];
  region_spans(order.own.data() + own_begin,
               static_cast<std::size_t>(order.own_offsets[image + 1] - own_begin), first, last,
               spans);
  return spans;
}

namespace {

// Appends slots [begin, end) to `spans`, merged with the last span where they touch.
void append_slots(int64_t begin, int64_t end, std::vector<SlotSpan>& spans) {
  if (begin >= end) return;
  if (!spans.empty() && spans.back().end == begin) {
    spans.back().end = end;
  } else {
    spans.push_back({begin, end});
  }
}

// The slot of shared key `key` (a key of one of the shared runs).
int64_t shared_slot(const std::vector<OrderedRun>& shared, int64_t key) {
  const auto after = std::upper_bound(shared.begin(), shared.end(), key,
                                      [](int64_t k, const OrderedRun& run) { return k < run.key; });
  const OrderedRun& run = *(after - 1);
  return run.slot + key - run.key;
}

}  // namespace

std::vector<SlotSpan> bidirectional_tile_spans(const BlindSightKeyOrder& order,
                                               const ImageLayout& images, BlindSightMask mask,
                                               int32_t image, int64_t last) {
  std::vector<SlotSpan> spans;
  // The shared region holds the shared keys ascending from slot 0: those <= last are a prefix.
  int64_t prefix_end = 0;
  for (const OrderedRun& run : order.shared) {
    if (run.key > last) break;
    prefix_end = run.slot + std::min(run.length, last + 1 - run.key);
  }
  append_slots(0, prefix_end, spans);
  if (uses_sinks(mask)) {
    for (const KeyRange& sink : images.sinks[image]) {
      const int64_t begin = std::max(sink.begin, last + 1);
      if (begin >= sink.end) continue;
      // A run of sinks lies inside one shared run (both are maximal runs of shared keys).
      const int64_t slot = shared_slot(order.shared, begin);
      append_slots(slot, slot + sink.end - begin, spans);
    }
  }
  if (uses_intra(mask)) {
    const int64_t own_begin = order.own_offsets[image];
    const int64_t own_end = order.own_offsets[image + 1];
    if (own_begin < own_end) {
      // place() puts an image's own runs at consecutive slots.
      const OrderedRun& final_run = order.own[own_end - 1];
      append_slots(order.own[own_begin].slot, final_run.slot + final_run.length, spans);
    }
  }
  return spans;
}

}  // namespace mmsparse::detail
