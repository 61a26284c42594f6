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
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"
#include "tools/workloads/presets.h"
#include "tools/workloads/rope.h"
#include "tools/workloads/synthetic_model.h"

namespace mmsparse {

using detail::fill_rope_tables;
using detail::kRopeFineSpan;
using detail::kTemporalIdsPerStep;
using detail::segment_rope_starts;
using detail::synthetic::Blocks;
using detail::synthetic::QueryGains;
using detail::synthetic::Site;
using detail::synthetic::Stream;
using detail::synthetic::Token;
using detail::synthetic::draw;
using detail::synthetic::gaussian;
using detail::synthetic::hash_key;
using detail::synthetic::kBehaviourTable;
using detail::synthetic::kDefaultHeadDim;
using detail::synthetic::kDefaultKvHeads;
using detail::synthetic::kDefaultQueryHeads;
using detail::synthetic::kDriftSteps;
using detail::synthetic::kImportantMin;
using detail::synthetic::kImportantSpan;
using detail::synthetic::kKeyNoise;
using detail::synthetic::kMaxHeadDim;
using detail::synthetic::kMediaSinkStrength;
using detail::synthetic::kMinHeadDim;
using detail::synthetic::kProfiles;
using detail::synthetic::kSinkValueShrink;
using detail::synthetic::kSmoothCell;
using detail::synthetic::kTopicWeight;
using detail::synthetic::kTypicalKeySignal;
using detail::synthetic::kValueContent;
using detail::synthetic::kValueNoise;
using detail::synthetic::uniform;

namespace {

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

// Generates the vectors of one workload; holds only derived, read-only state.
class WorkloadGenerator {
 public:
  explicit WorkloadGenerator(const Workload& workload)
      : w_(workload),
        blocks_(workload.spec_.head_dim),
        head_dim_(workload.spec_.head_dim),
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
  // An unknown preset keeps the generator's defaults here: build_preset_layout names it below.
  PresetInfo preset{.name = spec.preset, .description = {}, .seq_len = 0};
  for (const PresetInfo& info : workload_presets()) {
    if (info.name == spec.preset) preset = info;
  }
  Workload workload;
  WorkloadSpec& resolved = workload.spec_;
  resolved = spec;
  resolved.q_heads =
      resolve(spec.q_heads, preset.q_heads > 0 ? preset.q_heads : kDefaultQueryHeads, "q_heads");
  // A preset without GQA (kv_heads == q_heads) keeps none when only the query heads are given.
  const bool preset_mha = preset.q_heads > 0 && preset.kv_heads == preset.q_heads;
  const int64_t preset_kv_heads =
      preset_mha ? resolved.q_heads : (preset.kv_heads > 0 ? preset.kv_heads : kDefaultKvHeads);
  resolved.kv_heads = resolve(spec.kv_heads, preset_kv_heads, "kv_heads");
  workload.causal_ = preset.causal;
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
  std::vector<int64_t> positions(static_cast<std::size_t>(seq_len()));
  std::iota(positions.begin(), positions.end(), int64_t{0});
  return materialize_rows(positions, dtype);
}

Workload::Tensors Workload::materialize_rows(std::span<const int64_t> positions, DType dtype,
                                             int threads) const {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
    throw_invalid_argument("dtype", "float32, float16 or bfloat16",
                           std::string(dtype_name(dtype)));
  }
  const auto n = static_cast<int64_t>(positions.size());
  for (int64_t row = 0; row < n; ++row) {
    if (positions[static_cast<std::size_t>(row)] < 0 ||
        positions[static_cast<std::size_t>(row)] >= seq_len()) {
      throw_invalid_argument("positions[" + std::to_string(row) + "]",
                             "in [0, " + std::to_string(seq_len()) + ")",
                             std::to_string(positions[static_cast<std::size_t>(row)]));
    }
  }
  const int64_t dim = spec_.head_dim;
  Tensors tensors{Tensor(dtype, {1, n, spec_.q_heads, dim}),
                  Tensor(dtype, {1, n, spec_.kv_heads, dim}),
                  Tensor(dtype, {1, n, spec_.kv_heads, dim})};
  const WorkloadGenerator generator(*this);
  // One task per (KV head, block of rows): a token's features are computed once for the KV
  // head's key and value and all the query heads of its group. Blocks of 4096 rows give 32
  // tasks per KV head at 128K, plenty to balance threads.
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t group = spec_.q_heads / spec_.kv_heads;
  const TensorView q = tensors.q.view(), k = tensors.k.view(), v = tensors.v.view();
  detail::parallel_for(spec_.kv_heads * blocks, threads, [&](int64_t task) {
    const int64_t kv_head = task / blocks;
    const int64_t begin = task % blocks * kBlock;
    const int64_t end = std::min(n, begin + kBlock);
    std::vector<float> row_q(dim), row_k(dim), row_v(dim);
    Token token;
    for (int64_t row = begin; row < end; ++row) {
      generator.describe(kv_head, positions[static_cast<std::size_t>(row)], token);
      generator.key_value(token, row_k.data(), row_v.data());
      const int64_t kv_base = (row * spec_.kv_heads + kv_head) * dim;
      for (int64_t d = 0; d < dim; ++d) {
        store_float(k, kv_base + d, row_k[d]);
        store_float(v, kv_base + d, row_v[d]);
      }
      for (int64_t head = kv_head * group; head < (kv_head + 1) * group; ++head) {
        generator.query(head, token, row_q.data());
        const int64_t q_base = (row * spec_.q_heads + head) * dim;
        for (int64_t d = 0; d < dim; ++d) store_float(q, q_base + d, row_q[d]);
      }
    }
  });
  return tensors;
}

}  // namespace mmsparse
