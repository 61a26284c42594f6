#pragma once
// Calls that must end within a bound even when what they call does not: a transport's abort (NCCL's
// ncclCommAbort tears the communicator down in the calling thread and can wait for peers and for
// the device) must not keep a rank alive after its peer died.

#include <functional>

namespace mmsparse::dist::detail {

// Runs `work` on a thread of its own and waits at most `seconds` for it. Returns true when it
// returned in time (an exception it threw is rethrown here); false when it did not: the thread is
// then left running, detached, so `work` must own everything it touches (capture by value).
bool run_bounded(std::function<void()> work, double seconds);

}  // namespace mmsparse::dist::detail
