// Uploads a host Plan as one device buffer of kernel records (see plan_view.cuh).

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_pool.h"
#include "cuda/runtime/plan_view.cuh"
#include "mmsparse/status.h"

namespace mmsparse::cuda {

std::size_t align_section(std::size_t bytes) {
  return (bytes + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment;
}

void check_int32_ranges(const PlanShape& shape) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  if (shape.q_len + shape.kv_len > kInt32Max) {
    throw Error(ErrorCode::kUnsupported,
                "plan: the CUDA engine needs q_len + kv_len <= 2^31 - 1, got q_len = " +
                    std::to_string(shape.q_len) + ", kv_len = " + std::to_string(shape.kv_len));
  }
  if (shape.head_slots() > kInt32Max) {
    throw Error(ErrorCode::kUnsupported,
                "plan: the CUDA engine needs batch * heads <= 2^31 - 1, got " +
                    std::to_string(shape.head_slots()));
  }
}

MaskRecord make_mask_record(const MaskPolicy& policy, int64_t kv_len) {
  MaskRecord record{};
  record.causal = policy.causal ? 1 : 0;
  // aligned_query - key <= kv_len - 1, so a window of kv_len or more keeps every pair.
  record.window =
      policy.window > 0 && policy.window < kv_len ? static_cast<int32_t>(policy.window) : 0;
  record.window_sink = static_cast<int32_t>(std::min(policy.window_sink, kv_len));
  // Distances lie below kv_len: a min_distance of kv_len already removes every pair, and a period
  // of kv_len or more never wraps, so (period, band) -> (kv_len, min(band, kv_len)) keeps the same
  // pairs.
  record.min_distance = static_cast<int32_t>(std::min(policy.min_distance, kv_len));
  record.period = static_cast<int32_t>(std::min(policy.period, kv_len));
  record.band = static_cast<int32_t>(std::min(policy.band, kv_len));
  record.same_media = policy.same_media ? 1 : 0;
  record.modality_pairs = policy.modality_pairs;
  record.needs_tokens = policy.needs_token_arrays() ? 1 : 0;
  record.media_bidirectional = policy.media_bidirectional ? 1 : 0;
  return record;
}

namespace {

// Tile indices by decreasing key count: CTAs start in block order, so the longest tiles start first
// and the short ones fill the last wave instead of a long tile running alone at the end. Ties go
// position-major: a head's t-th tile next to every other head's t-th tile, so that the query
// heads of one KV head, which read the same keys where their plans agree, run side by side and
// share those keys in L2 instead of each reading them from memory.
// The keys each tile lists (spans, strided spans and columns).
std::vector<int64_t> tile_keys(const Plan& plan) {
  std::vector<int64_t> keys(plan.tiles.size(), 0);
  for (std::size_t t = 0; t < plan.tiles.size(); ++t) {
    for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
      keys[t] += plan.spans[s].end - plan.spans[s].begin;
    }
    for (int64_t s = plan.tile_strided_offsets[t]; s < plan.tile_strided_offsets[t + 1]; ++s) {
      keys[t] += plan.strided_spans[s].count();
    }
    keys[t] += plan.tile_column_offsets[t + 1] - plan.tile_column_offsets[t];
  }
  return keys;
}

// `keys`: tile_keys(plan).
std::vector<int32_t> heaviest_first(const Plan& plan, const std::vector<int64_t>& keys) {
  // Each tile's position within its head slot (tiles are stored head slot by head slot).
  std::vector<int64_t> position(plan.tiles.size(), 0);
  for (int64_t slot = 0; slot < plan.head_slots(); ++slot) {
    for (int64_t t = plan.head_tile_offsets[slot]; t < plan.head_tile_offsets[slot + 1]; ++t) {
      position[t] = t - plan.head_tile_offsets[slot];
    }
  }
  // Tile index last: tiles are stored head slot by head slot, so equal positions go in slot order.
  std::vector<int32_t> order(plan.tiles.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return std::tuple(-keys[a], position[a], a) < std::tuple(-keys[b], position[b], b);
  });
  return order;
}

// Merges a tile's strided spans into lattice records (plan_view.cuh) where kLatticeWidth of them in
// a row have one step, consecutive begins and one count, and lie in the whole periods of kv_len
// (the kernel's 5-D views end there) without crossing a period's end. A count that is not whole
// chunks' periods leaves the lattice's last chunk partial, which the kernels mask. The
// first such group fixes the plan's lattice step; groups of another step stay strided spans, since
// the kernel has views of one period.
class LatticeMerger {
 public:
  // merge false: every strided span stays its own record.
  LatticeMerger(int64_t kv_len, bool merge) : kv_len_(kv_len), merge_(merge) {}

