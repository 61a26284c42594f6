// Synthetic VLM-like Q, K, V. SYNTHETIC: every figure measured on them must say so.
//
// THE MODEL (docs/workloads.md has the calibration and the measured table)
//
// Positions. Tokens get Qwen2-VL M-RoPE ids (t, h, w): text (p, p, p); a vision token at frame f,
// row r, column c of a media run starting at id s gets (s + f·kTemporalIdsPerStep, s + r, s + c),
// and the text counter continues past the run by its largest extent, as get_rope_index does.
// Rotary pairs follow Qwen2.5-VL: theta 1e6, the 64 pairs of head_dim 128 split 16/24/24 between
// t, h and w (highest frequencies to t), rotate-half convention (pair p = dims p and p + D/2).
// Video runs interrupted by text (the mixed preset) restart t at each run, as Qwen3-VL does.
//
// Content. Every vector is a sum of components, each in its own block of rotary pairs, so that the
// logit (scaled dot product after RoPE) of query i on key j is, up to noise,
//   sink·s_j + relative·R(i, j) + smooth·S_i·S_j + identity·I_i·I_j + important·a_j
//     + needle·n_j·[i in the final question]
// where the query-side gains (sink, relative, ...) are per query head and in logit units, and
//  - s_j  sink strength: 1 on token 0 (first-token sink), kMediaSinkStrength on every media item's
//         vision_start marker and first vision token (per-image sinks); lowest-frequency pair.
//  - R    one fixed unit vector per KV head in the high-frequency pairs, the same for q and k, so
//         RoPE turns it into a function of the position difference: a local window and slash
//         lines for text, the same and nearby frames for video (pairs of the t section).
//  - S    a unit "scene" feature: for vision tokens value noise that is smooth over (row, col)
//         (lattice cells of kSmoothCell tokens), drifts over frames (knots every kDriftSteps
//         steps) and shares a per-media topic; for text tokens a per-segment topic plus
//         per-token noise. Gives spatial neighbourhoods in nearby frames, intra-image attention
//         and intra-document attention.
//  - I    a unit identity of a spatial location (media, row, col), the same in every frame: the
//         same location in other frames matches exactly, which is what a grid head reads. Text
//         tokens get a per-token identity.
//  - a_j  important keys: one at a random place in every kImportantSpan tokens, amplitude in
//         [kImportantMin, 1]; vertical heads read them from every query (vertical lines).
//  - n_j  needles (WorkloadSpec::needles), planted in media tokens; the final question's queries
//         read them, vertical heads strongly.
// Noise: keys carry i.i.d. noise of kKeyNoise per dimension; queries carry noise sized so that its
// logit noise against a typical key has the head's `noise` standard deviation.
// Values: i.i.d. noise plus kValueContent times the key's scene and identity features; sinks carry
// small values (a sink is a no-op bias: dropping it changes the output little).
//
// Heads. Query heads get behaviours from a fixed 28-entry table (11 local, 7 grid, 6 vertical, 4
// dense, mixed inside every group of 7 query heads that share a KV head); other head counts take
// every (28 / q_heads)-th entry. A head's gains are interpolated between its behaviour's sharpest
// and softest profile by its rank among the heads of that behaviour, so every behaviour spans a
// range of sparsity. GQA: everything on the key side is per KV head; query heads of one group
// differ only by their gains and query noise. Gains depend on the head index only, not on the seed,
// so the calibration holds for every seed.
//
// Randomness. Every number is a counter-based hash (splitmix64 finaliser) of (seed, stream,
// indices), so any rows can be generated alone, in any order, on any thread, with identical
// results. Gaussians are Irwin-Hall sums of four 16-bit uniforms (no libm); rotary tables use
// std::cos/sin in double precision rounded to float, the only place a platform's libm enters.

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"
#include "tools/workloads/presets.h"
#include "tools/workloads/rope.h"

