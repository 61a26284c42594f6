// The offline pattern search: search space, cost model, the choices it makes on a synthetic
// workload whose head behaviours are known, the budget and bad inputs (test_search_config.cpp has
// the searched config's JSON and the calibration file).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "common/random.h"
#include "cpu/search_helpers.h"
#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/tools/io.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/tools/workload.h"

namespace mmsparse {
namespace {

using test::small_video_workload;
using testing::expect_error;

constexpr int64_t kPaperSeqLen = 131072;

int64_t first_head_with(const Workload& workload, HeadBehaviour behaviour) {
  for (int64_t head = 0; head < workload.spec().q_heads; ++head) {
    if (workload.behaviour(head) == behaviour) return head;
  }
  ADD_FAILURE() << "no head of behaviour " << head_behaviour_name(behaviour);
  return 0;
}

// The small video workload at `seq_len` with its tensors.
struct SmallVideo {
  Workload workload;
  Workload::Tensors tensors;
};

SmallVideo small_video(int64_t seq_len, DType dtype) {
  WorkloadSpec spec = small_video_workload();
  spec.seq_len = seq_len;
  Workload workload = Workload::create(spec);
  Workload::Tensors tensors = workload.materialize(dtype);
  return {std::move(workload), std::move(tensors)};
}

SearchOptions single_thread_options() {
  SearchOptions options;
  options.num_threads = 1;
  return options;
}

TEST(SearchSpace, HoldsTable3AtTheLengthItWasSetFor) {
  const ModalityLayout layout = LayoutBuilder().text(20).video({4, 16, 28}).text(32).build();
  const std::vector<PatternSpec> space = search_space(layout, kPaperSeqLen, true);
  std::map<std::string, int> per_family;
  std::set<std::string> texts;
  for (const PatternSpec& spec : space) {
    ++per_family[spec.name];
    texts.insert(spec.to_string());
  }
  // 5 grid rows with the frame stride, 6 searched online; 3 A-shapes; 9 vertical-slash sizes.
  EXPECT_EQ(per_family["grid"], 11);
  EXPECT_EQ(per_family["a-shape"], 3);
  EXPECT_EQ(per_family["vertical-slash"], 9);
  EXPECT_EQ(per_family.count("dense"), 0u);
  EXPECT_EQ(texts.size(), space.size());
  EXPECT_TRUE(texts.count("a-shape:local=4096,sink=128"));
  EXPECT_TRUE(
      texts.count("vertical-slash:boundary=0,item_sinks=0,last_q=64,local=100,sink=30,slash=200,"
                  "vertical=3500"));
  EXPECT_TRUE(
      texts.count("grid:boundary=0,hline=1,item_sinks=0,last_q=64,local=1,max_stride=1024,"
                  "sink=30,slash=0,stride=448,vline=0"));
  EXPECT_TRUE(
      texts.count("grid:boundary=0,hline=1,item_sinks=0,last_q=64,local=0,max_stride=1024,"
                  "sink=30,slash=1,stride=0,vline=1"));
}

TEST(SearchSpace, ScalesWindowsAndLineBudgetsWithTheLength) {
  EXPECT_EQ(scale_spec_to_length(PatternSpec::parse("a-shape:sink=128,local=4096"), 8192).to_string(),
            "a-shape:local=256,sink=128");
  EXPECT_EQ(scale_spec_to_length(PatternSpec::parse("a-shape:sink=1024,local=4096"), 1024)
                .to_string(),
            "a-shape:local=64,sink=1024");  // never below 64 keys of window
  // Line budgets keep their fraction, never below the lines vertical-slash always keeps.
  EXPECT_EQ(scale_spec_to_length(PatternSpec::parse("vertical-slash:vertical=2000,slash=200"), 8192)
                .to_string(),
            "vertical-slash:boundary=0,item_sinks=0,last_q=64,local=100,sink=30,slash=100,"
            "vertical=125");
  EXPECT_EQ(scale_spec_to_length(PatternSpec::parse("a-shape:sink=128,local=4096"), 2 * kPaperSeqLen)
                .to_string(),
            "a-shape:local=4096,sink=128");
  const ModalityLayout text = ModalityLayout::text_only(4096);
  int64_t grids = 0;
  for (const PatternSpec& spec : search_space(text, 4096, true)) {
    if (spec.name != "grid") continue;
    ++grids;
    EXPECT_EQ(spec.params.at("stride"), 0) << "no video, no frame stride: online strides only";
  }
  EXPECT_EQ(grids, 6);
}

TEST(ModelledCost, CountsTheEngineKeyChunksOfEachTile) {
  const std::unique_ptr<CostModel> model = make_modelled_cost();
  EXPECT_FALSE(model->measured());
  EXPECT_EQ(model->tile_rows(64), 128);
  const TensorView none;  // the modelled cost reads only the plan
  const std::unique_ptr<CostInputs> inputs = model->prepare(none, none, none);
  // Dense causal over 1024 tokens in 128-row tiles: tile t reads (t + 1) · 128 keys.
  const Plan dense = build_plan(PatternSpec{"dense", {}}, PlanShape{1, 1, 1024, 1024, 128});
  EXPECT_EQ(model->cost(dense, *inputs), 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8);
  // A 3-key span is a chunk of its own; 200 gathered columns are two.
  PlanBuilder builder(PlanShape{1, 1, 1024, 1024, 128});
  builder.begin_head();
  builder.begin_tile(896, 1024);
  builder.add_span(10, 13);
  for (int64_t key = 300; key < 700; key += 2) builder.add_column(key);
  EXPECT_EQ(model->cost(builder.finish(), *inputs), 3);
  // The index: the estimate's last_q rows against every key (1000 keys: 8 chunks per row block);
  // static patterns have none.
  const PlanShape shape{1, 1, 1000, 1000, 128};
  const ModalityLayout text = ModalityLayout::text_only(1000);
  EXPECT_EQ(
      model->index_cost(PatternSpec::parse("vertical-slash:last_q=64"), shape, text, 0.0f, *inputs),
      8);
  EXPECT_EQ(model->index_cost(PatternSpec::parse("grid:last_q=200"), shape, text, 0.0f, *inputs),
            2 * 8);
  EXPECT_EQ(model->index_cost(PatternSpec::parse("a-shape"), shape, text, 0.0f, *inputs), 0);
}

TEST(Search, PicksGridForAGridHeadAndALocalPatternForALocalHead) {
  const Workload workload = Workload::create(small_video_workload());
  const Workload::Tensors tensors = workload.materialize(DType::kFloat32);
  const int64_t grid_head = first_head_with(workload, HeadBehaviour::kGrid);
  const int64_t local_head = first_head_with(workload, HeadBehaviour::kLocal);
  const std::unique_ptr<CostModel> cost = make_modelled_cost();
  const std::vector<int64_t> heads = {grid_head, local_head};
  const LayerSearchResult result =
      search_layer(tensors.q.view(), tensors.k.view(), tensors.v.view(), workload.layout(), *cost,
                   single_thread_options(), heads);
  ASSERT_EQ(result.heads.size(), 2u);
  const HeadSearchResult& grid = result.heads[0];
  const HeadSearchResult& local = result.heads[1];
  EXPECT_EQ(grid.chosen.spec.name, "grid") << grid.chosen.spec.to_string();
  EXPECT_GT(grid.chosen.recall, 0.95);
  EXPECT_TRUE(local.chosen.spec.name == "a-shape" || local.chosen.spec.name == "vertical-slash")
      << local.chosen.spec.to_string();
  EXPECT_GT(local.chosen.recall, 0.95);
  // Stages: intra per modality, cross per ordered pair, then inter on the whole sequence.
  std::vector<std::string> scopes;
  for (const ScopeSearch& search : grid.scopes) scopes.push_back(search.stage + " " + search.scope);
  EXPECT_EQ(scopes, (std::vector<std::string>{"intra text", "intra video", "cross text->video",
                                              "cross video->text", "inter full"}));
  for (const HeadSearchResult& head : result.heads) {
    EXPECT_FALSE(head.dense_fallback);
    EXPECT_LE(head.chosen.cost, head.budget_cost);
  }
}

TEST(Search, RespectsTheBudgetAndFallsBackToDense) {
  const SmallVideo video = small_video(4096, DType::kBFloat16);
  const Workload& workload = video.workload;
  const Workload::Tensors& tensors = video.tensors;
  const std::unique_ptr<CostModel> cost = make_modelled_cost();
  SearchOptions options = single_thread_options();
  options.sample_rows = 16;
  const std::vector<int64_t> head = {0};

  const LayerSearchResult normal = search_layer(tensors.q.view(), tensors.k.view(),
                                                tensors.v.view(), workload.layout(), *cost,
                                                options, head);
  for (const ScopeSearch& search : normal.heads[0].scopes) {
    EXPECT_GT(search.budget_cost, 0.0) << search.scope;
    for (const CandidateScore& score : search.scored) EXPECT_LE(score.cost, search.budget_cost);
  }
  EXPECT_GT(normal.heads[0].over_budget, 0) << "the scaled budget drops the widest candidates";

  // A budget no candidate fits: every one is dropped and the head falls back to dense.
  options.budget_spec = "a-shape:sink=1,local=1";
  options.scale_to_length = false;
  const LayerSearchResult tight = search_layer(tensors.q.view(), tensors.k.view(),
                                               tensors.v.view(), workload.layout(), *cost, options,
                                               head);
  const HeadSearchResult& fallback = tight.heads[0];
  EXPECT_TRUE(fallback.dense_fallback);
  EXPECT_EQ(fallback.chosen.spec.name, "dense");
  EXPECT_EQ(fallback.fallback_reason, "no candidate within the budget");
  // Every candidate of the space, and in stage 3 their boundary modes.
  EXPECT_GE(fallback.over_budget, static_cast<int64_t>(tight.space.size()));

  // Recall below the floor: dense as well, saying why.
  options = single_thread_options();
  options.sample_rows = 16;
  options.dense_below_recall = 1.0;
  const LayerSearchResult floor = search_layer(tensors.q.view(), tensors.k.view(),
                                               tensors.v.view(), workload.layout(), *cost, options,
                                               head);
  EXPECT_TRUE(floor.heads[0].dense_fallback);
  EXPECT_NE(floor.heads[0].fallback_reason.find("dense_below_recall"), std::string::npos);
}

// A cost model for tests of the stages alone: every plan is free.
class FreeCost final : public CostModel {
 public:
  std::unique_ptr<CostInputs> prepare(const TensorView&, const TensorView&,
                                      const TensorView&) override {
    return std::make_unique<CostInputs>();
  }
  double cost(const Plan&, const CostInputs&) override { return 0.0; }
  double index_cost(const PatternSpec&, const PlanShape&, const ModalityLayout&, float,
                    const CostInputs&) override {
    return 0.0;
  }
  bool measured() const override { return false; }
  std::string unit() const override { return "nothing"; }
  std::string gpu() const override { return {}; }
  int64_t tile_rows(int64_t) const override { return kDefaultTileRows; }
};

TEST(Search, SearchesHeadsInParallelWithTheSameResults) {
  const SmallVideo video = small_video(2048, DType::kFloat32);
  const Workload& workload = video.workload;
  const Workload::Tensors& tensors = video.tensors;
  const std::unique_ptr<CostModel> cost = make_modelled_cost();
  SearchOptions options = single_thread_options();
  options.sample_rows = 16;
  std::vector<int64_t> progress;
  options.on_scope_done = [&](int64_t q_head, const ScopeSearch&) { progress.push_back(q_head); };
  const std::vector<int64_t> heads = {3, 0, 2};
  const LayerSearchResult serial =
      search_layer(tensors.q.view(), tensors.k.view(), tensors.v.view(), workload.layout(), *cost,
                   options, heads);
  const std::size_t serial_progress = progress.size();
  options.num_threads = 3;
  const LayerSearchResult parallel =
      search_layer(tensors.q.view(), tensors.k.view(), tensors.v.view(), workload.layout(), *cost,
                   options, heads);
  EXPECT_EQ(progress.size(), 2 * serial_progress) << "every scope of every head reported once";
  ASSERT_EQ(parallel.heads.size(), heads.size());
  for (std::size_t i = 0; i < heads.size(); ++i) {
    SCOPED_TRACE("head " + std::to_string(heads[i]));
    EXPECT_EQ(parallel.heads[i].q_head, heads[i]) << "results stay in the order asked for";
    EXPECT_EQ(parallel.heads[i].chosen.spec.to_string(), serial.heads[i].chosen.spec.to_string());
    EXPECT_EQ(parallel.heads[i].chosen.recall, serial.heads[i].chosen.recall);
    EXPECT_EQ(parallel.heads[i].chosen.cost, serial.heads[i].chosen.cost);
    EXPECT_EQ(parallel.heads[i].scopes.size(), serial.heads[i].scopes.size());
  }
}

TEST(SearchSpace, RecallLadderWidensVerticalSlashThenEndsDense) {
  const std::vector<PatternSpec> ladder = recall_ladder(kPaperSeqLen, true);
  ASSERT_EQ(ladder.size(), 4u);
  int64_t previous_vertical = 0;
  for (std::size_t i = 0; i + 1 < ladder.size(); ++i) {
    EXPECT_EQ(ladder[i].name, "vertical-slash");
    EXPECT_EQ(ladder[i].param("boundary", -1), 0) << "every step is built on the GPU";
    EXPECT_GT(ladder[i].param("vertical", 0), previous_vertical);
    previous_vertical = ladder[i].param("vertical", 0);
  }
  EXPECT_EQ(ladder[0].param("vertical", 0), 4000);
  EXPECT_EQ(ladder[0].param("slash", 0), 8192);
  EXPECT_EQ(ladder.back().name, "dense");
  // Scaled like the space: a quarter of the lines at a quarter of the length.
  EXPECT_EQ(recall_ladder(kPaperSeqLen / 4, true)[0].param("vertical", 0), 1000);
}

// The layer-level recall target: heads below it climb the ladder (most recall per cost first)
// until the mean of the chosen specs reaches it; the replaced in-budget choice is kept.
TEST(Search, RaisesHeadsBeyondTheBudgetToReachTheLayersRecallTarget) {
  const SmallVideo video = small_video(2048, DType::kFloat32);
  const Workload& workload = video.workload;
  const Workload::Tensors& tensors = video.tensors;
  const std::unique_ptr<CostModel> cost = make_modelled_cost();
  SearchOptions options = single_thread_options();
  options.sample_rows = 16;
  const LayerSearchResult plain = search_layer(tensors.q.view(), tensors.k.view(), tensors.v.view(),
                                               workload.layout(), *cost, options);
  double plain_mean = 0.0;
  for (const HeadSearchResult& head : plain.heads) plain_mean += head.chosen.recall;
  plain_mean /= static_cast<double>(plain.heads.size());
  ASSERT_LT(plain_mean, 0.999) << "the budget leaves recall to gain on this workload";

  options.target_mean_recall = 0.999;
  options.num_threads = 2;
  std::vector<int64_t> raise_reports;
  options.on_scope_done = [&](int64_t q_head, const ScopeSearch& search) {
    if (search.stage == "raise") raise_reports.push_back(q_head);
  };
  const std::vector<PatternSpec> ladder =
      recall_ladder(workload.seq_len(), options.scale_to_length);
  const LayerSearchResult raised = search_layer(
      tensors.q.view(), tensors.k.view(), tensors.v.view(), workload.layout(), *cost, options);
  double raised_mean = 0.0;
  int64_t raised_heads = 0;
  for (std::size_t i = 0; i < raised.heads.size(); ++i) {
    const HeadSearchResult& head = raised.heads[i];
    raised_mean += head.chosen.recall;
    if (!head.within_budget) {
      EXPECT_EQ(head.chosen.spec.to_string(), plain.heads[i].chosen.spec.to_string())
          << "a head that was not raised keeps its in-budget choice";
      continue;
    }
    ++raised_heads;
    EXPECT_EQ(head.within_budget->spec.to_string(), plain.heads[i].chosen.spec.to_string());
    ASSERT_EQ(head.scopes.back().stage, "raise") << "the ladder is recorded as a scope";
    ASSERT_TRUE(head.scopes.back().winner.has_value());
    EXPECT_EQ(head.scopes.back().winner->spec.to_string(), head.chosen.spec.to_string());
    EXPECT_GT(head.chosen.recall, head.within_budget->recall);
    EXPECT_TRUE(std::any_of(
        ladder.begin(), ladder.end(),
        [&](const PatternSpec& step) { return step.to_string() == head.chosen.spec.to_string(); }))
        << head.chosen.spec.to_string() << " is a step of the recall ladder";
  }
  raised_mean /= static_cast<double>(raised.heads.size());
  EXPECT_GT(raised_heads, 0);
  EXPECT_GE(static_cast<int64_t>(raise_reports.size()), raised_heads)
      << "every scored ladder is reported as progress";
  // Dense closes every ladder, so the target is always reachable.
  EXPECT_GE(raised_mean, options.target_mean_recall);

  options.target_mean_recall = 1.5;
  expect_error(
      [&] {
        (void)search_layer(tensors.q.view(), tensors.k.view(), tensors.v.view(), workload.layout(),
                           *cost, options);
      },
      ErrorCode::kInvalidArgument, {"target_mean_recall", "[0, 1]"});
}

// The modelled attention cost, with an index that costs `charge_per_line` for every line of a
// vertical-slash spec's budget (the selection and conversion grow with the lines kept).
class ChunksWithIndex final : public CostModel {
 public:
  explicit ChunksWithIndex(double charge_per_line) : charge_per_line_(charge_per_line) {}
  static int64_t lines(const PatternSpec& spec) {
    return spec.name == "vertical-slash" ? spec.param("vertical", 0) + spec.param("slash", 0) : 0;
  }
  std::unique_ptr<CostInputs> prepare(const TensorView& q, const TensorView& k,
                                      const TensorView& v) override {
    return chunks_->prepare(q, k, v);
  }
  double cost(const Plan& plan, const CostInputs& inputs) override {
    return chunks_->cost(plan, inputs);
  }
  double index_cost(const PatternSpec& spec, const PlanShape&, const ModalityLayout&, float,
                    const CostInputs&) override {
    return charge_per_line_ * static_cast<double>(lines(spec));
  }
  bool measured() const override { return false; }
  std::string unit() const override { return chunks_->unit(); }
  std::string gpu() const override { return {}; }
  int64_t tile_rows(int64_t head_dim) const override { return chunks_->tile_rows(head_dim); }

