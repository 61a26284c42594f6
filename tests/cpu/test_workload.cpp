// Synthetic workloads: presets and their scaling, spec validation, determinism, row-wise generation
// matching the whole tensors, and head behaviours that mean what they say (needles read by the
// final question in vertical heads, grid heads reading the same location in other frames, local
// heads reading near the diagonal).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/errors.h"
#include "mmsparse/layout.h"
#include "mmsparse/status.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

using testing::capture_error;

using ::testing::HasSubstr;

constexpr const char* kVideoPreset = "video-qwen2.5vl-128k";

WorkloadSpec small_spec(const std::string& preset, int64_t seq_len, uint64_t seed = 0) {
  WorkloadSpec spec;
  spec.preset = preset;
  spec.seq_len = seq_len;
  spec.seed = seed;
  return spec;
}

// Softmax of one query row against keys [0, row] (causal), keys [seq, dim] fp32.
std::vector<double> attention_row(const std::vector<float>& query, const std::vector<float>& keys,
                                  int64_t row, int64_t dim) {
  std::vector<double> weights(static_cast<std::size_t>(row + 1));
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  for (int64_t j = 0; j <= row; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < dim; ++d) dot += static_cast<double>(query[d]) * keys[j * dim + d];
    weights[j] = dot * scale;
  }
  const double max_logit = *std::max_element(weights.begin(), weights.end());
  double total = 0.0;
  for (double& weight : weights) total += weight = std::exp(weight - max_logit);
  for (double& weight : weights) weight /= total;
  return weights;
}

// The `count` keys with the largest weights, best first.
std::vector<int64_t> top_keys(const std::vector<double>& weights, int64_t count) {
  std::vector<int64_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  count = std::min<int64_t>(count, static_cast<int64_t>(order.size()));
  std::partial_sort(order.begin(), order.begin() + count, order.end(),
                    [&](int64_t a, int64_t b) { return weights[a] > weights[b]; });
  order.resize(static_cast<std::size_t>(count));
  return order;
}

// A video token's location inside its media: frame, row, column.
struct Location {
  int32_t media = -1;
  int64_t frame = -1, row = -1, col = -1;
};

std::vector<Location> locations(const ModalityLayout& layout) {
  std::vector<Location> where(static_cast<std::size_t>(layout.length()));
  for (const Segment& segment : layout.segments()) {
    if (segment.media < 0) continue;
    const Grid& grid = layout.media()[segment.media].grid;
    for (int64_t p = segment.begin; p < segment.end; ++p) {
      const int64_t index = segment.first_frame * grid.frame_tokens() + (p - segment.begin);
      where[p] = {segment.media, index / grid.frame_tokens(), index % grid.frame_tokens() / grid.w,
                  index % grid.w};
    }
  }
  return where;
}

std::vector<int64_t> heads_with(const Workload& workload, HeadBehaviour behaviour) {
  std::vector<int64_t> heads;
  for (int64_t h = 0; h < workload.spec().q_heads; ++h) {
    if (workload.behaviour(h) == behaviour) heads.push_back(h);
  }
  return heads;
}

// ---- Presets and scaling ------------------------------------------------------------------------

TEST(WorkloadPresets, EveryPresetBuildsAtItsLengthAndItsLayoutValidates) {
  ASSERT_GE(workload_presets().size(), 4u);
  for (const PresetInfo& preset : workload_presets()) {
    SCOPED_TRACE(preset.name);
    EXPECT_FALSE(preset.description.empty());
    const Workload workload = Workload::create(small_spec(preset.name, 0));
    EXPECT_EQ(workload.seq_len(), preset.seq_len);
    EXPECT_EQ(workload.spec().seq_len, preset.seq_len);
    const ModalityLayout& layout = workload.layout();
    // Revalidating the parts gives the same layout back, and so does its JSON.
    EXPECT_EQ(ModalityLayout(layout.segments(), layout.media()), layout);
    EXPECT_EQ(ModalityLayout::from_json(layout.to_json()), layout);
    // A video DiT's sequence is its frames alone (test_dit_workload.cpp); a VLM prompt mixes text
    // and media.
    if (!preset.causal) continue;
    EXPECT_TRUE(layout.is_mixed());
    EXPECT_EQ(layout.segments().front().modality, Modality::kText);  // system prompt
    EXPECT_EQ(layout.segments().back().modality, Modality::kText);   // question
  }
}