namespace mmsparse {

using detail::fill_rope_tables;
using detail::kRopeFineSpan;
using detail::kTemporalIdsPerStep;
using detail::segment_rope_starts;

namespace {

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

float lerp(float a, float b, float t) { return a + (b - a) * t; }

QueryGains interpolate(const QueryGains& a, const QueryGains& b, float t) {
  return {lerp(a.sink, b.sink, t),           lerp(a.relative, b.relative, t),
          lerp(a.smooth, b.smooth, t),       lerp(a.identity, b.identity, t),
          lerp(a.important, b.important, t), lerp(a.needle, b.needle, t),
          lerp(a.noise, b.noise, t)};
}

// Where the final question (the last text segment) begins; the length if the layout ends in media.
int64_t question_begin(const ModalityLayout& layout) {
  const auto& segments = layout.segments();
  if (segments.empty() || segments.back().modality != Modality::kText) return layout.length();
  return segments.back().begin;
}

// Scales `count` entries of `values` to unit norm (left alone if all zero).
void normalise(float* values, int64_t count) {
  float squares = 0.0f;
  for (int64_t e = 0; e < count; ++e) squares += values[e] * values[e];
  if (squares <= 0.0f) return;
  const float inverse = 1.0f / std::sqrt(squares);
  for (int64_t e = 0; e < count; ++e) values[e] *= inverse;
}

}  // namespace

std::string_view head_behaviour_name(HeadBehaviour behaviour) {
  switch (behaviour) {
    case kLocal: return "local";
    case kGrid: return "grid";
    case kVertical: return "vertical";
    case kDense: return "dense";
  }
  return "unknown";
}

HeadBehaviour head_behaviour_from_name(std::string_view name, const std::string& argument) {
  for (HeadBehaviour behaviour : {kLocal, kGrid, kVertical, kDense}) {
    if (head_behaviour_name(behaviour) == name) return behaviour;
  }
  std::string given = "\"";
  given.append(name).push_back('"');
  throw_invalid_argument(argument, "local, grid, vertical or dense", given);
}

// Generates the vectors of one workload; holds only derived, read-only state.
class WorkloadGenerator {
 public:
  explicit WorkloadGenerator(const Workload& workload)
      : w_(workload),
        blocks_(workload.spec_.head_dim),
        head_dim_(workload.spec_.head_dim),
        group_(workload.spec_.q_heads / workload.spec_.kv_heads),
        scene_width_(2 * (blocks_.scene_end - blocks_.relative_end)),
        identity_width_(2 * (blocks_.identity_end - blocks_.scene_end)) {
    const auto& segments = w_.layout_.segments();
    question_begin_ = w_.question_begin_;
    for (const Media& media : w_.layout_.media()) {
      if (media.start_marker >= 0) media_sinks_.push_back(media.start_marker);
    }
    for (const Segment& segment : segments) {
      if (segment.modality != Modality::kText && segment.first_frame == 0) {
        media_sinks_.push_back(segment.begin);
      }
    }
    std::sort(media_sinks_.begin(), media_sinks_.end());
    for (const Needle& needle : w_.needles_) needle_keys_.push_back(needle.key);
    std::sort(needle_keys_.begin(), needle_keys_.end());
    query_gains_ = head_gains(w_.behaviours_);
    relative_ = relative_vectors();
  }

  // Fills the derived members of a workload whose spec and layout are set.
  static void prepare(Workload& workload);

  Site site(int64_t position) const {
    const auto& segments = w_.layout_.segments();
    const auto after = std::upper_bound(
        segments.begin(), segments.end(), position,
        [](int64_t value, const Segment& segment) { return value < segment.begin; });
    const auto index = static_cast<int64_t>(std::prev(after) - segments.begin());
    const Segment& segment = segments[index];
    const int64_t start = w_.segment_rope_start_[index];
    Site site;
    site.modality = segment.modality;
    site.segment = index;
    site.question = position >= question_begin_;
    if (segment.modality == Modality::kText) {
      const int64_t id = start + (position - segment.begin);
      site.rope = {id, id, id};
      return site;
    }
    const Grid& grid = w_.layout_.media()[segment.media].grid;
    const int64_t index_in_media =
        segment.first_frame * grid.frame_tokens() + (position - segment.begin);
    site.media = segment.media;
    site.frame = index_in_media / grid.frame_tokens();
    site.row = index_in_media % grid.frame_tokens() / grid.w;
    site.col = index_in_media % grid.w;
    site.rope = {start + (site.frame - segment.first_frame) * kTemporalIdsPerStep, start + site.row,
                 start + site.col};
    return site;
  }