 private:
  std::unique_ptr<CostModel> chunks_ = make_modelled_cost();
  double charge_per_line_;
};

// The raise stage pays for the index, of the ladder's steps and of the choices they replace: heads
// that climbed to a wider vertical-slash step while the index was free climb to dense once the
// extra lines' index costs more than the attention they save; every raised head carries its
// choice's index cost.
TEST(Search, RaisingChargesTheIndexOfEachStep) {
  const SmallVideo video = small_video(2048, DType::kFloat32);
  const Workload::Tensors& tensors = video.tensors;
  SearchOptions options = single_thread_options();
  options.sample_rows = 16;
  options.target_mean_recall = 0.999;
  const auto search = [&](double charge_per_line) {
    ChunksWithIndex cost(charge_per_line);
    return search_layer(tensors.q.view(), tensors.k.view(), tensors.v.view(),
                        video.workload.layout(), cost, options);
  };
  const LayerSearchResult free_index = search(0.0);
  std::vector<std::size_t> climbed_to_lines;
  for (std::size_t i = 0; i < free_index.heads.size(); ++i) {
    const HeadSearchResult& head = free_index.heads[i];
    if (head.within_budget && head.chosen.spec.name == "vertical-slash")
      climbed_to_lines.push_back(i);
  }
  ASSERT_FALSE(climbed_to_lines.empty()) << "with a free index some head takes a line step";

  constexpr double kChargePerLine = 1e6;  // a line's index far above any plan's chunks here
  const LayerSearchResult charged = search(kChargePerLine);
  for (std::size_t i : climbed_to_lines) {
    SCOPED_TRACE("head " + std::to_string(charged.heads[i].q_head));
    EXPECT_EQ(charged.heads[i].chosen.spec.name, "dense");
  }
  for (const HeadSearchResult& head : charged.heads) {
    if (!head.within_budget) continue;
    EXPECT_EQ(head.chosen.index_cost, kChargePerLine * ChunksWithIndex::lines(head.chosen.spec))
        << head.chosen.spec.to_string();
    ASSERT_FALSE(head.scopes.back().scored.empty());
    for (const CandidateScore& step : head.scopes.back().scored) {
      EXPECT_EQ(step.index_cost, kChargePerLine * ChunksWithIndex::lines(step.spec))
          << step.spec.to_string() << ": every ladder step is charged its index";
    }
  }
  EXPECT_GE(mean_recall(charged.heads), options.target_mean_recall);
}

TEST(Search, RunsTheStagesOfTheModalitiesPresent) {
  // Text only: one intra scope, no pairs, no boundary modes.
  test::Random random;
  SCOPED_TRACE(random.trace());
  const int64_t seq_len = 700;
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, seq_len, 2, 32});
  const Tensor kv = random.normal_tensor(DType::kFloat32, {1, seq_len, 1, 32});
  const std::unique_ptr<CostModel> cost = make_modelled_cost();
  SearchOptions options = single_thread_options();
  options.sample_rows = 8;
  const LayerSearchResult text =
      search_layer(q.view(), kv.view(), kv.view(), ModalityLayout::text_only(seq_len), *cost,
                   options, std::vector<int64_t>{1});
  ASSERT_EQ(text.heads.size(), 1u);
  std::vector<std::string> scopes;
  for (const ScopeSearch& search : text.heads[0].scopes) scopes.push_back(search.scope);
  EXPECT_EQ(scopes, (std::vector<std::string>{"text", "full"}));
  for (const CandidateScore& score : text.heads[0].scopes.back().scored) {
    EXPECT_EQ(score.spec.param("boundary", 0), 0) << "one modality: no boundary modes";
  }