TEST(WorkloadPresets, NamedPresetsHaveTheDocumentedShapes) {
  const auto find = [](const std::string& name) {
    return Workload::create(small_spec(name, 0)).layout();
  };
  const ModalityLayout video = find(kVideoPreset);
  ASSERT_EQ(video.media().size(), 1u);
  EXPECT_EQ(video.media()[0].grid, (Grid{292, 16, 28}));
  EXPECT_EQ(video.video_frame_tokens(), 16 * 28);

  const ModalityLayout long_video = find("video-qwen2.5vl-1m");
  ASSERT_EQ(long_video.media().size(), 1u);
  EXPECT_EQ(long_video.media()[0].grid, (Grid{4368, 12, 20}));

  const ModalityLayout images = find("multi-image");
  EXPECT_EQ(images.media().size(), 45u);
  for (const Media& media : images.media()) {
    EXPECT_EQ(media.modality, Modality::kImage);
    EXPECT_GE(media.grid.tokens(), 1280);  // BlindSight's range for Qwen
    EXPECT_LE(media.grid.tokens(), 5120);
    EXPECT_GE(media.start_marker, 0);
  }

  const ModalityLayout mixed = find("mixed-interleaved");
  const std::vector<uint8_t> types = mixed.token_types();
  const auto text = std::count(types.begin(), types.end(), static_cast<uint8_t>(Modality::kText));
  const double text_share = static_cast<double>(text) / static_cast<double>(types.size());
  EXPECT_NEAR(text_share, 0.25, 0.03);  // MM-NIAH: a quarter of the input is text
  ASSERT_GE(mixed.media().size(), 2u);
  EXPECT_EQ(mixed.media()[0].modality, Modality::kVideo);
  int64_t video_segments = 0;
  for (const Segment& segment : mixed.segments()) video_segments += segment.media == 0;
  EXPECT_GT(video_segments, 10);  // one video interrupted by documents and images
}

TEST(WorkloadPresets, SeqLenIsMetExactlyFromShortToLong) {
  for (const PresetInfo& preset : workload_presets()) {
    for (int64_t seq_len : {2048, 3000, 8192, 50001, 131072, 400000}) {
      SCOPED_TRACE(preset.name + " seq_len " + std::to_string(seq_len));
      const Workload workload = Workload::create(small_spec(preset.name, seq_len));
      EXPECT_EQ(workload.seq_len(), seq_len);
      EXPECT_EQ(workload.spec().seq_len, seq_len);
      EXPECT_FALSE(workload.layout().media().empty());
    }
  }
}

TEST(WorkloadPresets, ScalingAddsMediaNotText) {
  const auto frames = [](int64_t seq_len) {
    return Workload::create(small_spec(kVideoPreset, seq_len)).layout().media()[0].grid.t;
  };
  EXPECT_EQ(frames(2048), 4);  // (2048 - system - markers - question) / 448
  EXPECT_GT(frames(65536), 2 * frames(16384) - 2);
  const auto images = [](int64_t seq_len) {
    return Workload::create(small_spec("multi-image", seq_len)).layout().media().size();
  };
  EXPECT_GE(images(2048), 4u);  // short requests shrink the images, not their number
  EXPECT_GT(images(262144), images(131072));
}

TEST(WorkloadPresets, TooShortForAPresetNamesSeqLenAndTheMinimum) {
  for (const PresetInfo& preset : workload_presets()) {
    SCOPED_TRACE(preset.name);
    const Error error = capture_error([&] { Workload::create(small_spec(preset.name, 50)); });
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(error.what(), HasSubstr("seq_len: expected >= "));
    EXPECT_THAT(error.what(), HasSubstr(preset.name));
    // The minimum it names builds, and one token less does not.
    const std::string message = error.what();
    const int64_t minimum = std::stoll(message.substr(message.find(">= ") + 3));
    EXPECT_EQ(Workload::create(small_spec(preset.name, minimum)).seq_len(), minimum);
    EXPECT_THROW(Workload::create(small_spec(preset.name, minimum - 1)), Error);
  }
}

