#pragma once
// BlindSight's offline characterisation (docs/blindsight.md): which template mask each attention
// head tolerates, decided per prompt from the NMSE of the template's output against the model's
// dense output (Alg. 1), then across a dataset by a rule on the fractions of prompts (Alg. 2), and
// written as the per-model pattern config, so that BlindSight heads mix with other methods'. Also
// the attention FLOPs a config saves on a prompt (the paper's Table 8).

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

// The head categories of §3.2, cheapest last but one: the template mask of each.
enum class HeadType : uint8_t { kDense, kSink, kIntra, kIntraSink };
inline constexpr int kHeadTypes = 4;
inline constexpr std::array<HeadType, kHeadTypes> kAllHeadTypes = {
    HeadType::kDense, HeadType::kSink, HeadType::kIntra, HeadType::kIntraSink};
std::string_view head_type_name(HeadType type);  // "dense", "sink", "intra", "intra-sink"

// How a model attends to its images, which the templates follow: Qwen (causal, sinks at the start
// of every image) or Gemma 3 (bidirectional inside every image, sinks at fixed offsets, App. C).
struct ImageStyle {
  int64_t sink_percent = 10;          // Qwen: the first ceil(sink_percent% of its tokens)
  std::vector<int64_t> sink_offsets;  // Gemma 3: these offsets inside each image (then not %)
  bool bidirectional = false;         // Gemma 3
  bool operator==(const ImageStyle&) const = default;
};

// The template of a head type in `style` ("blindsight-intra-sink:bidirectional=0,..."); a dense
// head of a causal model is the engine's "dense", of a bidirectional one "blindsight-dense".
PatternSpec head_type_spec(HeadType type, const ImageStyle& style);
// The head type a spec of head_type_spec stands for; false for other specs.
bool head_type_of(const PatternSpec& spec, HeadType& type);

// α_layer, the NMSE a sparse template may cost in layer `layer` of `layers`: fixed (0.1 for Qwen)
// or linear, first + (last - first) · layer / layers (the paper's Gemma 3 schedules).
struct AlphaSchedule {
  double first = 0.1;
  double last = 0.1;
  double at(int64_t layer, int64_t layers) const;
};
// "0.1" (fixed) or "0.005:0.195" (linear); throws Error(kInvalidArgument) naming `argument`.
AlphaSchedule parse_alpha_schedule(const std::string& text, const std::string& argument);

// One head on one prompt (Alg. 1).
struct HeadCharacterisation {
  HeadType type = HeadType::kDense;
  std::array<double, kHeadTypes> nmse{};    // of each template's output against dense (dense: 0)
  std::array<int64_t, kHeadTypes> pairs{};  // (query, key) pairs each template computes
};

// Alg. 1 for every query head of one layer of one prompt: the sparse templates are tried from the
// fewest pairs up, and the first whose NMSE is below `alpha` is the head's type; dense otherwise.
// q [1, seq, q_heads, head_dim], k, v [1, seq, kv_heads, head_dim]: host views, any strides and
// float dtype; layout.length() == seq. The attention runs on `device`: the CPU reference
// (num_threads threads), or a CUDA device (q, k, v copied there, outputs copied back).
std::vector<HeadCharacterisation> characterise_layer(const TensorView& q, const TensorView& k,
                                                     const TensorView& v,
                                                     const ModalityLayout& layout,
                                                     const ImageStyle& style, double alpha,
                                                     int num_threads = 0, Device device = {});

// Gemma 3's sink offsets found from data (App. C: the top-10% most frequent sink positions over a
// characterisation set). Images must all have one size. For every query head of every layer added,
// the keys of earlier images are scored by the attention the image queries put on them under the
// model's dense mask, summed per offset inside the image; the head's top `fraction` of offsets
// count once each. offsets() gives the `fraction` of offsets counted most often.
class SinkOffsetTally {
 public:
  explicit SinkOffsetTally(double fraction = 0.1) : fraction_(fraction) {}
  // q [1, seq, q_heads, head_dim], k [1, seq, kv_heads, head_dim]: host views, any strides and
  // float dtype; layout.length() == seq. Throws naming the layout when its images differ in size.
  void add_layer(const TensorView& q, const TensorView& k, const ModalityLayout& layout,
                 bool bidirectional);
  // Ascending; empty before any image with earlier images was seen.
  std::vector<int64_t> offsets() const;

 private:
  double fraction_;
  int64_t image_tokens_ = 0;
  std::vector<int64_t> counts_;  // [image_tokens_]
};

// Alg. 2's thresholds on the fractions of prompts that chose dense, sink and intra.
struct AggregationThresholds {
  double dense = 0.25;
  double sink = 0.60;
  double intra = 0.60;
};

// Alg. 2 for one head: fractions[type] of the prompts chose each type.
HeadType aggregate_head(const std::array<double, kHeadTypes>& fractions,
                        const AggregationThresholds& thresholds);

// Prompt-level choices per (layer, head) over a dataset, and what they aggregate to.
class HeadTypeTally {
 public:
  void add(int64_t layer, int64_t head, HeadType type);
  // Fractions of the prompts tallied for the head; throws naming the head when it has none.
  std::array<double, kHeadTypes> fractions(int64_t layer, int64_t head) const;
  // layer -> head -> aggregated type.
  std::map<int64_t, std::map<int64_t, HeadType>> aggregate(
      const AggregationThresholds& thresholds) const;

 private:
  std::map<int64_t, std::map<int64_t, std::array<int64_t, kHeadTypes>>> counts_;
};

// Whether a config's templates read K and V through their key orders (docs/blindsight.md, "Where
// key orders pay"). kAuto: in place (permute=0) for causal styles, where a config built per call
// pays more for the key orders' host build than they save; through the order (permute=-1) for
// bidirectional ones, whose in-place tiles evaluate token masks. kAlways / kNever: every template
// permute=-1 / permute=0 (a layout that repeats across calls reuses its plan, and the key orders
// then save 1.5-4% of the causal style's attention).
enum class ConfigKeyOrders : uint8_t { kAuto, kAlways, kNever };

// The per-model config of aggregated types: every head its template, the default dense.
PatternConfig blindsight_config(const std::map<int64_t, std::map<int64_t, HeadType>>& types,
                                const ImageStyle& style,
                                ConfigKeyOrders key_orders = ConfigKeyOrders::kAuto);

// Table 8: the share of the model's dense attention pairs (the same pairs as its FLOPs) that the
// config's layers [0, layers) of `heads` query heads do not compute on a prompt of this layout.
// Counts pairs from the plans, no attention.
double flops_reduction(const PatternConfig& config, const ModalityLayout& layout, int64_t layers,
                       int64_t heads, const ImageStyle& style);

struct Quartiles {
  double q1 = 0.0;
  double median = 0.0;
  double q3 = 0.0;
};
// Linear interpolation between order statistics; throws for no values.
Quartiles quartiles(std::vector<double> values);

}  // namespace mmsparse
