#pragma once
// The one definition of which (query, key) pairs a MaskPolicy keeps, for the host (CPU reference,
// plan coverage) and the device (both attention kernels' element masks). Plain C++ usable by nvcc
// and by the host compiler: a pure function of the policy's fields, the query's aligned position,
// the key's position and, for policies that read them, both tokens' packed info.
//
// Policy is MaskPolicy on the host and the kernels' MaskRecord (cuda/runtime/plan_view.cuh) on the
// device: both have the fields causal, window, window_sink, min_distance, period, band,
// same_media, modality_pairs and media_bidirectional, and needs_token_arrays(). Position is int64_t
// on the host and int32_t on the device (the upload checks that positions fit).
//
// Faster paths (the host's key ranges, the kernels' chunk classification and their interval bit
// sets for consecutive keys) are derived from this rule; the tests hold them to it.

#include <cstdint>

#include "mmsparse/layout.h"

#ifndef MMSPARSE_HOST_DEVICE
#ifdef __CUDACC__
#define MMSPARSE_HOST_DEVICE __host__ __device__
#else
#define MMSPARSE_HOST_DEVICE
#endif
#endif

namespace mmsparse::mask_rule {

// A token's packed info: ((media + 1) << kModalityBits) | modality, media -1 for text. The device
// plan stores its token array this way (one load per token).
inline constexpr int kModalityBits = 2;
inline constexpr int32_t kModalityMask = (1 << kModalityBits) - 1;
static_assert(kNumModalities <= (1 << kModalityBits), "modality codes must fit kModalityBits");
// The token of a query that precedes every key (kv_len < q_len, aligned position < 0): no policy
// that reads tokens keeps its pairs.
inline constexpr int32_t kNoToken = -1;

MMSPARSE_HOST_DEVICE inline int32_t pack_token(int32_t media, int32_t modality) {
  return ((media + 1) << kModalityBits) | modality;
}
MMSPARSE_HOST_DEVICE inline int32_t token_media(int32_t token) {
  return (token >> kModalityBits) - 1;
}
MMSPARSE_HOST_DEVICE inline int32_t token_modality(int32_t token) { return token & kModalityMask; }

// The distance terms for a pair at distance `distance` = aligned query - key: causal, the window
// (keys below window_sink exempt) and the minimum distance. The three are combined without
// short-circuits: the wgmma kernel's gathered element mask, which runs this per score, compiles
// to fewer instructions than with early returns.
template <class Policy, class Position>
MMSPARSE_HOST_DEVICE inline bool distance_keeps(const Policy& policy, Position distance,
                                                Position key) {
  const bool before_diagonal = policy.causal && distance < 0;
  const bool outside_window =
      policy.window > 0 && key >= policy.window_sink && distance >= policy.window;
  const bool too_near = policy.min_distance > 0 && distance < policy.min_distance;
  return !(before_diagonal | outside_window | too_near);
}

// The periodic band for a pair whose distance lies `phase` into its period (distance mod period,
// distances being non-negative: periodic policies are causal).
template <class Policy, class Position>
MMSPARSE_HOST_DEVICE inline bool band_keeps(const Policy& policy, Position phase) {
  return policy.period == 0 || phase < policy.band;
}

// Every positional term: distance_keeps and the band.
template <class Policy, class Position>
MMSPARSE_HOST_DEVICE inline bool positions_keep(const Policy& policy, Position aligned,
                                                Position key) {
  const Position distance = aligned - key;
  return distance_keeps(policy, distance, key) &&
         (policy.period == 0 || band_keeps(policy, distance % policy.period));
}

// The verdict of a policy that reads tokens, given its positional verdict: media_bidirectional
// keeps a pair of one media item whatever the positions say; same_media and modality_pairs then
// restrict what is kept. A query without a token (kNoToken) keeps nothing.
template <class Policy>
MMSPARSE_HOST_DEVICE inline bool tokens_keep(const Policy& policy, bool positions_kept,
                                             int32_t query_token, int32_t key_token) {
  if (query_token == kNoToken) return false;
  const int32_t media = token_media(query_token);
  const bool one_media = media >= 0 && media == token_media(key_token);
  if (!(positions_kept || (policy.media_bidirectional && one_media))) return false;
  if (policy.same_media && !one_media) return false;
  const int bit = token_modality(query_token) * kNumModalities + token_modality(key_token);
  return ((policy.modality_pairs >> bit) & 1u) != 0;
}

// The rule: whether `policy` keeps the pair of a query at aligned position `aligned` (query +
// kv_len - q_len) and `key`. The tokens are read only when the policy reads tokens (callers may
// pass kNoToken otherwise).
template <class Policy, class Position>
MMSPARSE_HOST_DEVICE inline bool keeps(const Policy& policy, Position aligned, Position key,
                                       int32_t query_token, int32_t key_token) {
  const bool positions_kept = positions_keep(policy, aligned, key);
  if (!policy.needs_token_arrays()) return positions_kept;
  return tokens_keep(policy, positions_kept, query_token, key_token);
}

}  // namespace mmsparse::mask_rule
