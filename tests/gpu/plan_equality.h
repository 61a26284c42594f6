#pragma once
// Whether a plan decoded from device records (cuda/runtime/plan_decode.h, plan_download.h) is the
// host plan it stands for: every record the same, pass by pass, with two differences the device
// records cannot carry and that change no pair: query runs of count 0 (the upload drops them) and
// token arrays where no mask reads them (the upload writes them only where one does). Plain C++,
// shared by the CPU decoding tests and the GPU download tests.

#include "mmsparse/plan.h"

namespace mmsparse::test {

// Expects `decoded` to be `host` as above, and the pairs each head slot computes
// (count_plan_pairs) to agree.
void expect_decoded_plan(const Plan& decoded, const Plan& host);

}  // namespace mmsparse::test