  // Appends the records of strided spans [first, last) of `spans` to `records`.
  void append(const std::vector<StridedSpan>& spans, int64_t first, int64_t last,
              std::vector<SpanRecord>& records) {
    for (int64_t s = first; s < last;) {
      const StridedSpan& lead = spans[s];
      if (starts_group(spans, s, last)) {
        step_ = static_cast<int32_t>(lead.step);
        const int64_t end = lead.begin + (lead.count() - 1) * lead.step + kLatticeWidth;
        records.push_back({static_cast<int32_t>(lead.begin), static_cast<int32_t>(end),
                           static_cast<int32_t>(lead.step), kLatticeWidth});
        s += kLatticeWidth;
        continue;
      }
      records.push_back({static_cast<int32_t>(lead.begin), static_cast<int32_t>(lead.end),
                         static_cast<int32_t>(lead.step)});
      ++s;
    }
  }

  int32_t step() const { return step_; }

 private:
  bool starts_group(const std::vector<StridedSpan>& spans, int64_t s, int64_t last) const {
    if (!merge_ || last - s < kLatticeWidth) return false;
    const StridedSpan& lead = spans[s];
    const int64_t count = lead.count();
    if ((step_ != 0 && lead.step != step_) || lead.begin % lead.step + kLatticeWidth > lead.step ||
        lead.begin / lead.step + count > kv_len_ / lead.step) {
      return false;
    }
    for (int64_t j = 1; j < kLatticeWidth; ++j) {
      const StridedSpan& next = spans[s + j];
      if (next.step != lead.step || next.begin != lead.begin + j || next.count() != count) {
        return false;
      }
    }
    return true;
  }

  int64_t kv_len_;
  bool merge_;
  int32_t step_ = 0;
};

// The packed arrays on the host, in upload order.
struct HostSections {
  std::vector<int64_t> head_run_offsets;
  std::vector<RunRecord> runs;
  std::vector<TileRecord> tiles;
  std::vector<int32_t> schedule;
  std::vector<LaunchRecord> launch_records;  // RecordForm::kForAttention only
  std::vector<MaskRecord> masks;
  std::vector<SpanRecord> spans;
  std::vector<int32_t> columns;
  std::vector<int32_t> token_info;
  bool covers_every_row = true;
  int64_t listed_keys = 0;  // over every tile (DevicePlan::listed_keys)
  int64_t longest_tile_keys = 0;
  int32_t lattice_step = 0;  // of the lattice records; 0 without
  int64_t shared_runs = kPerHeadRuns;
  // Plans with key orders only (DevicePlanLayout::span_shifts, key_orders).
  std::vector<int32_t> span_shifts;
  std::vector<int32_t> key_orders;
  int64_t key_order_slots = 0;
};

// The orders of a plan with key orders in one array, each padded to the longest (kPaddingKey),
// and that length. Throws kUnsupported where the copy's rows would not fit int32.
std::vector<int32_t> concatenated_key_orders(const Plan& plan, int64_t& slots) {
  slots = 0;
  for (const std::vector<int32_t>& order : plan.key_orders) {
    slots = std::max(slots, static_cast<int64_t>(order.size()));
  }
  const auto rows = static_cast<int64_t>(plan.key_orders.size()) * slots;
  if (rows > std::numeric_limits<int32_t>::max()) {
    throw Error(ErrorCode::kUnsupported,
                "DevicePlan: key orders of " + std::to_string(rows) +
                    " slots together (orders × the longest), more than the kernels' int32 rows");
  }
  std::vector<int32_t> keys(static_cast<std::size_t>(rows), kPaddingKey);
  for (std::size_t o = 0; o < plan.key_orders.size(); ++o) {
    std::copy(plan.key_orders[o].begin(), plan.key_orders[o].end(),
              keys.begin() + static_cast<int64_t>(o) * slots);
  }
  return keys;
}

