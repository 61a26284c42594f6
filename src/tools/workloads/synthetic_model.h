#pragma once
// The synthetic workload's model (synthetic.cpp describes it): its calibrated constants and head
// profiles, the counter-based randomness every draw goes through, and where a token's components
// sit in a head's rotary pairs. Only synthetic.cpp includes it.

#include <algorithm>
#include <array>
#include <cstdint>

#include "mmsparse/layout.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse::detail::synthetic {

// ---- Shape defaults: Qwen2.5-VL-7B --------------------------------------------------------------
constexpr int64_t kDefaultQueryHeads = 28;
constexpr int64_t kDefaultKvHeads = 4;
constexpr int64_t kDefaultHeadDim = 128;
// Below this the component blocks (relative, scene, identity, needle, important, sink) do not fit.
constexpr int64_t kMinHeadDim = 8;
// Feature buffers live on the stack; no attention model uses heads wider than this.
constexpr int64_t kMaxHeadDim = 512;

// ---- Key-side content ---------------------------------------------------------------------------
// Per-image sinks (BlindSight: Qwen's sinks sit at the start of every image) stay weaker than the
// first-token sink, which every later token shares.
constexpr float kMediaSinkStrength = 0.7f;
// Scene lattice cell, in tokens (4 tokens = 112 px): neighbourhoods of a few tokens look alike.
constexpr int64_t kSmoothCell = 4;
// Scene knots every this many token steps (8 frames, 4 s at 2 fps): content drifts slowly.
constexpr int64_t kDriftSteps = 4;
// Weight of the per-media (per-text-segment) topic against the local scene, before normalising:
// tokens of one image share about topic² / (1 + topic²) of their scene similarity.
constexpr float kTopicWeight = 0.6f;
// One important key at a random place in every span of this many tokens (64 at 128K): spread
// evenly, so that their count, and the vertical heads' sparsity, does not vary with the seed.
constexpr int64_t kImportantSpan = 2048;
// Important keys have amplitudes in [kImportantMin, 1] so the vertical lines differ in strength.
constexpr float kImportantMin = 0.5f;
// I.i.d. key noise per dimension: realistic keys are not low-rank, but each unit of it also adds
// noise to sharp heads, so it stays small next to the unit-norm feature blocks.
constexpr float kKeyNoise = 0.03f;
// Key signal blocks of unit norm (relative, scene, identity) plus rare sink/important/needle
// entries: the squared norm a typical key has, used to size query noise.
constexpr float kTypicalKeySignal = 3.0f;

// ---- Values -------------------------------------------------------------------------------------
constexpr float kValueNoise = 1.0f;
// Values correlate with content (neighbouring tokens carry similar values), so that outputs depend
// on which keys a plan keeps, not only on how many.
constexpr float kValueContent = 2.0f;
// Sink values shrink by this share of their sink strength: sinks act as implicit bias terms
// (Sun et al. 2024, cited by BlindSight §7), so dropping them should change outputs little.
constexpr float kSinkValueShrink = 0.9f;

// ---- Head behaviours ----------------------------------------------------------------------------
using enum HeadBehaviour;
// Four groups of 7 query heads (one per KV head of Qwen2.5-VL-7B), each a mix of behaviours:
// 11 local, 7 grid, 6 vertical, 4 dense in all. Other head counts take every (28 / q_heads)-th
// entry, so the groups start with different behaviours: 4 heads get one of each.
constexpr std::array<HeadBehaviour, 28> kBehaviourTable{
    kLocal,    kGrid,  kLocal,    kVertical, kLocal,    kDense, kGrid,       // KV head 0
    kGrid,     kLocal, kVertical, kLocal,    kDense,    kLocal, kGrid,       // KV head 1
    kVertical, kLocal, kGrid,     kLocal,    kVertical, kDense, kLocal,      // KV head 2
    kDense,    kLocal, kGrid,     kVertical, kLocal,    kGrid,  kVertical};  // KV head 3

// Query-side gains in logit units: a component whose query and key parts match exactly adds its
// gain to the logit.
struct QueryGains {
  float sink;       // first-token and per-image sinks
  float relative;   // RoPE relative position: local window, slash lines, nearby frames
  float smooth;     // scene: spatial neighbourhoods, same image, same document
  float identity;   // same spatial location in other frames (grid)
  float important;  // important keys (vertical lines)
  float needle;     // needles, read by the final question only
  float noise;      // standard deviation of the logit noise
};

struct BehaviourProfile {
  QueryGains sharpest;  // the behaviour's first head
  QueryGains softest;   // its last head; the others are interpolated by rank
};

