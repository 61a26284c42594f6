#pragma once
// A host copy of a plan that lives on the device (built there by kernels, or uploaded): its
// records copied back and decoded (plan_decode.h) into the host Plan they stand for, record for
// record what the host builder makes for the same selection. Plain C++.
//
// Cost: the records the plan holds, not the capacity its sections were sized for. After one copy
// of the sections up to the masks (runs, tiles, schedule, masks), only the key ranges and columns
// the real tiles reach are copied, then the tokens where the plan has them, then a plan with key
// orders' span shifts and orders: three to six copies, each waited for on the plan's stream (so
// the build it was queued behind finishes first).

#include <span>
#include <vector>

#include "cuda/runtime/engine.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse::cuda {

// The host plan of `passes` (pass 0 first; every pass of one shape), each decoded with its mask
// table `pass_masks[p]` (the policies its builder numbered: DeviceBuilder::mask_policies, a
// config's global table, an uploaded plan's masks). `device` is the one the buffers live on.
// Throws kInvalidArgument when the counts differ or there is no pass, kBackendError when a copy
// fails, when a pass's mask records differ from make_mask_record of its policies, or when its
// records are malformed.
Plan download_plan(std::span<const DevicePlan> passes,
                   const std::vector<std::vector<MaskPolicy>>& pass_masks, Device device);

}  // namespace mmsparse::cuda