  // Describes `position` for KV head `kv_head` into `token` (reused: no allocation per token).
  void describe(int64_t kv_head, int64_t position, Token& token) const {
    token.position = position;
    token.kv_head = kv_head;
    token.site = site(position);
    scene_features(kv_head, position, token.site, token.scene.data(), scene_width_);
    identity_features(kv_head, position, token.site, token.identity.data(), identity_width_);
  }

  // k, v [head_dim] of the token's KV head.
  void key_value(const Token& token, float* k, float* v) const {
    const int64_t position = token.position;
    std::fill(k, k + head_dim_, 0.0f);
    add_relative(token.kv_head, 1.0f, k);
    for (int64_t e = 0; e < scene_width_; ++e) {
      k[blocks_.dim(blocks_.relative_end, blocks_.scene_end, e)] += token.scene[e];
    }
    for (int64_t e = 0; e < identity_width_; ++e) {
      k[blocks_.dim(blocks_.scene_end, blocks_.identity_end, e)] += token.identity[e];
    }
    const float sink = sink_strength(position);
    k[blocks_.sink] += sink;
    k[blocks_.important] += important_amplitude(position);
    if (std::binary_search(needle_keys_.begin(), needle_keys_.end(), position)) {
      k[blocks_.needle] += 1.0f;
    }
    const uint64_t noise_key = hash_key(w_.spec_.seed, Stream::kKeyNoise, token.kv_head, position);
    for (int64_t d = 0; d < head_dim_; ++d) k[d] += kKeyNoise * gaussian(draw(noise_key, d));
    rotate(token.site, k);

    // Values: noise plus content (scene, then identity features), small on sinks.
    const uint64_t value_key =
        hash_key(w_.spec_.seed, Stream::kValueNoise, token.kv_head, position);
    const float shrink = 1.0f - kSinkValueShrink * sink;
    for (int64_t d = 0; d < head_dim_; ++d) {
      float content = 0.0f;
      if (d < scene_width_) {
        content = token.scene[d];
      } else if (d < scene_width_ + identity_width_) {
        content = token.identity[d - scene_width_];
      }
      v[d] = shrink * (kValueNoise * gaussian(draw(value_key, d)) + kValueContent * content);
    }
  }

  // q [head_dim] of query head `q_head`, one of the token's KV group.
  void query(int64_t q_head, const Token& token, float* q) const {
    const QueryGains& gains = query_gains_[q_head];
    // Query parts are gain · sqrt(head_dim) times the key part, so that the scaled dot product
    // adds `gain` where they match.
    const float root = std::sqrt(static_cast<float>(head_dim_));
    std::fill(q, q + head_dim_, 0.0f);
    add_relative(token.kv_head, gains.relative * root, q);
    for (int64_t e = 0; e < scene_width_; ++e) {
      q[blocks_.dim(blocks_.relative_end, blocks_.scene_end, e)] +=
          gains.smooth * root * token.scene[e];
    }
    for (int64_t e = 0; e < identity_width_; ++e) {
      q[blocks_.dim(blocks_.scene_end, blocks_.identity_end, e)] +=
          gains.identity * root * token.identity[e];
    }
    q[blocks_.sink] += gains.sink * root;
    q[blocks_.important] += gains.important * root;
    if (token.site.question) q[blocks_.needle] += gains.needle * root;
    // Noise whose dot product with a typical key has standard deviation gains.noise (in logits).
    const float typical_key = std::sqrt(kTypicalKeySignal + kKeyNoise * kKeyNoise * head_dim_);
    const float noise = gains.noise * root / typical_key;
    const uint64_t noise_key =
        hash_key(w_.spec_.seed, Stream::kQueryNoise, q_head, token.position);
    for (int64_t d = 0; d < head_dim_; ++d) q[d] += noise * gaussian(draw(noise_key, d));
    rotate(token.site, q);
  }

