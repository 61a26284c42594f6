// Host copies of device plans (plan_download.h): the records copied back, then decoded.

#include "cuda/runtime/plan_download.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/runtime/plan_decode.h"
#include "cuda/runtime/plan_view.cuh"
#include "mmsparse/status.h"

namespace mmsparse::cuda {
namespace {

// Makes `device` current for the copies and restores the caller's device afterwards.
class CurrentDevice {
 public:
  explicit CurrentDevice(Device device) {
    check_cuda(cudaGetDevice(&previous_), "download_plan: cudaGetDevice");
    check_cuda(cudaSetDevice(device.index), "download_plan: cudaSetDevice");
  }
  ~CurrentDevice() { cudaSetDevice(previous_); }  // destructors cannot report errors
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
};

// `count` records of T at byte `offset` of the plan's buffer, after the work queued on its stream.
template <class T>
std::vector<T> copy_records(const DevicePlan& plan, std::size_t offset, int64_t count) {
  std::vector<T> records(static_cast<std::size_t>(count));
  if (count == 0) return records;
  const auto stream = static_cast<cudaStream_t>(plan.stream());
  check_cuda(cudaMemcpyAsync(records.data(), static_cast<const std::byte*>(plan.data()) + offset,
                             records.size() * sizeof(T), cudaMemcpyDeviceToHost, stream),
             "download_plan: cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(stream), "download_plan: cudaStreamSynchronize");
  return records;
}

// Records of T in the sections' bytes [offset, offset + count · sizeof(T)) of a host copy.
template <class T>
std::vector<T> records_at(const std::vector<std::byte>& bytes, std::size_t offset, int64_t count) {
  std::vector<T> records(static_cast<std::size_t>(count));
  const std::size_t size = records.size() * sizeof(T);
  if (offset + size > bytes.size()) {
    throw Error(ErrorCode::kBackendError,
                "download_plan: a section ends at byte " + std::to_string(offset + size) +
                    ", past the " + std::to_string(bytes.size()) + " bytes before the key ranges");
  }
  if (size > 0) std::memcpy(records.data(), bytes.data() + offset, size);
  return records;
}

// The mask records must be those of the policies, so that the policies are the plan's.
void check_mask_records(const std::vector<MaskRecord>& records,
                        const std::vector<MaskPolicy>& policies, int64_t kv_len, int64_t pass) {
  const std::string where = "download_plan: pass " + std::to_string(pass) + " ";
  if (records.size() != policies.size()) {
    throw Error(ErrorCode::kBackendError, where + "has " + std::to_string(records.size()) +
                                              " mask records, its builder " +
                                              std::to_string(policies.size()) + " policies");
  }
  for (std::size_t m = 0; m < records.size(); ++m) {
    const MaskRecord expected = make_mask_record(policies[m], kv_len);
    if (std::memcmp(&expected, &records[m], sizeof(MaskRecord)) != 0) {
      throw Error(ErrorCode::kBackendError,
                  where + "mask record " + std::to_string(m) + " is not its builder's policy");
    }
  }
}

Plan download_pass(const DevicePlan& plan, std::vector<MaskPolicy> masks, int64_t pass) {
  const DevicePlanLayout& layout = plan.layout();
  const PlanShape& shape = plan.shape();
  // Offsets, runs, tiles, schedule and masks: the sections before the key ranges, in one copy.
  const std::vector<std::byte> header = copy_records<std::byte>(plan, 0, layout.spans);
  PlanRecords records;
  records.shape = shape;
  records.head_run_offsets =
      records_at<int64_t>(header, layout.head_run_offsets, shape.head_slots() + 1);
  records.runs = records_at<RunRecord>(header, layout.runs, records.head_run_offsets.back());
  records.tiles = records_at<TileRecord>(header, layout.tiles, plan.num_tiles());
  // Padding after the masks is below one record (16-byte sections, 40-byte records).
  const auto mask_count = static_cast<int64_t>((layout.spans - layout.masks) / sizeof(MaskRecord));
  check_mask_records(records_at<MaskRecord>(header, layout.masks, mask_count), masks, shape.kv_len,
                     pass);
  const RecordExtents extents = real_record_extents(records.tiles);
  records.key_ranges = copy_records<SpanRecord>(plan, layout.spans, extents.key_ranges);
  records.columns = copy_records<int32_t>(plan, layout.columns, extents.columns);
  if (layout.has_token_info) {
    records.token_info = copy_records<int32_t>(plan, layout.token_info, shape.kv_len);
  }
  // An upload's or a per-head config's key-ordered spans are rows of the engine's copy.
  if (layout.has_key_orders) {
    records.span_shifts = copy_records<int32_t>(plan, layout.span_shifts, extents.key_ranges);
    records.key_orders = copy_records<int32_t>(plan, layout.key_orders, layout.key_order_rows);
    records.key_order_slots = layout.key_order_slots;
  }
  return decode_plan_records(records, std::move(masks));
}

}  // namespace

Plan download_plan(std::span<const DevicePlan> passes,
                   const std::vector<std::vector<MaskPolicy>>& pass_masks, Device device) {
  if (passes.empty() || pass_masks.size() != passes.size()) {
    throw_invalid_argument(
        "download_plan pass_masks",
        "one mask table per pass, at least one pass (" + std::to_string(passes.size()) + " passes)",
        std::to_string(pass_masks.size()) + " tables");
  }
  const CurrentDevice current(device);
  Plan plan = download_pass(passes[0], pass_masks[0], 0);
  for (std::size_t p = 1; p < passes.size(); ++p) {
    plan.extra_passes.push_back(download_pass(passes[p], pass_masks[p], static_cast<int64_t>(p)));
  }
  if (plan.num_passes() > 1) plan.validate();  // the passes' shapes against pass 0's
  return plan;
}

}  // namespace mmsparse::cuda