// Rows [begin, end) of a head's order (its positions, `order`) as a RowLattice (plan_view.cuh), or
// width 0 where they have no such form or its products would not fit int32.
RowLattice row_lattice(const std::vector<int64_t>& order, int64_t begin, int64_t end) {
  const int64_t count = end - begin;
  if (count <= 0) return {};
  const int64_t start = order[begin];
  const int64_t inner = count > 1 ? order[begin + 1] - start : 1;
  int64_t width = 1;
  while (width < count && order[begin + width] - order[begin + width - 1] == inner) ++width;
  const int64_t outer = width < count ? order[begin + width] - start : 0;
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  // The kernels form (r / width) · outer and (r mod width) · inner in int32.
  if (std::abs(outer) * ((count - 1) / width) > kInt32Max ||
      std::abs(inner) * (width - 1) > kInt32Max) {
    return {};
  }
  for (int64_t r = width; r < count; ++r) {
    if (order[begin + r] != start + r / width * outer + r % width * inner) return {};
  }
  return {static_cast<int32_t>(start), static_cast<int32_t>(width), static_cast<int32_t>(inner),
          static_cast<int32_t>(outer)};
}

// The run count every head slot's records share (DevicePlanLayout::shared_runs), or kPerHeadRuns.
int64_t shared_run_count(const HostSections& sections) {
  const std::vector<int64_t>& offsets = sections.head_run_offsets;
  const int64_t first = offsets[1] - offsets[0];
  const auto same_as_first = [&](std::size_t slot) {
    if (offsets[slot + 1] - offsets[slot] != first) return false;
    const auto begin = sections.runs.begin() + offsets[slot];
    return std::equal(
        begin, begin + first, sections.runs.begin(), [](const RunRecord& a, const RunRecord& b) {
          return a.order_begin == b.order_begin && a.start == b.start && a.step == b.step;
        });
  };
  for (std::size_t slot = 1; slot + 1 < offsets.size(); ++slot) {
    if (!same_as_first(slot)) return kPerHeadRuns;
  }
  return first;
}