  // Text, an image and a video: 3 intra scopes, 6 ordered pairs, then the whole sequence.
  const ModalityLayout mixed =
      LayoutBuilder().text(20).video({6, 6, 8}).text(40).image({1, 8, 8}).text(30).build();
  const Tensor mixed_q = random.normal_tensor(DType::kFloat32, {1, mixed.length(), 2, 32});
  const Tensor mixed_kv = random.normal_tensor(DType::kFloat32, {1, mixed.length(), 1, 32});
  // At a few hundred tokens the boundary modes' extra tiles exceed any budget in key chunks; a
  // cost model that charges nothing lets every candidate through.
  FreeCost free;
  const LayerSearchResult result =
      search_layer(mixed_q.view(), mixed_kv.view(), mixed_kv.view(), mixed, free, options,
                   std::vector<int64_t>{0});
  std::set<std::string> names;
  for (const ScopeSearch& search : result.heads[0].scopes) names.insert(search.stage + " " + search.scope);
  EXPECT_EQ(names, (std::set<std::string>{"intra text", "intra image", "intra video",
                                          "cross text->image", "cross text->video",
                                          "cross image->text", "cross image->video",
                                          "cross video->text", "cross video->image",
                                          "inter full"}));
  // Mixed modalities: stage 3 tries the boundary modes of the vertical-slash and grid winners.
  std::set<int64_t> modes;
  for (const CandidateScore& score : result.heads[0].scopes.back().scored) {
    if (score.spec.name != "a-shape") modes.insert(score.spec.param("boundary", -1));
  }
  EXPECT_EQ(modes, (std::set<int64_t>{0, 2, 3, 4}));
  // ... each with and without per-item sinks.
  std::set<int64_t> item_sinks;
  for (const CandidateScore& score : result.heads[0].scopes.back().scored) {
    if (score.spec.name != "a-shape") item_sinks.insert(score.spec.param("item_sinks", -1));
  }
  EXPECT_EQ(item_sinks, (std::set<int64_t>{0, 1}));

