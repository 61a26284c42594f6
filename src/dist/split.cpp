// The context split: anchor, virtual hosts (zigzag for Spava and the ring), the query block, and
// each rank's local sequence. Plain arithmetic, the same on every rank.

#include <algorithm>
#include <array>
#include <string>

#include "mmsparse/dist.h"
#include "mmsparse/patterns.h"
#include "mmsparse/status.h"

namespace mmsparse::dist {
namespace {

// Paper defaults (Spava §5.1): anchor = n/64, passing = n/128 (APB: n/64).
constexpr int64_t kAnchorDivisor = 64;
constexpr int64_t kSpavaPassingDivisor = 128;
constexpr int64_t kApbPassingDivisor = 64;

constexpr std::array<std::string_view, 4> kSchemeNames = {"spava", "apb", "star", "zigzag-ring"};

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Splits `length` tokens into `count` blocks. Whole tiles are spread evenly (earlier blocks take
// the extra tiles) and the partial tile goes to the last block, which has the fewest tiles; if
// there are fewer tiles than blocks, tokens are spread evenly instead. No padding anywhere.
std::vector<int64_t> block_lengths(int64_t length, int64_t count, int64_t tile) {
  std::vector<int64_t> lengths(static_cast<std::size_t>(count), 0);
  if (count == 0) return lengths;
  const int64_t tiles = length / tile;
  if (tiles >= count) {
    for (int64_t h = 0; h < count; ++h) {
      lengths[static_cast<std::size_t>(h)] = tile * (tiles / count + (h < tiles % count ? 1 : 0));
    }
    lengths.back() += length % tile;
  } else {
    for (int64_t h = 0; h < count; ++h) {
      lengths[static_cast<std::size_t>(h)] = length / count + (h < length % count ? 1 : 0);
    }
  }
  return lengths;
}

void check_config(const DistConfig& config, int64_t context_len, int64_t query_len, int world) {
  if (world < 1) throw_invalid_argument("world", ">= 1 rank", std::to_string(world));
  if (context_len < 1) throw_invalid_argument("context_len", ">= 1", std::to_string(context_len));
  if (query_len < 0) throw_invalid_argument("query_len", ">= 0", std::to_string(query_len));
  if (config.tile < 1) throw_invalid_argument("tile", ">= 1", std::to_string(config.tile));
  if (config.pool_width < 1 || config.pool_width % 2 == 0) {
    throw_invalid_argument("pool_width", "an odd width >= 1", std::to_string(config.pool_width));
  }
  if (config.anchor_len < kUseDefault) {
    throw_invalid_argument("anchor_len", ">= 0 or -1 (default)", std::to_string(config.anchor_len));
  }
  if (config.passing_len < kUseDefault) {
    throw_invalid_argument("passing_len", ">= 0 or -1 (default)",
                           std::to_string(config.passing_len));
  }
  if (!config.local_pattern.empty()) {
    resolve_pattern(PatternSpec::parse(config.local_pattern));  // throws naming the bad part
  }
  const bool approximate = config.scheme != Scheme::kZigzagRing;
  if (approximate && query_len < 1) {
    throw_invalid_argument("query_len",
                           ">= 1 for " + std::string(scheme_name(config.scheme)) +
                               " (the query block selects the essential KVs and is merged)",
                           std::to_string(query_len));
  }
  if (config.scheme == Scheme::kStar && config.passing_len > 0) {
    throw_invalid_argument("passing_len", "0 or -1 for star (it passes no KVs)",
                           std::to_string(config.passing_len));
  }
  if (config.scheme == Scheme::kZigzagRing &&
      (config.anchor_len > 0 || config.passing_len > 0 || !config.local_pattern.empty())) {
    throw_invalid_argument("config", "no anchor, passing or local pattern for zigzag-ring (exact)",
                           "anchor " + std::to_string(config.anchor_len) + ", passing " +
                               std::to_string(config.passing_len));
  }
}

SequenceSplit split_ring(const DistConfig& config, int64_t context_len, int64_t query_len,
                         int world) {
  SequenceSplit split;
  split.scheme = config.scheme;
  split.world = world;
  split.context_len = context_len;
  split.query_len = query_len;
  const int64_t chunks = 2 * static_cast<int64_t>(world);
  const int64_t total = context_len + query_len;
  if (total < chunks) {
    throw_invalid_argument("context_len + query_len",
                           ">= 2 * world = " + std::to_string(chunks) + " tokens (one per chunk)",
                           std::to_string(total));
  }
  int64_t begin = 0;
  for (int64_t len : block_lengths(total, chunks, config.tile)) {
    split.hosts.push_back({begin, len, 0});
    begin += len;
  }
  for (int r = 0; r < world; ++r) split.rank_hosts.push_back({r, 2 * world - 1 - r});
  return split;
}

int64_t default_anchor(const DistConfig& config, int64_t context_len, int world) {
  if (config.scheme == Scheme::kStar) {
    return round_up((context_len + world - 1) / world, config.tile);
  }
  // Tile-aligned as the kernels like it, unless the tile is large next to the context (short test
  // sequences): then the paper's n/64 as it is.
  const int64_t aligned = round_up(context_len / kAnchorDivisor, config.tile);
  return aligned * kAnchorDivisor <= context_len * 2 ? aligned : context_len / kAnchorDivisor;
}

int64_t default_passing(const DistConfig& config, int64_t context_len) {
  switch (config.scheme) {
    case Scheme::kSpava:
      return context_len / kSpavaPassingDivisor;
    case Scheme::kApb:
      return context_len / kApbPassingDivisor;
    default:
      return 0;
  }
}

}  // namespace

std::string_view scheme_name(Scheme scheme) {
  return kSchemeNames[static_cast<std::size_t>(scheme)];
}

Scheme scheme_from_name(std::string_view name, const std::string& argument) {
  for (std::size_t i = 0; i < kSchemeNames.size(); ++i) {
    if (kSchemeNames[i] == name) return static_cast<Scheme>(i);
  }
  throw_invalid_argument(argument, "one of spava, apb, star, zigzag-ring", std::string(name));
}

SequenceSplit split_sequence(const DistConfig& config, int64_t context_len, int64_t query_len,
                             int world) {
  check_config(config, context_len, query_len, world);
  if (config.scheme == Scheme::kZigzagRing) {
    return split_ring(config, context_len, query_len, world);
  }
  const bool star = config.scheme == Scheme::kStar;
  const int64_t host_count = config.scheme == Scheme::kSpava ? 2 * int64_t{world} : world;
  // Star's first host is the anchor itself (rank 0 holds only it); the others split the rest.
  const int64_t context_hosts = star ? host_count - 1 : host_count;
  const int64_t max_anchor = context_len - context_hosts;
  if (max_anchor < 0 || (config.anchor_len != kUseDefault && config.anchor_len > max_anchor)) {
    throw_invalid_argument(
        "anchor_len",
        "at most context_len - " + std::to_string(context_hosts) +
            " (one context token per virtual host) = " + std::to_string(max_anchor),
        config.anchor_len == kUseDefault ? "context_len " + std::to_string(context_len)
                                         : std::to_string(config.anchor_len));
  }
  SequenceSplit split;
  split.scheme = config.scheme;
  split.world = world;
  split.context_len = context_len;
  split.query_len = query_len;
  split.anchor_len = config.anchor_len == kUseDefault
                         ? std::min(default_anchor(config, context_len, world), max_anchor)
                         : config.anchor_len;
  const int64_t passing =
      config.passing_len == kUseDefault ? default_passing(config, context_len) : config.passing_len;
  int64_t begin = split.anchor_len;
  if (star) split.hosts.push_back({begin, 0, 0});
  for (int64_t len : block_lengths(context_len - split.anchor_len, context_hosts, config.tile)) {
    split.hosts.push_back({begin, len, std::min(passing, len)});
    begin += len;
  }
  for (int r = 0; r < world; ++r) {
    if (config.scheme == Scheme::kSpava) {
      split.rank_hosts.push_back({r, 2 * world - 1 - r});
    } else {
      split.rank_hosts.push_back({r});
    }
  }
  return split;
}

std::vector<Segment> local_layout(const SequenceSplit& split, int rank) {
  if (rank < 0 || rank >= split.world) {
    throw_invalid_argument("rank", "in [0, " + std::to_string(split.world) + ")",
                           std::to_string(rank));
  }
  std::vector<Segment> segments;
  int64_t local = 0;
  const auto add = [&](int64_t global_begin, int64_t len) {
    segments.push_back({global_begin, local, len});
    local += len;
  };
  const bool ring = split.scheme == Scheme::kZigzagRing;
  if (!ring) add(0, split.anchor_len);
  for (int host : split.rank_hosts[static_cast<std::size_t>(rank)]) {
    const VirtualHost& block = split.hosts[static_cast<std::size_t>(host)];
    add(block.begin, block.len);
  }
  if (!ring) add(split.context_len, split.query_len);
  return segments;
}

int64_t local_length(const SequenceSplit& split, int rank) {
  const std::vector<Segment> segments = local_layout(split, rank);
  return segments.back().local_begin + segments.back().len;
}

std::vector<int64_t> local_positions(const SequenceSplit& split, int rank) {
  std::vector<int64_t> positions;
  for (const Segment& segment : local_layout(split, rank)) {
    for (int64_t i = 0; i < segment.len; ++i) positions.push_back(segment.global_begin + i);
  }
  return positions;
}

}  // namespace mmsparse::dist