HostSections pack_sections(const Plan& plan, RecordForm form) {
  HostSections sections;
  const int64_t slots = plan.head_slots();
  const bool key_ordered = plan.has_key_orders();
  if (key_ordered) {
    sections.key_orders = concatenated_key_orders(plan, sections.key_order_slots);
  }
  sections.head_run_offsets.reserve(static_cast<std::size_t>(slots) + 1);
  sections.head_run_offsets.push_back(0);
  sections.tiles.reserve(plan.tiles.size());
  sections.spans.reserve(plan.spans.size() + plan.strided_spans.size());
  LatticeMerger lattices(plan.shape.kv_len, form != RecordForm::kAsDeviceBuilders);
  // Per tile of a permuted head, its rows as arithmetic (launch records only).
  std::vector<RowLattice> tile_rows(form == RecordForm::kForAttention ? plan.tiles.size() : 0);
  // The positions of the last order materialised, reused by the heads that share it (a static
  // pattern's heads all do).
  std::vector<int64_t> order;
  int64_t order_slot = -1;
  const auto runs_of = [&](int64_t slot) {
    return std::span(plan.runs).subspan(
        static_cast<std::size_t>(plan.head_run_offsets[slot]),
        static_cast<std::size_t>(plan.head_run_offsets[slot + 1] - plan.head_run_offsets[slot]));
  };
  for (int64_t slot = 0; slot < slots; ++slot) {
    if (!tile_rows.empty() && !runs_of(slot).empty()) {
      if (order_slot < 0 || !std::ranges::equal(runs_of(slot), runs_of(order_slot))) {
        order = plan.query_order(slot);
        order_slot = slot;
      }
      for (int64_t t = plan.head_tile_offsets[slot]; t < plan.head_tile_offsets[slot + 1]; ++t) {
        tile_rows[t] = row_lattice(order, plan.tiles[t].begin, plan.tiles[t].end);
      }
    }
    int32_t order_begin = 0;
    for (int64_t r = plan.head_run_offsets[slot]; r < plan.head_run_offsets[slot + 1]; ++r) {
      const QueryRun& run = plan.runs[r];
      // Run records are never empty (query_rows.cuh counts where runs begin).
      if (run.count == 0) continue;
      sections.runs.push_back(
          {order_begin, static_cast<int32_t>(run.start), static_cast<int32_t>(run.step)});
      order_begin += static_cast<int32_t>(run.count);
    }
    sections.head_run_offsets.push_back(static_cast<int64_t>(sections.runs.size()));

    int64_t covered_rows = 0;
    for (int64_t t = plan.head_tile_offsets[slot]; t < plan.head_tile_offsets[slot + 1]; ++t) {
      const QueryTile& tile = plan.tiles[t];
      covered_rows += tile.end - tile.begin;  // validate() proved the tiles of a slot disjoint
      // The tile's key ranges: its spans (step 1), then its strided spans and lattices.
      const auto ranges_begin = static_cast<int64_t>(sections.spans.size());
      const int32_t key_order = plan.tile_key_order(t);
      // A key-ordered tile's spans as rows of the engine's copy (plan_view.cuh's kSpanInPlace).
      const int64_t first_row =
          key_order == kKeysInPlace ? 0 : key_order * sections.key_order_slots;
      for (int64_t s = plan.tile_span_offsets[t]; s < plan.tile_span_offsets[t + 1]; ++s) {
        const KeySpan& span = plan.spans[s];
        sections.spans.push_back({static_cast<int32_t>(first_row + span.begin),
                                  static_cast<int32_t>(first_row + span.end), 1});
        if (!key_ordered) continue;
        sections.span_shifts.push_back(
            key_order == kKeysInPlace
                ? kSpanInPlace
                : static_cast<int32_t>(plan.key_orders[key_order][span.end - 1] -
                                       (first_row + span.end - 1)));
      }
      lattices.append(plan.strided_spans, plan.tile_strided_offsets[t],
                      plan.tile_strided_offsets[t + 1], sections.spans);
      if (key_ordered) sections.span_shifts.resize(sections.spans.size(), kSpanInPlace);
      sections.tiles.push_back({static_cast<int32_t>(tile.begin), static_cast<int32_t>(tile.end),
                                static_cast<int32_t>(slot), plan.tile_masks[t], ranges_begin,
                                static_cast<int64_t>(sections.spans.size()),
                                plan.tile_column_offsets[t], plan.tile_column_offsets[t + 1]});
    }
    if (covered_rows != plan.shape.q_len) sections.covers_every_row = false;
  }

  sections.lattice_step = lattices.step();
  const std::vector<int64_t> keys = tile_keys(plan);
  sections.listed_keys = std::accumulate(keys.begin(), keys.end(), int64_t{0});
  if (!keys.empty()) sections.longest_tile_keys = *std::max_element(keys.begin(), keys.end());
  sections.schedule = heaviest_first(plan, keys);
  if (form == RecordForm::kForAttention) {
    sections.launch_records.reserve(sections.tiles.size());
    for (const int32_t t : sections.schedule) {
      const TileRecord& tile = sections.tiles[t];
      const bool has_range = tile.span_begin < tile.span_end;
      sections.launch_records.push_back(
          {tile, has_range ? sections.spans[tile.span_begin] : SpanRecord{}, tile_rows[t]});
    }
  }
  sections.shared_runs = shared_run_count(sections);  // a valid shape has a head slot

  bool needs_tokens = false;
  for (const MaskPolicy& policy : plan.masks) {
    sections.masks.push_back(make_mask_record(policy, plan.shape.kv_len));
    needs_tokens = needs_tokens || policy.needs_token_arrays();
  }
  sections.columns = plan.columns;
  if (needs_tokens) {
    sections.token_info.resize(static_cast<std::size_t>(plan.shape.kv_len));
    for (std::size_t key = 0; key < sections.token_info.size(); ++key) {
      sections.token_info[key] =
          mask_rule::pack_token(plan.token_media[key], plan.token_modality[key]);
    }
  }
  return sections;
}

// Appends `values` to the staging bytes at the next aligned offset and returns that offset.
template <class T>
std::size_t append_section(std::vector<std::byte>& staging, const std::vector<T>& values) {
  const std::size_t offset = align_section(staging.size());
  const std::size_t bytes = values.size() * sizeof(T);
  staging.resize(offset + bytes);
  if (bytes > 0) std::memcpy(staging.data() + offset, values.data(), bytes);
  return offset;
}

}  // namespace

namespace {

// Pass 0 of a plan that has only that one; a plan of several passes needs each uploaded.
int64_t only_pass(const Plan& plan) {
  if (plan.num_passes() != 1) {
    throw_invalid_argument("plan", "a plan of one pass (upload_passes uploads each pass)",
                           std::to_string(plan.num_passes()) + " passes");
  }
  return 0;
}

}  // namespace

DevicePlan::DevicePlan(const Plan& plan, void* stream)
    : DevicePlan(plan, only_pass(plan), stream) {}

DevicePlan::DevicePlan(const Plan& whole, int64_t pass, void* stream, RecordForm form) {
  whole.validate();
  upload(whole.pass(pass), stream, form);
}

DevicePlan::DevicePlan(Validated, const Plan& whole, int64_t pass, void* stream, RecordForm form) {
  upload(whole.pass(pass), stream, form);
}