  // Only the modes asked for (none alone: what the GPU index builders serve).
  options.boundary_modes = {0};
  const LayerSearchResult none_only = search_layer(mixed_q.view(), mixed_kv.view(), mixed_kv.view(),
                                                   mixed, free, options, std::vector<int64_t>{0});
  for (const CandidateScore& score : none_only.heads[0].scopes.back().scored) {
    EXPECT_EQ(score.spec.param("boundary", 0), 0) << score.spec.to_string();
  }
  EXPECT_EQ(none_only.heads[0].chosen.spec.param("boundary", 0), 0);
  options.boundary_modes = {1};
  expect_error(
      [&] {
        (void)search_layer(mixed_q.view(), mixed_kv.view(), mixed_kv.view(), mixed, free, options,
                           std::vector<int64_t>{0});
      },
      ErrorCode::kInvalidArgument, {"boundary_modes", "2 (Q-boundary)", "1"});
  options.boundary_modes = {0};
  options.item_sinks = {-1};
  expect_error(
      [&] {
        (void)search_layer(mixed_q.view(), mixed_kv.view(), mixed_kv.view(), mixed, free, options,
                           std::vector<int64_t>{0});
      },
      ErrorCode::kInvalidArgument, {"item_sinks", ">= 0", "-1"});
}

