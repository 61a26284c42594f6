// The kernel-aware search space (MMInference Table 3) and the scaling of its 128K values.

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "mmsparse/tools/search.h"

namespace mmsparse {
namespace {

// The length the paper's Table 2/3 values are set for.
constexpr int64_t kPaperSeqLen = 131072;
// Table 3's grid maximum stride.
constexpr int64_t kGridMaxStride = 1024;
// Grid stride 0: the stride is searched online from the input (Alg. 1).
constexpr int64_t kOnlineStride = 0;
constexpr int64_t kAShapeSink = 128;

struct GridLines {
  bool hline, vline, slash;
};
// Table 3's grid rows, duplicates removed: with the layout's frame stride, then searched online.
constexpr GridLines kFrameStrideLines[] = {
    {true, false, false}, {false, true, false}, {false, false, true},
    {false, true, true},  {true, true, true}};
constexpr GridLines kOnlineStrideLines[] = {
    {true, false, false}, {false, true, false}, {false, false, true},
    {true, true, false},  {false, true, true},  {true, true, true}};
constexpr int64_t kASHapeLocals[] = {1024, 2048, 4096};
struct VerticalSlash {
  int64_t vertical, slash;
};
constexpr VerticalSlash kVerticalSlashSizes[] = {{1000, 1024}, {1000, 2048}, {2000, 2048},
                                                 {1000, 3096}, {2000, 3096}, {1000, 4096},
                                                 {2000, 4096}, {3500, 200},  {1000, 2500}};
// The recall ladder: Table 3's widest vertical-slash budgets times these factors, then dense.
constexpr VerticalSlash kWidestVerticalSlash = {2000, 4096};
constexpr int64_t kLadderFactors[] = {2, 4, 8};

// Grid heads keep the diagonal: its own slash line (distance 0) when slash lines are on, else a
// local window of one key. The window is the costlier form on the engine: a phase tile's rows lie
// a stride apart, so their diagonals are one-key spans of a key chunk each, while slash keys are
// gathered 128 to a chunk.
constexpr int64_t kGridDiagonalWindow = 1;

PatternSpec grid_spec(int64_t stride, GridLines lines) {
  return {"grid",
          {{"stride", stride},
           {"hline", lines.hline ? 1 : 0},
           {"vline", lines.vline ? 1 : 0},
           {"slash", lines.slash ? 1 : 0},
           {"local", lines.slash ? 0 : kGridDiagonalWindow},
           {"max_stride", kGridMaxStride}}};
}

}  // namespace

PatternSpec scale_spec_to_length(const PatternSpec& spec, int64_t seq_len) {
  const std::vector<PatternInfo>& known = known_patterns();
  const auto info = std::find_if(known.begin(), known.end(), [&](const PatternInfo& pattern) {
    return pattern.name == spec.name;
  });
  if (seq_len >= kPaperSeqLen || info == known.end() || info->length_scaled.empty()) return spec;
  // Their defaults do not depend on a layout (PatternInfo::length_scaled), so they resolve without
  // one.
  PatternSpec scaled = resolve_pattern(spec);
  for (const LengthScaledParam& param : info->length_scaled) {
    int64_t minimum = param.minimum;
    if (!param.minimum_param.empty()) {
      minimum = std::max(minimum, scaled.params.at(param.minimum_param));
    }
    int64_t& value = scaled.params.at(param.key);
    value = std::max(minimum, value * seq_len / kPaperSeqLen);
  }
  return scaled;
}

std::vector<PatternSpec> recall_ladder(int64_t seq_len, bool scale_to_length) {
  std::vector<PatternSpec> ladder;
  std::set<std::string> seen;
  for (int64_t factor : kLadderFactors) {
    const PatternSpec wide{"vertical-slash",
                           {{"vertical", kWidestVerticalSlash.vertical * factor},
                            {"slash", kWidestVerticalSlash.slash * factor}}};
    const PatternSpec resolved =
        resolve_pattern(scale_to_length ? scale_spec_to_length(wide, seq_len) : wide);
    if (seen.insert(resolved.to_string()).second) ladder.push_back(resolved);
  }
  ladder.push_back(PatternSpec{"dense", {}});
  return ladder;
}

std::vector<PatternSpec> search_space(const ModalityLayout& layout, int64_t seq_len,
                                      bool scale_to_length) {
  std::vector<PatternSpec> candidates;
  if (const int64_t frame_stride = layout.video_frame_tokens(); frame_stride > 0) {
    for (const GridLines& lines : kFrameStrideLines) {
      candidates.push_back(grid_spec(frame_stride, lines));
    }
  }
  for (const GridLines& lines : kOnlineStrideLines) {
    candidates.push_back(grid_spec(kOnlineStride, lines));
  }
  for (int64_t local : kASHapeLocals) {
    candidates.push_back({"a-shape", {{"sink", kAShapeSink}, {"local", local}}});
  }
  for (const VerticalSlash& sizes : kVerticalSlashSizes) {
    candidates.push_back(
        {"vertical-slash", {{"vertical", sizes.vertical}, {"slash", sizes.slash}}});
  }

  std::vector<PatternSpec> space;
  std::set<std::string> seen;
  for (const PatternSpec& candidate : candidates) {
    const PatternSpec resolved = resolve_pattern(
        scale_to_length ? scale_spec_to_length(candidate, seq_len) : candidate, &layout);
    if (seen.insert(resolved.to_string()).second) space.push_back(resolved);
  }
  return space;
}

}  // namespace mmsparse
