#pragma once
// Whether a plan decoded from device records (cuda/runtime/plan_decode.h, plan_download.h) is the
// host plan it stands for: every record the same, pass by pass, with differences the device
// records cannot carry and that change no pair: query runs of count 0 (the upload drops them),
// token arrays where no mask reads them (the upload writes them only where one does), and of key
// orders (plan_decode.h) the padding slots after an order's last key, the order of a key-ordered
// tile without spans, and every order where no tile reads through one. Plain C++,
// shared by the CPU decoding tests and the GPU download tests.

#include "mmsparse/plan.h"

namespace mmsparse::test {

// Expects `decoded` to be `host` as above, and the pairs each head slot computes
// (count_plan_pairs) to agree.
void expect_decoded_plan(const Plan& decoded, const Plan& host);

}  // namespace mmsparse::test