 private:
  static std::vector<QueryGains> head_gains(const std::vector<HeadBehaviour>& behaviours) {
    std::array<int64_t, 4> count{};
    for (HeadBehaviour b : behaviours) ++count[static_cast<int>(b)];
    std::array<int64_t, 4> rank{};
    std::vector<QueryGains> gains;
    for (HeadBehaviour b : behaviours) {
      const auto index = static_cast<int>(b);
      const float t =
          count[index] > 1 ? static_cast<float>(rank[index]) / (count[index] - 1) : 0.0f;
      gains.push_back(interpolate(kProfiles[index].sharpest, kProfiles[index].softest, t));
      ++rank[index];
    }
    return gains;
  }

  // Each KV head's fixed unit relative-position vector [kv_heads, head_dim]: equal weight on every
  // pair of the block, a random phase per pair.
  std::vector<float> relative_vectors() const {
    std::vector<float> vectors(static_cast<std::size_t>(w_.spec_.kv_heads * head_dim_), 0.0f);
    const int64_t pairs = blocks_.relative_end;
    const double amplitude = 1.0 / std::sqrt(static_cast<double>(pairs));
    constexpr double kTwoPi = 6.28318530717958647692;
    for (int64_t g = 0; g < w_.spec_.kv_heads; ++g) {
      const uint64_t key = hash_key(w_.spec_.seed, Stream::kRelativePhase, g);
      float* x = vectors.data() + g * head_dim_;
      for (int64_t p = 0; p < pairs; ++p) {
        const double phase = kTwoPi * uniform(draw(key, p));
        x[p] = static_cast<float>(amplitude * std::cos(phase));
        x[blocks_.pairs + p] = static_cast<float>(amplitude * std::sin(phase));
      }
    }
    return vectors;
  }

  void add_relative(int64_t kv_head, float scale, float* x) const {
    const float* u = relative_.data() + kv_head * head_dim_;
    for (int64_t p = 0; p < blocks_.relative_end; ++p) {
      x[p] += scale * u[p];
      x[blocks_.pairs + p] += scale * u[blocks_.pairs + p];
    }
  }

  // Unit scene feature [width].
  void scene_features(int64_t kv_head, int64_t position, const Site& where, float* out,
                      int64_t width) const {
    if (width == 0) return;
    const uint64_t seed = w_.spec_.seed;
    if (where.modality == Modality::kText) {
      // Per-segment topic plus per-token content.
      const uint64_t topic = hash_key(seed, Stream::kTopic, kv_head, 0, where.segment);
      const uint64_t own = hash_key(seed, Stream::kScene, kv_head, 0, position);
      for (int64_t e = 0; e < width; ++e) {
        out[e] = kTopicWeight * gaussian(draw(topic, e)) + gaussian(draw(own, e));
      }
      normalise(out, width);
      return;
    }
    // Value noise: smoothstep-weighted lattice corners in (row, col), linear between knots in
    // time, plus the media's topic (which drifts with the same knots).
    const auto media = static_cast<uint64_t>(where.media) + 1;
    const int64_t knot = where.frame / kDriftSteps;
    const float drift = static_cast<float>(where.frame % kDriftSteps) / kDriftSteps;
    const int64_t cell_row = where.row / kSmoothCell;
    const int64_t cell_col = where.col / kSmoothCell;
    const auto smoothstep = [](float x) { return x * x * (3.0f - 2.0f * x); };
    const float fy = smoothstep(static_cast<float>(where.row % kSmoothCell) / kSmoothCell);
    const float fx = smoothstep(static_cast<float>(where.col % kSmoothCell) / kSmoothCell);
    std::fill(out, out + width, 0.0f);
    for (int64_t dt = 0; dt < 2; ++dt) {
      const float wt = dt == 0 ? 1.0f - drift : drift;
      if (wt == 0.0f) continue;
      const auto t = static_cast<uint64_t>(knot + dt);
      const uint64_t topic = hash_key(seed, Stream::kTopic, kv_head, media, t);
      for (int64_t e = 0; e < width; ++e) out[e] += wt * kTopicWeight * gaussian(draw(topic, e));
      for (int64_t dy = 0; dy < 2; ++dy) {
        for (int64_t dx = 0; dx < 2; ++dx) {
          const float weight = wt * (dy == 0 ? 1.0f - fy : fy) * (dx == 0 ? 1.0f - fx : fx);
          if (weight == 0.0f) continue;
          const uint64_t corner =
              hash_key(seed, Stream::kScene, kv_head, media,
                       t << 32 | static_cast<uint64_t>(cell_row + dy) << 16 |
                           static_cast<uint64_t>(cell_col + dx));
          for (int64_t e = 0; e < width; ++e) out[e] += weight * gaussian(draw(corner, e));
        }
      }
    }
    normalise(out, width);
  }