// builds_plan_on_device: what prepare_pattern builds by kernels, without a GPU (host logic only).
TEST(Search, KnowsWhichPlansTheGpuBuilds) {
  const ModalityLayout mixed =
      LayoutBuilder().text(20).video({6, 6, 8}).text(40).image({1, 8, 8}).text(30).build();
  const PlanShape shape{1, 1, mixed.length(), mixed.length(), kDefaultTileRows};
  const Device gpu{DeviceType::kCUDA, 0};
  const bool engine = build_info().cuda_enabled;
  for (const char* spec : {"dense", "a-shape", "vertical-slash", "vertical-slash:boundary=2",
                           "vertical-slash:boundary=3", "grid", "grid:boundary=1",
                           "grid:boundary=2", "grid:boundary=3"}) {
    EXPECT_EQ(builds_plan_on_device(PatternSpec::parse(spec), shape, &mixed, gpu), engine) << spec;
    EXPECT_FALSE(builds_plan_on_device(PatternSpec::parse(spec), shape, &mixed, Device{}))
        << spec << " on the CPU";
  }
  // Query groups whose last rows are more runs than the GPU estimate takes (16): on the host.
  constexpr int64_t kOneTokenImages = 20;
  LayoutBuilder runs;
  for (int64_t i = 0; i < kOneTokenImages; ++i) runs.text(1).image({1, 1, 1});
  const ModalityLayout many_runs = runs.text(1).build();
  const PlanShape runs_shape{1, 1, many_runs.length(), many_runs.length(), kDefaultTileRows};
  for (const char* spec : {"vertical-slash:boundary=2", "grid:boundary=2", "grid:boundary=3"}) {
    EXPECT_FALSE(builds_plan_on_device(PatternSpec::parse(spec), runs_shape, &many_runs, gpu))
        << spec;
  }
  expect_error(
      [&] { (void)builds_plan_on_device(PatternSpec::parse("no-such"), shape, &mixed, gpu); },
      ErrorCode::kInvalidArgument, {"no-such"});
}