void DevicePlan::upload(const Plan& plan, void* stream, RecordForm form) {
  check_int32_ranges(plan.shape);
  const HostSections sections = pack_sections(plan, form);

  std::vector<std::byte> staging;
  layout_.head_run_offsets = append_section(staging, sections.head_run_offsets);
  layout_.runs = append_section(staging, sections.runs);
  layout_.tiles = append_section(staging, sections.tiles);
  layout_.schedule = append_section(staging, sections.schedule);
  layout_.masks = append_section(staging, sections.masks);
  layout_.spans = append_section(staging, sections.spans);
  layout_.columns = append_section(staging, sections.columns);
  layout_.token_info = append_section(staging, sections.token_info);
  layout_.has_token_info = !sections.token_info.empty();
  // After every section a device builder writes, so that those keep the builders' offsets.
  layout_.launch_records = append_section(staging, sections.launch_records);
  layout_.has_launch_records = form == RecordForm::kForAttention;
  // Last, and only for plans with key orders: the other plans' buffers stay as they were.
  layout_.has_key_orders = !sections.key_orders.empty();
  if (layout_.has_key_orders) {
    layout_.span_shifts = append_section(staging, sections.span_shifts);
    layout_.key_orders = append_section(staging, sections.key_orders);
    layout_.key_order_slots = sections.key_order_slots;
    layout_.key_order_rows = static_cast<int64_t>(sections.key_orders.size());
  }
  layout_.shared_runs = sections.shared_runs;
  layout_.lattice_step = sections.lattice_step;
  layout_.gathers =
      !sections.columns.empty() ||
      std::any_of(sections.spans.begin(), sections.spans.end(),
                  [](const SpanRecord& range) { return range.width == 1 && range.step != 1; });
  layout_.bytes = align_section(staging.size());
  staging.resize(layout_.bytes);

  shape_ = plan.shape;
  num_tiles_ = plan.num_tiles();
  num_columns_ = static_cast<int64_t>(plan.columns.size());
  covers_every_row_ = sections.covers_every_row;
  listed_keys_ = sections.listed_keys;
  longest_tile_keys_ = sections.longest_tile_keys;
  stream_ = stream;
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  buffer_ = allocate_async(layout_.bytes, cuda_stream, "DevicePlan: allocation");
  // From pageable memory the copy returns once `staging` has been read, so it may go out of scope.
  const cudaError_t copied =
      cudaMemcpyAsync(buffer_, staging.data(), layout_.bytes, cudaMemcpyHostToDevice, cuda_stream);
  if (copied != cudaSuccess) {
    // The constructor throws, so no destructor will free the buffer; the copy error is the one to
    // report.
    cudaFreeAsync(std::exchange(buffer_, nullptr), cuda_stream);
    check_cuda(copied, "DevicePlan: cudaMemcpyAsync");
  }
}

DevicePlanLayout plan_layout(const PlanSectionCounts& counts) {
  DevicePlanLayout layout;
  std::size_t end = 0;
  auto section = [&](int64_t count, std::size_t element_bytes) {
    const std::size_t offset = align_section(end);
    end = offset + static_cast<std::size_t>(count) * element_bytes;
    return offset;
  };
  layout.head_run_offsets = section(counts.head_slots + 1, sizeof(int64_t));
  layout.runs = section(counts.runs, sizeof(RunRecord));
  layout.tiles = section(counts.tiles, sizeof(TileRecord));
  layout.schedule = section(counts.tiles, sizeof(int32_t));
  layout.masks = section(counts.masks, sizeof(MaskRecord));
  layout.spans = section(counts.spans, sizeof(SpanRecord));
  layout.columns = section(counts.columns, sizeof(int32_t));
  layout.token_info = section(counts.token_info, sizeof(int32_t));
  layout.has_token_info = counts.token_info > 0;
  layout.launch_records = section(0, sizeof(LaunchRecord));
  // Runs written on the device may differ from head to head; without runs every head is in the
  // identity order.
  layout.shared_runs = counts.runs == 0 ? 0 : kPerHeadRuns;
  layout.bytes = align_section(end);
  return layout;
}