  // Unit identity feature [width]: per (media, row, col) for vision, per token for text.
  void identity_features(int64_t kv_head, int64_t position, const Site& where, float* out,
                         int64_t width) const {
    if (width == 0) return;
    const uint64_t key =
        where.modality == Modality::kText
            ? hash_key(w_.spec_.seed, Stream::kIdentity, kv_head, 0, position)
            : hash_key(w_.spec_.seed, Stream::kIdentity, kv_head,
                       static_cast<uint64_t>(where.media) + 1,
                       static_cast<uint64_t>(where.row) << 32 | static_cast<uint64_t>(where.col));
    for (int64_t e = 0; e < width; ++e) out[e] = gaussian(draw(key, e));
    normalise(out, width);
  }

  float sink_strength(int64_t position) const {
    if (position == 0) return 1.0f;
    return std::binary_search(media_sinks_.begin(), media_sinks_.end(), position)
               ? kMediaSinkStrength
               : 0.0f;
  }

  float important_amplitude(int64_t position) const {
    const auto span = static_cast<uint64_t>(position / kImportantSpan);
    const uint64_t key = hash_key(w_.spec_.seed, Stream::kImportant, span);
    const auto chosen = static_cast<int64_t>(draw(key, 0) % kImportantSpan);
    if (position == 0 || position % kImportantSpan != chosen) return 0.0f;
    return lerp(kImportantMin, 1.0f, uniform(draw(key, 1)));
  }

  // M-RoPE (rotate-half): pair p of x turns by its frequency times the site's id of p's section.
  void rotate(const Site& where, float* x) const {
    const int64_t pairs = blocks_.pairs;
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t id = where.rope[p < blocks_.t_end ? 0 : (p < blocks_.h_end ? 1 : 2)];
      const int64_t fine = (id % kRopeFineSpan) * pairs + p;
      const int64_t coarse = (id / kRopeFineSpan) * pairs + p;
      const float c = w_.rope_fine_cos_[fine] * w_.rope_coarse_cos_[coarse] -
                      w_.rope_fine_sin_[fine] * w_.rope_coarse_sin_[coarse];
      const float s = w_.rope_fine_sin_[fine] * w_.rope_coarse_cos_[coarse] +
                      w_.rope_fine_cos_[fine] * w_.rope_coarse_sin_[coarse];
      const float x1 = x[p];
      const float x2 = x[p + pairs];
      x[p] = x1 * c - x2 * s;
      x[p + pairs] = x2 * c + x1 * s;
    }
  }