// SearchOptions::index_device: candidates the GPU would not build are dropped and counted, in
// every stage; with the engine the stages still score the GPU-built ones.
TEST(Search, SkipsCandidatesWhoseIndexTheHostWouldBuild) {
  test::Random random;
  SCOPED_TRACE(random.trace());
  // The layout ends in one-token images: the text and image groups' last rows are more runs than
  // the GPU estimate takes, so stage 3's Q/2D-boundary candidates would build on the host.
  constexpr int64_t kOneTokenImages = 20;
  LayoutBuilder builder;
  builder.text(20).video({6, 6, 8}).text(40).image({1, 8, 8}).text(30);
  for (int64_t i = 0; i < kOneTokenImages; ++i) builder.image({1, 1, 1}).text(1);
  const ModalityLayout mixed = builder.build();
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, mixed.length(), 2, 32});
  const Tensor kv = random.normal_tensor(DType::kFloat32, {1, mixed.length(), 1, 32});
  FreeCost free;
  SearchOptions options = single_thread_options();
  options.sample_rows = 16;
  options.index_device = Device{DeviceType::kCUDA, 0};
  const LayerSearchResult result = search_layer(q.view(), kv.view(), kv.view(), mixed, free,
                                                options, std::vector<int64_t>{0, 1});
  const PlanShape shape{1, 1, mixed.length(), mixed.length(), kDefaultTileRows};
  int64_t skipped = 0;
  int64_t scored = 0;
  for (const HeadSearchResult& head : result.heads) {
    for (const ScopeSearch& search : head.scopes) {
      skipped += search.host_index;
      for (const CandidateScore& score : search.scored) {
        ++scored;
        if (search.scope == "full") {
          EXPECT_TRUE(builds_plan_on_device(score.spec, shape, &mixed, *options.index_device))
              << score.spec.to_string();
        }
      }
    }
    if (!head.dense_fallback) {
      EXPECT_TRUE(builds_plan_on_device(head.chosen.spec, shape, &mixed, *options.index_device))
          << head.chosen.spec.to_string();
    }
  }
  if (build_info().cuda_enabled) {
    EXPECT_GT(skipped, 0) << "stage 3's Q/2D-boundary candidates are host-built here";
    EXPECT_GT(scored, 0);
  } else {
    EXPECT_EQ(scored, 0) << "a CPU-only build builds nothing on a GPU";
    for (const HeadSearchResult& head : result.heads) EXPECT_TRUE(head.dense_fallback);
  }
}