void write_token_info(const ModalityLayout& layout, int32_t* token_info, void* stream) {
  const std::vector<uint8_t> modality = layout.token_types();
  const std::vector<int32_t> media = layout.token_media();
  std::vector<int32_t> packed(media.size());
  for (std::size_t key = 0; key < packed.size(); ++key) {
    packed[key] = mask_rule::pack_token(media[key], modality[key]);
  }
  // From pageable memory the copy returns once `packed` has been read.
  check_cuda(cudaMemcpyAsync(token_info, packed.data(), packed.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
             "write_token_info: cudaMemcpyAsync");
}

DevicePlan::DevicePlan(const PlanShape& shape, const DevicePlanLayout& layout, int64_t num_tiles,
                       int64_t num_columns, bool covers_every_row, std::size_t zeroed_bytes,
                       void* stream, int64_t listed_keys, int64_t longest_tile_keys)
    : shape_(shape),
      num_tiles_(num_tiles),
      num_columns_(num_columns),
      covers_every_row_(covers_every_row),
      listed_keys_(listed_keys),
      longest_tile_keys_(longest_tile_keys),
      layout_(layout),
      stream_(stream) {
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  buffer_ = allocate_async(layout_.bytes, cuda_stream, "DevicePlan: allocation");
  // On an error the constructor throws, so no destructor frees the buffer: this does.
  const cudaError_t zeroed = cudaMemsetAsync(buffer_, 0, zeroed_bytes, cuda_stream);
  if (zeroed != cudaSuccess) {
    cudaFreeAsync(std::exchange(buffer_, nullptr), cuda_stream);
    check_cuda(zeroed, "DevicePlan: cudaMemsetAsync");
  }
}

DevicePlan::~DevicePlan() {
  // Destructors cannot report errors; a failed free leaves the memory to the pool.
  if (buffer_ != nullptr) cudaFreeAsync(buffer_, static_cast<cudaStream_t>(stream_));
}

DevicePlan::DevicePlan(DevicePlan&& other) noexcept
    : shape_(other.shape_),
      num_tiles_(other.num_tiles_),
      num_columns_(other.num_columns_),
      covers_every_row_(other.covers_every_row_),
      listed_keys_(other.listed_keys_),
      longest_tile_keys_(other.longest_tile_keys_),
      layout_(other.layout_),
      buffer_(std::exchange(other.buffer_, nullptr)),
      stream_(other.stream_) {}

DevicePlan& DevicePlan::operator=(DevicePlan&& other) noexcept {
  if (this != &other) {
    if (buffer_ != nullptr) cudaFreeAsync(buffer_, static_cast<cudaStream_t>(stream_));
    shape_ = other.shape_;
    num_tiles_ = other.num_tiles_;
    num_columns_ = other.num_columns_;
    covers_every_row_ = other.covers_every_row_;
    listed_keys_ = other.listed_keys_;
    longest_tile_keys_ = other.longest_tile_keys_;
    layout_ = other.layout_;
    buffer_ = std::exchange(other.buffer_, nullptr);
    stream_ = other.stream_;
  }
  return *this;
}

void DevicePlan::release(void* stream) {
  if (buffer_ == nullptr) return;
  void* buffer = std::exchange(buffer_, nullptr);
  check_cuda(cudaFreeAsync(buffer, static_cast<cudaStream_t>(stream)), "DevicePlan: cudaFreeAsync");
}

PlanView make_plan_view(const DevicePlan& plan) {
  const auto* base = static_cast<const std::byte*>(plan.data());
  const DevicePlanLayout& layout = plan.layout();
  PlanView view{};
  view.head_run_offsets = reinterpret_cast<const int64_t*>(base + layout.head_run_offsets);
  view.runs = reinterpret_cast<const RunRecord*>(base + layout.runs);
  view.shared_runs = static_cast<int32_t>(layout.shared_runs);
  view.tiles = reinterpret_cast<const TileRecord*>(base + layout.tiles);
  view.schedule = reinterpret_cast<const int32_t*>(base + layout.schedule);
  view.launch_records = layout.has_launch_records
                            ? reinterpret_cast<const LaunchRecord*>(base + layout.launch_records)
                            : nullptr;
  view.masks = reinterpret_cast<const MaskRecord*>(base + layout.masks);
  view.spans = reinterpret_cast<const SpanRecord*>(base + layout.spans);
  view.columns = reinterpret_cast<const int32_t*>(base + layout.columns);
  view.token_info =
      layout.has_token_info ? reinterpret_cast<const int32_t*>(base + layout.token_info) : nullptr;
  view.span_shifts =
      layout.has_key_orders ? reinterpret_cast<const int32_t*>(base + layout.span_shifts) : nullptr;
  return view;
}

}  // namespace mmsparse::cuda