// ---- Spec validation ----------------------------------------------------------------------------

TEST(WorkloadSpecValidation, UnknownPresetListsTheKnownOnes) {
  const Error error = capture_error([] { Workload::create(small_spec("video-qwen9", 0)); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("preset: expected one of "));
  EXPECT_THAT(error.what(), HasSubstr("'video-qwen9'"));
  for (const PresetInfo& preset : workload_presets()) {
    EXPECT_THAT(error.what(), HasSubstr(preset.name));
  }
}

TEST(WorkloadSpecValidation, BadSizesNameTheField) {
  const auto message = [](auto edit) {
    WorkloadSpec spec = small_spec(kVideoPreset, 4096);
    edit(spec);
    return std::string(capture_error([&] { Workload::create(spec); }).what());
  };
  EXPECT_THAT(message([](WorkloadSpec& s) { s.q_heads = 30; }),
              HasSubstr("q_heads: expected a multiple of kv_heads = 4, got 30"));
  EXPECT_THAT(message([](WorkloadSpec& s) { s.kv_heads = 3; }),
              HasSubstr("q_heads: expected a multiple of kv_heads = 3, got 28"));
  EXPECT_THAT(message([](WorkloadSpec& s) { s.head_dim = 63; }), HasSubstr("head_dim: expected"));
  EXPECT_THAT(message([](WorkloadSpec& s) { s.head_dim = 6; }), HasSubstr("got 6"));
  EXPECT_THAT(message([](WorkloadSpec& s) { s.head_dim = -2; }),
              HasSubstr("head_dim: expected >= 0"));
  EXPECT_THAT(message([](WorkloadSpec& s) { s.q_heads = -1; }),
              HasSubstr("q_heads: expected >= 0"));
  EXPECT_THAT(message([](WorkloadSpec& s) { s.kv_heads = -4; }), HasSubstr("kv_heads: expected"));
  EXPECT_THAT(message([](WorkloadSpec& s) { s.seq_len = -5; }), HasSubstr("seq_len: expected"));
  EXPECT_THAT(message([](WorkloadSpec& s) { s.needles = -1; }),
              HasSubstr("needles: expected >= 0"));
  EXPECT_THAT(message([](WorkloadSpec& s) { s.needles = 1 << 20; }),
              HasSubstr("needles: expected <= "));
}

TEST(WorkloadSpecValidation, DefaultsAreQwen25Vl7bAndSmallestHeadDimWorks) {
  const Workload workload = Workload::create(small_spec(kVideoPreset, 2048));
  EXPECT_EQ(workload.spec().q_heads, 28);
  EXPECT_EQ(workload.spec().kv_heads, 4);
  EXPECT_EQ(workload.spec().head_dim, 128);

  WorkloadSpec spec = small_spec(kVideoPreset, 2048);
  spec.head_dim = 8;
  spec.q_heads = 2;
  spec.kv_heads = 1;
  const Workload tiny = Workload::create(spec);
  std::vector<float> k(2048 * 8), v(2048 * 8), q(8);
  tiny.generate_kv(0, k.data(), v.data());
  tiny.generate_q(1, {2047}, q.data());
  EXPECT_TRUE(std::all_of(k.begin(), k.end(), [](float x) { return std::isfinite(x); }));
  EXPECT_TRUE(std::all_of(q.begin(), q.end(), [](float x) { return std::isfinite(x); }));
}

// Every head of one behaviour (studies of one head type); the default is the preset's mix.
TEST(WorkloadSpecValidation, OneBehaviourForEveryHead) {
  WorkloadSpec spec = small_spec(kVideoPreset, 2048);
  const Workload mix = Workload::create(spec);
  spec.head_behaviour = HeadBehaviour::kGrid;
  const Workload grid = Workload::create(spec);
  int64_t mixed_grid_heads = 0;
  for (int64_t head = 0; head < grid.spec().q_heads; ++head) {
    EXPECT_EQ(grid.behaviour(head), HeadBehaviour::kGrid) << "head " << head;
    mixed_grid_heads += mix.behaviour(head) == HeadBehaviour::kGrid ? 1 : 0;
  }
  EXPECT_EQ(mixed_grid_heads, 7) << "the preset's mix has 7 grid heads of 28";
  // Query vectors follow the behaviour: head 0 is a local head in the mix.
  std::vector<float> mixed_q(128), grid_q(128);
  mix.generate_q(0, {2047}, mixed_q.data());
  grid.generate_q(0, {2047}, grid_q.data());
  EXPECT_NE(mixed_q, grid_q);

  EXPECT_EQ(head_behaviour_from_name("vertical", "--head-behaviour"), HeadBehaviour::kVertical);
  const Error error =
      capture_error([] { (void)head_behaviour_from_name("gird", "--head-behaviour"); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(error.what(), HasSubstr("--head-behaviour"));
  EXPECT_THAT(error.what(), HasSubstr("local, grid, vertical or dense"));
  EXPECT_THAT(error.what(), HasSubstr("\"gird\""));
}

TEST(WorkloadSpecValidation, GenerationArgumentsAreChecked) {
  const Workload workload = Workload::create(small_spec(kVideoPreset, 2048));
  std::vector<float> buffer(2048 * 128);
  EXPECT_THAT(capture_error([&] { workload.generate_kv(4, buffer.data(), buffer.data()); }).what(),
              HasSubstr("kv_head: expected in [0, 4), got 4"));
  EXPECT_THAT(capture_error([&] { workload.generate_q(-1, {0}, buffer.data()); }).what(),
              HasSubstr("q_head: expected in [0, 28), got -1"));
  EXPECT_THAT(capture_error([&] { workload.generate_q(0, {0, 2048}, buffer.data()); }).what(),
              HasSubstr("positions[1]: expected in [0, 2048), got 2048"));
  EXPECT_THAT(capture_error([&] { workload.materialize(DType::kInt32); }).what(),
              HasSubstr("dtype: expected float32, float16 or bfloat16"));
}

// ---- Determinism and row-wise generation --------------------------------------------------------

WorkloadSpec determinism_spec(uint64_t seed) {
  WorkloadSpec spec = small_spec("mixed-interleaved", 6000, seed);
  spec.q_heads = 8;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.needles = 2;
  return spec;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(WorkloadGeneration, SameSeedGivesIdenticalTensorsAndAnotherSeedDifferent) {
  const Workload::Tensors first =
      Workload::create(determinism_spec(7)).materialize(DType::kFloat32);
  const Workload::Tensors again =
      Workload::create(determinism_spec(7)).materialize(DType::kFloat32);
  EXPECT_TRUE(same_bytes(first.q, again.q));
  EXPECT_TRUE(same_bytes(first.k, again.k));
  EXPECT_TRUE(same_bytes(first.v, again.v));
  const Workload::Tensors other =
      Workload::create(determinism_spec(8)).materialize(DType::kFloat32);
  EXPECT_FALSE(same_bytes(first.q, other.q));
  EXPECT_FALSE(same_bytes(first.k, other.k));
  EXPECT_FALSE(same_bytes(first.v, other.v));
}

TEST(WorkloadGeneration, RowsGeneratedAloneEqualTheMaterializedTensors) {
  const Workload workload = Workload::create(determinism_spec(3));
  const Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  const WorkloadSpec& spec = workload.spec();
  const int64_t n = workload.seq_len();
  const int64_t dim = spec.head_dim;
  ASSERT_EQ(tensors.q.shape(), (std::vector<int64_t>{1, n, spec.q_heads, dim}));
  ASSERT_EQ(tensors.k.shape(), (std::vector<int64_t>{1, n, spec.kv_heads, dim}));
  ASSERT_EQ(tensors.v.shape(), (std::vector<int64_t>{1, n, spec.kv_heads, dim}));

  // Rows out of order and repeated, generated alone (another thread order than materialize's).
  const std::vector<int64_t> positions{n - 1, 0, 1234, 17, 1234, n / 2};
  for (int64_t head = 0; head < spec.q_heads; ++head) {
    std::vector<float> rows(positions.size() * dim);
    workload.generate_q(head, positions, rows.data());
    for (std::size_t i = 0; i < positions.size(); ++i) {
      const float* expected =
          tensors.q.data_as<float>() + (positions[i] * spec.q_heads + head) * dim;
      EXPECT_EQ(std::memcmp(rows.data() + i * dim, expected, dim * sizeof(float)), 0)
          << "head " << head << " position " << positions[i];
    }
  }
  for (int64_t kv_head = 0; kv_head < spec.kv_heads; ++kv_head) {
    std::vector<float> k(n * dim), v(n * dim);
    workload.generate_kv(kv_head, k.data(), v.data());
    for (int64_t j = 0; j < n; ++j) {
      const int64_t offset = (j * spec.kv_heads + kv_head) * dim;
      ASSERT_EQ(std::memcmp(k.data() + j * dim, tensors.k.data_as<float>() + offset, dim * 4), 0)
          << "kv head " << kv_head << " position " << j;
      ASSERT_EQ(std::memcmp(v.data() + j * dim, tensors.v.data_as<float>() + offset, dim * 4), 0)
          << "kv head " << kv_head << " position " << j;
    }
  }
}

TEST(WorkloadGeneration, HalfPrecisionTensorsRoundTheFloatOnes) {
  const Workload workload = Workload::create(determinism_spec(5));
  const Workload::Tensors exact = workload.materialize(DType::kFloat32);
  const Workload::Tensors half = workload.materialize(DType::kBFloat16);
  EXPECT_EQ(half.q.dtype(), DType::kBFloat16);
  for (int64_t i = 0; i < exact.k.numel(); i += 97) {
    EXPECT_EQ(half.k.data_as<uint16_t>()[i], float_to_bfloat16(exact.k.data_as<float>()[i]));
  }
}

// ---- Head behaviours ----------------------------------------------------------------------------

TEST(WorkloadBehaviours, DefaultHeadsMixBehavioursInsideEveryKvGroup) {
  const Workload workload = Workload::create(small_spec(kVideoPreset, 2048));
  EXPECT_EQ(heads_with(workload, HeadBehaviour::kLocal).size(), 11u);
  EXPECT_EQ(heads_with(workload, HeadBehaviour::kGrid).size(), 7u);
  EXPECT_EQ(heads_with(workload, HeadBehaviour::kVertical).size(), 6u);
  EXPECT_EQ(heads_with(workload, HeadBehaviour::kDense).size(), 4u);
  for (int64_t group = 0; group < 4; ++group) {
    std::vector<HeadBehaviour> kinds;
    for (int64_t h = group * 7; h < group * 7 + 7; ++h) kinds.push_back(workload.behaviour(h));
    std::sort(kinds.begin(), kinds.end());
    EXPECT_EQ(std::unique(kinds.begin(), kinds.end()) - kinds.begin(), 4) << "group " << group;
  }
  WorkloadSpec four = small_spec(kVideoPreset, 2048);
  four.q_heads = 4;
  four.kv_heads = 4;
  const Workload small = Workload::create(four);
  EXPECT_EQ(small.behaviour(0), HeadBehaviour::kLocal);
  EXPECT_EQ(small.behaviour(1), HeadBehaviour::kGrid);
  EXPECT_EQ(small.behaviour(2), HeadBehaviour::kVertical);
  EXPECT_EQ(small.behaviour(3), HeadBehaviour::kDense);
}

TEST(WorkloadBehaviours, NamesAreStable) {
  EXPECT_EQ(head_behaviour_name(HeadBehaviour::kLocal), "local");
  EXPECT_EQ(head_behaviour_name(HeadBehaviour::kGrid), "grid");
  EXPECT_EQ(head_behaviour_name(HeadBehaviour::kVertical), "vertical");
  EXPECT_EQ(head_behaviour_name(HeadBehaviour::kDense), "dense");
}

TEST(WorkloadBehaviours, NeedlesLieInMediaAndTheQuestionReadsThemInVerticalHeads) {
  for (const std::string preset : {kVideoPreset, "multi-image", "mixed-interleaved"}) {
    SCOPED_TRACE(preset);
    WorkloadSpec spec = small_spec(preset, 12000, 11);
    spec.needles = 3;
    const Workload workload = Workload::create(spec);
    ASSERT_EQ(workload.needles().size(), 3u);
    const std::vector<uint8_t> types = workload.layout().token_types();
    const Segment& question = workload.layout().segments().back();
    for (const Needle& needle : workload.needles()) {
      EXPECT_NE(types[needle.key], static_cast<uint8_t>(Modality::kText)) << needle.key;
      EXPECT_EQ(needle.first_query, question.begin);
    }
    const int64_t n = workload.seq_len();
    const int64_t dim = workload.spec().head_dim;
    std::vector<float> k(n * dim), v(n * dim), q(dim);
    const int64_t group = workload.spec().q_heads / workload.spec().kv_heads;
    for (int64_t head : heads_with(workload, HeadBehaviour::kVertical)) {
      workload.generate_kv(head / group, k.data(), v.data());
      for (int64_t row : {question.begin, (question.begin + n) / 2, n - 1}) {
        workload.generate_q(head, {row}, q.data());
        const std::vector<double> weights = attention_row(q, k, row, dim);
        double on_needles = 0.0;
        for (const Needle& needle : workload.needles()) on_needles += weights[needle.key];
        EXPECT_GT(on_needles, 0.5) << "head " << head << " row " << row;
      }
    }
  }
}

TEST(WorkloadBehaviours, GridHeadsReadTheSameLocationInOtherFrames) {
  const Workload workload = Workload::create(small_spec(kVideoPreset, 16384, 5));
  const std::vector<Location> where = locations(workload.layout());
  const int64_t n = workload.seq_len();
  const int64_t dim = workload.spec().head_dim;
  const int64_t group = workload.spec().q_heads / workload.spec().kv_heads;
  const Media& video = workload.layout().media()[0];
  const Segment& frames = workload.layout().segments()[1];
  // Sinks (token 0, the video's start marker and first token) are every head's top keys.
  const auto is_sink = [&](int64_t j) {
    return j == 0 || j == video.start_marker || j == frames.begin;
  };
  // Fewer than the 35 earlier frames: the nearer frames' copies of the location should lead.
  constexpr int64_t kTopKeys = 16;
  std::vector<float> k(n * dim), v(n * dim), q(dim);
  for (int64_t head : heads_with(workload, HeadBehaviour::kGrid)) {
    workload.generate_kv(head / group, k.data(), v.data());
    int64_t same_location = 0;
    int64_t counted = 0;
    // Queries in the last frame, at assorted locations.
    for (int64_t back : {1, 200, 333}) {
      const int64_t row = frames.end - back;
      const Location& query = where[row];
      workload.generate_q(head, {row}, q.data());
      std::vector<double> weights = attention_row(q, k, row, dim);
      for (int64_t j = 0; j <= row; ++j) {
        if (is_sink(j)) weights[j] = 0.0;
      }
      for (int64_t j : top_keys(weights, kTopKeys)) {
        ++counted;
        same_location += where[j].media == query.media && where[j].frame != query.frame &&
                         where[j].row == query.row && where[j].col == query.col;
      }
    }
    EXPECT_GT(same_location * 2, counted) << "head " << head;
  }
}

TEST(WorkloadBehaviours, LocalHeadsReadNearTheDiagonal) {
  const Workload workload = Workload::create(small_spec(kVideoPreset, 16384, 5));
  const int64_t n = workload.seq_len();
  const int64_t dim = workload.spec().head_dim;
  const int64_t frame_tokens = workload.layout().video_frame_tokens();
  const int64_t group = workload.spec().q_heads / workload.spec().kv_heads;
  std::vector<float> k(n * dim), v(n * dim), q(dim);
  constexpr int64_t kTopKeys = 64;
  for (int64_t head : heads_with(workload, HeadBehaviour::kLocal)) {
    workload.generate_kv(head / group, k.data(), v.data());
    for (int64_t row : {n / 2, n - 300}) {
      workload.generate_q(head, {row}, q.data());
      const std::vector<int64_t> top = top_keys(attention_row(q, k, row, dim), kTopKeys);
      // Within the current and the previous frame.
      const auto near = std::count_if(top.begin(), top.end(),
                                      [&](int64_t j) { return row - j < 2 * frame_tokens; });
      EXPECT_GT(near * 4, static_cast<int64_t>(top.size()) * 3)
          << "head " << head << " row " << row;
    }
  }
}

}  // namespace
}  // namespace mmsparse