  const Workload& w_;
  Blocks blocks_;
  int64_t head_dim_;
  int64_t group_;
  int64_t scene_width_;     // scene feature entries: both halves of the scene block's pairs
  int64_t identity_width_;  // identity feature entries
  int64_t question_begin_ = 0;
  std::vector<int64_t> media_sinks_;  // sorted positions of per-image sinks
  std::vector<int64_t> needle_keys_;  // sorted
  std::vector<QueryGains> query_gains_;
  std::vector<float> relative_;  // [kv_heads, head_dim]
};

void WorkloadGenerator::prepare(Workload& w) {
  const int64_t q_heads = w.spec_.q_heads;
  w.behaviours_.clear();
  for (int64_t h = 0; h < q_heads; ++h) {
    const auto entry = static_cast<std::size_t>(h * static_cast<int64_t>(kBehaviourTable.size()) /
                                                q_heads);
    w.behaviours_.push_back(w.spec_.head_behaviour.value_or(kBehaviourTable[entry]));
  }

  const auto& segments = w.layout_.segments();
  const int64_t max_id = segment_rope_starts(w.layout_, w.segment_rope_start_);
  fill_rope_tables(w.spec_.head_dim / 2, max_id, w.rope_fine_cos_, w.rope_fine_sin_,
                   w.rope_coarse_cos_, w.rope_coarse_sin_);

  // Needles: spread evenly over the media tokens with a jitter, read from the final question on.
  w.question_begin_ = question_begin(w.layout_);
  w.needles_.clear();
  const int64_t count = w.spec_.needles;
  if (count == 0) return;
  int64_t media_tokens = 0;
  for (const Segment& segment : segments) {
    if (segment.modality != Modality::kText) media_tokens += segment.length();
  }
  if (count > media_tokens) {
    throw_invalid_argument("needles",
                           "<= " + std::to_string(media_tokens) + " (media tokens of the layout)",
                           std::to_string(count));
  }
  // Jitter within the middle half of each needle's slot keeps needles apart.
  constexpr double kJitter = 0.5;
  for (int64_t n = 0; n < count; ++n) {
    const uint64_t key = hash_key(w.spec_.seed, Stream::kNeedle, static_cast<uint64_t>(n));
    const double slot = n + 0.5 + kJitter * (uniform(draw(key, 0)) - 0.5);
    int64_t index = std::min<int64_t>(static_cast<int64_t>(slot * media_tokens / count),
                                      media_tokens - 1);
    for (const Segment& segment : segments) {
      if (segment.modality == Modality::kText) continue;
      if (index < segment.length()) {
        w.needles_.push_back(Needle{segment.begin + index, w.question_begin_});
        break;
      }
      index -= segment.length();
    }
  }
}

Workload Workload::create(const WorkloadSpec& spec) {
  const auto resolve = [](int64_t value, int64_t fallback, std::string_view field) {
    if (value < 0) {
      throw_invalid_argument(field, ">= 0 (0: the preset default " + std::to_string(fallback) + ")",
                             std::to_string(value));
    }
    return value == 0 ? fallback : value;
  };
  Workload workload;
  WorkloadSpec& resolved = workload.spec_;
  resolved = spec;
  resolved.q_heads = resolve(spec.q_heads, kDefaultQueryHeads, "q_heads");
  resolved.kv_heads = resolve(spec.kv_heads, kDefaultKvHeads, "kv_heads");
  resolved.head_dim = resolve(spec.head_dim, kDefaultHeadDim, "head_dim");
  if (resolved.q_heads % resolved.kv_heads != 0) {
    throw_invalid_argument("q_heads",
                           "a multiple of kv_heads = " + std::to_string(resolved.kv_heads),
                           std::to_string(resolved.q_heads));
  }
  if (resolved.head_dim % 2 != 0 || resolved.head_dim < kMinHeadDim ||
      resolved.head_dim > kMaxHeadDim) {
    throw_invalid_argument("head_dim",
                           "an even number in [" + std::to_string(kMinHeadDim) + ", " +
                               std::to_string(kMaxHeadDim) + "]",
                           std::to_string(resolved.head_dim));
  }
  if (spec.needles < 0) {
    throw_invalid_argument("needles", ">= 0", std::to_string(spec.needles));
  }
  workload.layout_ = detail::build_preset_layout(spec.preset, spec.seq_len);
  resolved.seq_len = workload.layout_.length();
  WorkloadGenerator::prepare(workload);
  return workload;
}