TEST(Search, BadInputsNameTheArgument) {
  WorkloadSpec spec = small_video_workload();
  spec.seq_len = 2048;
  const Workload workload = Workload::create(spec);
  const Workload::Tensors tensors = workload.materialize(DType::kBFloat16);
  const std::unique_ptr<CostModel> cost = make_modelled_cost();
  const TensorView q = tensors.q.view(), k = tensors.k.view(), v = tensors.v.view();
  const SearchOptions options = single_thread_options();
  auto search = [&](const ModalityLayout& layout, const SearchOptions& with,
                    std::vector<int64_t> heads) {
    return [&, layout, with, heads] { (void)search_layer(q, k, v, layout, *cost, with, heads); };
  };
  expect_error(search(ModalityLayout::text_only(1000), options, {0}),
               ErrorCode::kInvalidArgument, {"layout length", "2048", "got 1000"});
  expect_error(search(workload.layout(), options, {4}), ErrorCode::kInvalidArgument,
               {"q_heads", "[0, 4)", "got 4"});
  SearchOptions bad = options;
  bad.budget_spec = "vertical-slash";
  expect_error(search(workload.layout(), bad, {0}), ErrorCode::kInvalidArgument,
               {"budget_spec", "static pattern", "vertical-slash"});
  bad = options;
  bad.sample_rows = 0;
  expect_error(search(workload.layout(), bad, {0}), ErrorCode::kInvalidArgument,
               {"sample_rows", ">= 1", "got 0"});
  TensorView short_k = k;
  short_k.shape[1] = 1024;
  expect_error([&] { (void)search_layer(q, short_k, v, workload.layout(), *cost, options); },
               ErrorCode::kInvalidArgument, {"k"});
  if (!build_info().cuda_enabled) {
    expect_error([&] { (void)make_measured_cost(Device{DeviceType::kCUDA, 0}, 1, 3); },
                 ErrorCode::kUnsupported, {"measured cost", "CPU-only build"});
  }
}

}  // namespace
}  // namespace mmsparse
