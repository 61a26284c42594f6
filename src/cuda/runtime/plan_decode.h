#pragma once
// A device plan's records, copied back to the host, decoded into the host Plan they stand for:
// the inverse of the upload's packing (device_plan.cu) and of what the device builders write.
// Plain C++ (the records of plan_view.cuh compile without CUDA), so the decoding is tested on
// host byte images without a GPU; plan_download.h copies the records off the device.
//
// What the records do not hold, the decoding takes or leaves:
//  * mask policies: a record clamps windows, distances and periods to kv_len (make_mask_record),
//    so the policies come from the builder that wrote them (the caller's `masks`, table order);
//  * runs of count 0 (the upload drops them; builders make none): the decoded order has none;
//  * token arrays: decoded from the packed token_info where the plan has one, which the upload
//    writes only when a mask needs tokens;
//  * sections sized as capacities (index_builders.h): only the real records are read, the empty
//    tiles after the real ones are checked to be empty and dropped;
//  * key orders (plan.h): a tile's order is read off its spans, rows of the engine's copy whose
//    span shifts are not kSpanInPlace, so a key-ordered tile without spans decodes as in place,
//    and each order ends at its last key (trailing padding slots, which no span may cover, are
//    dropped). Neither changes a pair.
// Spans (step 1), strided spans (step >= 2) and lattices (width > 1: `width` strided spans of
// consecutive begins) become the plan's spans and strided spans in record order, so the decoded
// plan equals the host builder's record for record.

#include <cstdint>
#include <vector>

// plan_view.cuh marks two inline helpers __host__ __device__. Translation units that include no
// CUDA header (this decoding and its CPU test, compiled by the host compiler) see them as plain
// functions; where a CUDA header came first (nvcc, or cuda_runtime.h), its definitions stand.
#if !defined(__CUDACC__) && !defined(__host__)
#define __host__
#define __device__
#endif
#include "cuda/runtime/plan_view.cuh"
#include "mmsparse/plan.h"

namespace mmsparse::cuda {

// One pass's records as they lie in its buffer (DevicePlanLayout's sections).
struct PlanRecords {
  PlanShape shape;
  std::vector<int64_t> head_run_offsets;  // [head_slots + 1] into runs
  std::vector<RunRecord> runs;            // at least head_run_offsets.back() records
  // Every record of the tiles section: the real tiles (never empty, head slot by head slot), then
  // any empty tiles of a capacity section (all fields zero).
  std::vector<TileRecord> tiles;
  std::vector<SpanRecord> key_ranges;  // at least the largest span_end of a real tile
  std::vector<int32_t> columns;        // at least the largest column_end of a real tile
  std::vector<int32_t> token_info;     // [kv_len] packed tokens, or empty when the plan has none
  // Plans with key orders only (DevicePlanLayout::span_shifts, key_orders), else empty: a shift
  // per key range record (at least as many as key_ranges), and the orders' keys, order o at rows
  // [o * key_order_slots, (o + 1) * key_order_slots).
  std::vector<int32_t> span_shifts;
  std::vector<int32_t> key_orders;
  int64_t key_order_slots = 0;
};

// The host plan of one pass: `masks` is its mask table (tile records index it). Throws
// Error(kBackendError) naming the record when the records are malformed: offsets out of order or
// range, a run that does not begin after the one before, a tile of another head slot's order, a
// mask index past the table, a non-empty tile after an empty one, a key range of step or width
// below 1. The plan is not validated here: records of a validated upload or of a device builder
// (tested record for record against the host builder) make a valid plan, and its readers
// (count_plan_pairs, coverage) validate it anyway; a validation costs a sort of every tile's
// columns, seconds at 128K tokens. `records` is taken by value: its columns become the plan's.
Plan decode_plan_records(PlanRecords records, std::vector<MaskPolicy> masks);

// The largest span_end and column_end over the real (non-empty) tiles among `tiles`: how many key
// range and column records the decoding reads.
struct RecordExtents {
  int64_t key_ranges = 0;
  int64_t columns = 0;
};
RecordExtents real_record_extents(const std::vector<TileRecord>& tiles);

}  // namespace mmsparse::cuda