void Workload::generate_kv(int64_t kv_head, float* k, float* v) const {
  if (kv_head < 0 || kv_head >= spec_.kv_heads) {
    throw_invalid_argument("kv_head", "in [0, " + std::to_string(spec_.kv_heads) + ")",
                           std::to_string(kv_head));
  }
  const WorkloadGenerator generator(*this);
  const int64_t dim = spec_.head_dim;
  Token token;
  for (int64_t j = 0; j < seq_len(); ++j) {
    generator.describe(kv_head, j, token);
    generator.key_value(token, k + j * dim, v + j * dim);
  }
}

void Workload::generate_q(int64_t q_head, const std::vector<int64_t>& positions, float* q) const {
  if (q_head < 0 || q_head >= spec_.q_heads) {
    throw_invalid_argument("q_head", "in [0, " + std::to_string(spec_.q_heads) + ")",
                           std::to_string(q_head));
  }
  for (std::size_t n = 0; n < positions.size(); ++n) {
    if (positions[n] < 0 || positions[n] >= seq_len()) {
      throw_invalid_argument("positions[" + std::to_string(n) + "]",
                             "in [0, " + std::to_string(seq_len()) + ")",
                             std::to_string(positions[n]));
    }
  }
  const WorkloadGenerator generator(*this);
  const int64_t kv_head = q_head / (spec_.q_heads / spec_.kv_heads);
  Token token;
  for (std::size_t n = 0; n < positions.size(); ++n) {
    generator.describe(kv_head, positions[n], token);
    generator.query(q_head, token, q + static_cast<int64_t>(n) * spec_.head_dim);
  }
}

Workload::Tensors Workload::materialize(DType dtype) const {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
    throw_invalid_argument("dtype", "float32, float16 or bfloat16",
                           std::string(dtype_name(dtype)));
  }
  const int64_t n = seq_len();
  const int64_t dim = spec_.head_dim;
  Tensors tensors{Tensor(dtype, {1, n, spec_.q_heads, dim}),
                  Tensor(dtype, {1, n, spec_.kv_heads, dim}),
                  Tensor(dtype, {1, n, spec_.kv_heads, dim})};
  const WorkloadGenerator generator(*this);
  // One task per (KV head, block of positions): a token's features are computed once for the KV
  // head's key and value and all the query heads of its group. Blocks of 4096 positions give 32
  // tasks per KV head at 128K, plenty to balance threads.
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t group = spec_.q_heads / spec_.kv_heads;
  const TensorView q = tensors.q.view(), k = tensors.k.view(), v = tensors.v.view();
  detail::parallel_for(spec_.kv_heads * blocks, 0, [&](int64_t task) {
    const int64_t kv_head = task / blocks;
    const int64_t begin = task % blocks * kBlock;
    const int64_t end = std::min(n, begin + kBlock);
    std::vector<float> row_q(dim), row_k(dim), row_v(dim);
    Token token;
    for (int64_t j = begin; j < end; ++j) {
      generator.describe(kv_head, j, token);
      generator.key_value(token, row_k.data(), row_v.data());
      const int64_t kv_base = (j * spec_.kv_heads + kv_head) * dim;
      for (int64_t d = 0; d < dim; ++d) {
        store_float(k, kv_base + d, row_k[d]);
        store_float(v, kv_base + d, row_v[d]);
      }
      for (int64_t head = kv_head * group; head < (kv_head + 1) * group; ++head) {
        generator.query(head, token, row_q.data());
        const int64_t q_base = (j * spec_.q_heads + head) * dim;
        for (int64_t d = 0; d < dim; ++d) store_float(q, q_base + d, row_q[d]);
      }
    }
  });
  return tensors;
}

}  // namespace mmsparse
