#pragma once
// Pictures of attention, as in MMInference's Fig. 3: one head's softmax map beside a plan's mask,
// each pooled onto a grid of cells small enough to look at, and the map restricted to what the
// plan keeps. Nothing here builds a q_len × kv_len buffer: the map is computed one query row at a
// time (its scores are kept only until the row's LSE is known) and the mask is pooled from the
// plan's key ranges, so a 128K-token head fits in a few megabytes.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "mmsparse/layout.h"
#include "mmsparse/plan.h"
#include "mmsparse/tensor.h"

namespace mmsparse {

// How the values of one cell's (query, key) pairs combine. Max keeps lines one key wide visible
// when a cell holds hundreds of keys; mean keeps mass (a row of cells sums to the row's mass).
enum class PoolMode : uint8_t { kMax, kMean };
std::string_view pool_mode_name(PoolMode mode);  // "max", "mean"
PoolMode pool_mode_from_name(std::string_view name);  // throws kParseError naming the name

// Which query sits in a grid row: original positions, or the plan's query order (the permuted view
// of grid and modality-grouped heads).
enum class RowOrder : uint8_t { kPositions, kQueryOrder };

// A [rows × cols] grid of cells over a [q_len × kv_len] matrix. Cell row r holds queries
// [row_begin(r), row_begin(r + 1)) (positions, or indices into the query order), cell column c keys
// [col_begin(c), col_begin(c + 1)); the split is as even as integers allow.
struct PooledGrid {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t q_len = 0;
  int64_t kv_len = 0;
  std::vector<double> values;  // [rows × cols], row-major

  bool empty() const { return values.empty(); }
  double at(int64_t row, int64_t col) const { return values[row * cols + col]; }
  int64_t row_begin(int64_t row) const { return row * q_len / rows; }
  int64_t col_begin(int64_t col) const { return col * kv_len / cols; }
  int64_t cell_pairs(int64_t row, int64_t col) const {
    return (row_begin(row + 1) - row_begin(row)) * (col_begin(col + 1) - col_begin(col));
  }
};

// The plan's 0/1 mask of one head slot mean-pooled onto min(cells, q_len) × min(cells, kv_len)
// cells: computed pairs / pairs in the cell, from the plan's key ranges.
PooledGrid pool_plan_mask(const Plan& plan, int64_t head_slot, int64_t cells,
                          RowOrder order = RowOrder::kPositions);

// The plan's gathered columns alone (no spans), mean-pooled like pool_plan_mask: for VecAttention
// the selected vectors, the keys each pooled query block kept, drawn apart from its sinks and
// diagonal. A column counts for every row of its tile its mask keeps (causal: keys up to the row).
PooledGrid pool_plan_columns(const Plan& plan, int64_t head_slot, int64_t cells);

struct AttentionMapOptions {
  int64_t cells = 512;  // grid side (fewer rows or columns when q_len or kv_len is smaller)
  bool gathered_columns = false;  // also pool the gathered columns (HeadAttentionMaps::columns)
  PoolMode pool = PoolMode::kMax;
  float scale = 0.0f;   // softmax scale; 0 means 1/sqrt(head_dim)
  int num_threads = 0;  // 0 = hardware concurrency
  // Called after each grid row with (causal pairs scored so far, all causal pairs), one call at a
  // time: pairs, not rows, because late rows see more keys.
  std::function<void(int64_t, int64_t)> progress;
};

// Everything one head's picture shows. The map is causal dense attention (bottom-right aligned
// when kv_len > q_len); pairs a plan computes above the diagonal are not part of it.
struct HeadAttentionMaps {
  PoolMode pool = PoolMode::kMax;
  PooledGrid attention;           // softmax probabilities, pooled
  PooledGrid mask;                // pool_plan_mask
  PooledGrid kept;                // probabilities of the pairs the plan computes, pooled
  PooledGrid columns;             // pool_plan_columns when options.gathered_columns, else empty
  PooledGrid attention_permuted;  // rows in the plan's query order; empty when that is the identity
  PooledGrid mask_permuted;
  std::vector<int64_t> query_order;  // the plan's order; empty when it is the identity
  double recall_mean = 0.0;  // kept softmax mass per row (metrics.h recall), over rows with keys
  double recall_min = 0.0;
  double density = 0.0;      // computed pairs / causal pairs (plan_density)
};

// q [batch, q_len, q_heads, head_dim], k [batch, kv_len, kv_heads, head_dim], host views of a
// floating dtype, any strides; `head` indexes q's heads (its KV head follows GQA), `head_slot` the
// plan's. Throws naming the argument on bad shapes, indices or cells < 1.
HeadAttentionMaps pool_attention_maps(const TensorView& q, const TensorView& k,
                                      int64_t batch_index, int64_t head, const Plan& plan,
                                      int64_t head_slot, const AttentionMapOptions& options = {});

// An 8-bit RGB picture, row-major, 3 bytes per pixel.
// Where a panel of a picture lies, in pixels.
struct ImagePanel {
  std::string caption;
  int64_t x = 0, y = 0, size = 0;  // top-left corner and side
};

struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> rgb;
  std::vector<ImagePanel> panels;  // render_attention_picture's panels, left to right
};

struct PictureOptions {
  int64_t panel_size = 512;  // pixels per panel side; cells are scaled up to it
  std::string title;         // first line of the picture
  // Modality strips along each panel's axes and lines at modality boundaries; none when null.
  const ModalityLayout* layout = nullptr;
};

// Panels side by side: attention map (log colour scale), the gathered columns when the maps have
// them ("selected vectors", in the mask's colours), plan mask, kept map, and when the plan
// permutes the queries the map and mask in its query order. Cells above the causal diagonal are a
// neutral grey. A legend row explains the colours.
Image render_attention_picture(const HeadAttentionMaps& maps, const PictureOptions& options);

// Throws kIoError naming the path when the file cannot be written.
void write_png(const std::string& path, const Image& image);

}  // namespace mmsparse
