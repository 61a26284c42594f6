#pragma once
// Record-by-record comparison of a device-built plan with the upload of the host plan it stands
// for, where the device plan's spans and columns sections are sized for the most the shape and
// budgets allow (index builders, per-head configs): the sections up to the masks must match byte
// for byte (same offsets, zero padding), then the host plan's spans and columns must lie at the
// front of the device plan's larger sections; the token arrays, where masks read them, whole; and
// where the host plan reads keys through key orders, the shifts of its key ranges and the orders.

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "cuda/runtime/engine.h"
#include "mmsparse/plan.h"

namespace mmsparse::test {

void expect_same_records(const cuda::DevicePlan& built, const Plan& host, cudaStream_t stream);

// The same for a plan with grid heads built on the device (index_builders.h, config_builder.h),
// whose runs and tiles sections are capacities too: every section is compared at its own offset,
// the host plan's records at the front of each, and the tiles after the real ones must be empty and
// scheduled last, in order.
void expect_same_grid_records(const cuda::DevicePlan& built, const Plan& host, cudaStream_t stream);

// An upload for attention (RecordForm::kForAttention) of `host` (one pass) holds launch records:
// launch record i is tile schedule[i]'s record, then (where that tile has key ranges) its first
// key range, byte for byte, and where it gives the tile's rows as arithmetic, every row's position
// is the host plan's. Returns how many tiles have that arithmetic.
int64_t expect_launch_records_follow_schedule(const cuda::DevicePlan& plan, const Plan& host);

// The key range records of an uploaded plan, in order: {begin, end, step, width} (width > 1 for a
// lattice, cuda/runtime/plan_view.cuh).
std::vector<std::array<int32_t, 4>> uploaded_key_ranges(const cuda::DevicePlan& plan);

}  // namespace mmsparse::test