// Indexed by HeadBehaviour; each entry {sink, relative, smooth, identity, important, needle,
// noise}. CALIBRATED (docs/workloads.md, tests/cpu/test_calibration.cpp): the default preset at
// 128K gives mean oracle density at recall 0.95 near MMInference's 5.78% with about half the heads
// under 2%. Density is roughly exponential in the gains, so small changes move it a lot.
constexpr std::array<BehaviourProfile, 4> kProfiles{{
    // local: relative position and scene dominate.
    {{16.0f, 14.0f, 8.0f, 3.0f, 2.0f, 4.0f, 1.0f}, {11.0f, 8.5f, 5.0f, 2.0f, 1.0f, 2.0f, 1.45f}},
    // grid: location identity dominates, a little relative position for temporal decay.
    {{16.0f, 5.0f, 3.0f, 11.0f, 2.0f, 4.0f, 1.0f}, {12.0f, 3.5f, 2.2f, 7.8f, 1.2f, 2.4f, 1.4f}},
    // vertical: sinks, important keys and needles.
    {{14.0f, 3.0f, 2.0f, 2.0f, 14.0f, 20.0f, 1.0f}, {12.0f, 2.5f, 1.5f, 1.5f, 12.0f, 18.0f, 1.2f}},
    // dense: weak structure under strong noise.
    {{4.0f, 2.0f, 2.0f, 1.0f, 1.0f, 2.0f, 2.8f}, {3.0f, 1.0f, 1.0f, 0.5f, 0.5f, 1.0f, 2.3f}},
}};

// ---- Counter-based randomness -------------------------------------------------------------------
// Streams keep the draws of different components independent.
enum class Stream : uint64_t {
  kRelativePhase = 1,
  kScene,
  kTopic,
  kIdentity,
  kImportant,
  kNeedle,
  kKeyNoise,
  kValueNoise,
  kQueryNoise,
};

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // splitmix64's increment

constexpr uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The key of one tuple; draws of it are draw(key, 0), draw(key, 1), ...
constexpr uint64_t hash_key(uint64_t seed, Stream stream, uint64_t a = 0, uint64_t b = 0,
                            uint64_t c = 0, uint64_t d = 0) {
  uint64_t h = mix64(seed + kGolden * (static_cast<uint64_t>(stream) + 1));
  for (uint64_t word : {a, b, c, d}) h = mix64(h + kGolden + word);
  return h;
}

constexpr uint64_t draw(uint64_t key, uint64_t n) { return mix64(key + kGolden * (n + 1)); }

// Uniform in [0, 1) from the top 24 bits.
constexpr float uniform(uint64_t bits) {
  constexpr float kTwoToMinus24 = 1.0f / 16777216.0f;
  return static_cast<float>(bits >> 40) * kTwoToMinus24;
}

// Approximately standard normal: the Irwin-Hall sum of the four 16-bit words (mean 2·65535,
// variance 4·(65536² − 1)/12), exact in integers and free of libm.
constexpr float gaussian(uint64_t bits) {
  constexpr int64_t kMean = 2 * 65535;
  constexpr float kInverseStd = 1.0f / 37837.23f;  // 1 / sqrt(4 · (65536² − 1) / 12)
  const int64_t sum = static_cast<int64_t>((bits & 0xFFFF) + ((bits >> 16) & 0xFFFF) +
                                           ((bits >> 32) & 0xFFFF) + (bits >> 48));
  return static_cast<float>(sum - kMean) * kInverseStd;
}

// ---- Geometry -----------------------------------------------------------------------------------
// Rotary-pair blocks of one head dimension, proportional to Qwen2.5-VL's 128 = 2 × 64 pairs:
// relative 24 pairs (the 16 t pairs and the 8 fastest h pairs), scene 16, identity 21, then one
// pair each for needles, important keys and sinks (the slowest, nearly unrotated at our ids).
struct Blocks {
  int64_t pairs = 0;
  int64_t relative_end = 0;  // relative [0, relative_end)
  int64_t scene_end = 0;     // scene [relative_end, scene_end)
  int64_t identity_end = 0;  // identity [scene_end, identity_end)
  int64_t needle = 0, important = 0, sink = 0;
  // M-RoPE sections: pairs [0, t_end) rotate by t ids, [t_end, h_end) by h, the rest by w.
  int64_t t_end = 0, h_end = 0;

  explicit Blocks(int64_t head_dim) : pairs(head_dim / 2) {
    constexpr int64_t kSpecialPairs = 3;  // needle, important, sink
    const int64_t free = pairs - kSpecialPairs;
    relative_end = std::max<int64_t>(1, pairs * 3 / 8);
    scene_end = relative_end + std::clamp<int64_t>(pairs / 4, 0, free - relative_end);
    identity_end = std::max(scene_end, free);
    needle = free;
    important = free + 1;
    sink = free + 2;
    t_end = pairs / 4;
    h_end = t_end + pairs * 3 / 8;
  }
  // Dimension of feature element e of the block [begin, end): the first halves of the pairs, then
  // their second halves.
  int64_t dim(int64_t begin, int64_t end, int64_t e) const {
    const int64_t width = end - begin;
    return e < width ? begin + e : pairs + begin + (e - width);
  }
};

// Where a token is: modality, media coordinates, rope ids.
struct Site {
  Modality modality = Modality::kText;
  int32_t media = -1;  // media index, -1 for text
  int64_t segment = 0;
  int64_t frame = 0, row = 0, col = 0;  // inside the media (vision tokens)
  std::array<int64_t, 3> rope{};        // M-RoPE (t, h, w)
  bool question = false;                // inside the final question
};

// A token as one KV group sees it before any head-specific part: where it is and its content
// features. Its KV head's key and value and all the group's queries are built from it.
struct Token {
  int64_t position = 0;
  int64_t kv_head = 0;
  Site site;
  std::array<float, kMaxHeadDim> scene;     // unit scene feature (first scene_width entries)
  std::array<float, kMaxHeadDim> identity;  // unit identity feature (first identity_width entries)
};

}  // namespace mmsparse::detail::synthetic
