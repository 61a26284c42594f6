#pragma once
// A tile's MaskPolicy as seen by one consumer warpgroup of the wgmma kernel, over span, lattice and
// column chunks (gathered keys are masked by their original positions, wherever they lie). Chunk
// decisions are uniform over the warpgroup (its 64 rows' bounds), because wgmma is issued by all
// four warps together; element masks use each thread's own rows.
// Pair semantics: the rule of core/mask_rule.h, as on the CPU reference and the mma.sync kernel.
// Gathered keys are judged by its terms score by score; consecutive keys and lattices by the
// intervals of slots that its positional terms keep (bit sets, cheaper than a test per score).
// Instantiations with Traits::kTokens also serve policies that read tokens (same-media, modality
// pairs, bidirectional media): their chunks are never full, and every score of such a chunk is
// judged by the whole rule, with the keys' tokens loaded beside the keys.

#include <cstdint>
#include <cuda/std/limits>

#include "cuda/attention/key_chunks.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/sm80/mask.cuh"
#include "cuda/attention/sm90/traits.cuh"

namespace mmsparse::cuda {

template <class Traits>
class WarpgroupMask {
 public:
  // Rows of the warp held by this thread, in the accumulator layout: lane / 4 and lane / 4 + 8.
  static constexpr int kRowsPerThread = 2;
  static constexpr int kRowHalf = Traits::kRowsPerWarp / kRowsPerThread;
  static constexpr int kThreadsPerRow = 4;  // lanes sharing one accumulator row
  // Column chunks: each lane loads the keys of kColumnKeysPerLane slots; a group of 32 slots holds
  // kScoresPerLaneGroup of a thread's scores per row (two per score tile of 8 keys).
  static constexpr int kColumnKeysPerLane = Traits::kBlockN / kWarpSize;
  static constexpr int kScoresPerLaneGroup = kWarpSize / Traits::kAccumulatorTileN * 2;
  static constexpr int kDecisionBits = 32;  // a row's decisions for a chunk, in one word
  // Span chunks: a row's kept slots in kSlotWords words; a word holds kTilesPerWord score tiles.
  static constexpr int kSlotWords = Traits::kBlockN / kDecisionBits;
  static constexpr int kTilesPerWord = kDecisionBits / Traits::kAccumulatorTileN;
  static_assert(kColumnKeysPerLane * kScoresPerLaneGroup <= kDecisionBits &&
                    Traits::kScoreTiles * 2 <= kDecisionBits,
                "bit tile·2 + e%2 of a word holds each of a row's scores");
  static_assert(Traits::kBlockN % kDecisionBits == 0, "span chunks' bit sets are whole words");

  // `rows`: the warpgroup's kWarpgroupRows original positions (kNoRow past the tile); `columns`:
  // the plan's; `token_info`: the plan's [kv_len] packed tokens (null without token masks; read
  // only with Traits::kTokens); `lattice_step`: the step of every lattice record of the plan (0
  // without any).
  // Publishes the warp's bounds in `storage`; gather_bounds() reads them after a warpgroup
  // barrier.
  template <class Storage>
  __device__ WarpgroupMask(const TileWork& work, const int32_t* rows, const int32_t* columns,
                           const int32_t* token_info, int32_t lattice_step, Storage& storage,
                           int consumer_warp, int lane)
      : policy_(work.mask),
        columns_(columns),
        token_info_(token_info),
        lattice_bits_(Traits::kLattices &&
                      (policy_.period == 0 || lattice_step % policy_.period == 0)) {
    constexpr int32_t kMaxInt = ::cuda::std::numeric_limits<int32_t>::max();
    constexpr int32_t kMinInt = ::cuda::std::numeric_limits<int32_t>::min();
    const int warp_in_group = consumer_warp % kWarpgroupWarps;
    int32_t lowest = kMaxInt;
    int32_t highest = kMinInt;
    int32_t phase_lowest = kMaxInt;
    int32_t phase_highest = kMinInt;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int32_t position =
          rows[warp_in_group * Traits::kRowsPerWarp + lane / kThreadsPerRow + r * kRowHalf];
      aligned_[r] = position + work.causal_offset;
      row_phases_[r] = policy_.period > 0 ? phase_of(aligned_[r]) : 0;
      if constexpr (Traits::kTokens) {
        // aligned < kv_len always; below 0 the query precedes every key and has no token.
        const bool readable = policy_.needs_tokens && position != kNoRow && aligned_[r] >= 0;
        query_tokens_[r] = readable ? __ldg(token_info_ + aligned_[r]) : kNoToken;
      }
      if (position != kNoRow) {
        lowest = min(lowest, aligned_[r]);
        highest = max(highest, aligned_[r]);
        phase_lowest = min(phase_lowest, row_phases_[r]);
        phase_highest = max(phase_highest, row_phases_[r]);
      }
    }
    lowest = __reduce_min_sync(kFullWarpMask, lowest);
    highest = __reduce_max_sync(kFullWarpMask, highest);
    if (lane == 0) {
      storage.warp_row_lowest[consumer_warp] = lowest;
      storage.warp_row_highest[consumer_warp] = highest;
    }
    if constexpr (Traits::kLattices) {
      phase_lowest = __reduce_min_sync(kFullWarpMask, phase_lowest);
      phase_highest = __reduce_max_sync(kFullWarpMask, phase_highest);
      if (lane == 0) {
        storage.warp_phase_lowest[consumer_warp] = phase_lowest;
        storage.warp_phase_highest[consumer_warp] = phase_highest;
      }
    }
  }

  // Bounds over the warpgroup's valid rows; a warpgroup without rows gets lowest > highest.
  template <class Storage>
  __device__ void gather_bounds(const Storage& storage, int warpgroup) {
    row_lowest_ = ::cuda::std::numeric_limits<int32_t>::max();
    row_highest_ = ::cuda::std::numeric_limits<int32_t>::min();
#pragma unroll
    for (int w = 0; w < kWarpgroupWarps; ++w) {
      row_lowest_ = min(row_lowest_, storage.warp_row_lowest[warpgroup * kWarpgroupWarps + w]);
      row_highest_ = max(row_highest_, storage.warp_row_highest[warpgroup * kWarpgroupWarps + w]);
    }
  }

  // Uniform over the warpgroup; conservative like TileMask::classify. Every lane of the warp must
  // call it (key bounds are shared over the warp). For a gathered chunk it also starts loading the
  // lane's keys for apply(), and takes the chunk's key bounds from what the producer staged beside
  // `stage` (Storage::chunk_key_lowest), so that nothing here waits for the column list: its
  // latency runs under the chunk's Q·K^T, and apply() is the first to read the keys.
  // `storage` and `warpgroup` as for gather_bounds (a lattice's first chunk reads the row phases'
  // bounds, which are not kept in registers: the products need them).
  template <class Storage>
  __device__ ChunkCoverage classify(const Storage& storage, int warpgroup, int stage,
                                    const KeyChunk& chunk, int lane) {
    if (row_lowest_ > row_highest_) return ChunkCoverage::kNone;
    if constexpr (Traits::kTokens) {
      if (policy_.needs_tokens) return classify_with_tokens(storage, stage, chunk, lane);
    }
    int32_t key_lowest = chunk.first_position();
    int32_t key_highest = chunk.last_position();
    const bool lattice_bits = chunk.lattice() && lattice_bits_;
    if (Traits::kGathers && chunk.gathered()) {
      load_column_keys(chunk, lane);
      staged_key_bounds(storage, stage, lane, key_lowest, key_highest);
    } else if (chunk.gathered() || (chunk.lattice() && !lattice_bits)) {
      load_column_keys(chunk, lane);
      reduce_key_bounds(chunk, lane, key_lowest, key_highest);
    }
    if (lattice_bits && policy_.period > 0) {
      if (chunk.range != lattice_range_) enter_lattice(storage, warpgroup, chunk);
      return classify_lattice(chunk, key_lowest, key_highest);
    }
    // Policies that read tokens took the branch above, so only short chunks need elements.
    return classify_chunk(policy_, row_lowest_, row_highest_, key_lowest, key_highest,
                          chunk.count < Traits::kBlockN);
  }

  // Sets the scores of removed pairs and of slots past the chunk's end to -inf.
  __device__ void apply(float (&scores)[Traits::kScoreTiles][4], const KeyChunk& chunk,
                        int lane) const {
    if constexpr (Traits::kTokens) {
      if (policy_.needs_tokens) {
        apply_with_tokens(scores, chunk, lane);
        return;
      }
    }
    if (chunk.consecutive() || (chunk.lattice() && lattice_bits_)) {
      // Consecutive keys, or periods of them: each row's kept slots as a bit set built from
      // intervals, shifted so that this thread's scores sit at bits known at compile time (tile·8
      // mod 32 + e%2 of word tile / 4): a score costs a bit test and a select.
      uint32_t keep[kRowsPerThread][kSlotWords];
      const int shift = lane % kThreadsPerRow * 2;
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        if (chunk.lattice()) {
          lattice_keep_bits(chunk, r, keep[r]);
        } else {
          span_keep_bits(chunk, r, keep[r]);
        }
#pragma unroll
        for (int word = 0; word < kSlotWords; ++word) keep[r][word] >>= shift;
      }
      remove_scores(scores, lane, [&](int tile, int e, int) {
        const uint32_t word = keep[e / 2][tile / kTilesPerWord];
        return ((word >> (tile % kTilesPerWord * Traits::kAccumulatorTileN + e % 2)) & 1u) == 0;
      });
      return;
    }
    // Gathered keys: the decisions first, one bit per score of each of this thread's rows (bit
    // tile·2 + e%2), from the keys classify() loaded for slots lane + i·32, shared by shuffles. A
    // rolled loop and two words keep this off the registers that S, P and O occupy.
    uint32_t removed_bits[kRowsPerThread] = {};
#pragma unroll
    for (int i = 0; i < kColumnKeysPerLane; ++i) {
      const int32_t own_key = column_keys_[i];
      const int32_t own_phase = policy_.period > 0 ? phase_of(own_key) : 0;
#pragma unroll 1
      for (int j = 0; j < kScoresPerLaneGroup; ++j) {
        const int in_group = j / 2 * Traits::kAccumulatorTileN + lane % kThreadsPerRow * 2 + j % 2;
        const int32_t key = __shfl_sync(kFullWarpMask, own_key, in_group);
        const int32_t key_phase =
            policy_.period > 0 ? __shfl_sync(kFullWarpMask, own_phase, in_group) : 0;
        const int slot = i * kWarpSize + in_group;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
          const bool removed = removes(slot, chunk.count, key, key_phase, r);
          removed_bits[r] |= static_cast<uint32_t>(removed) << (i * kScoresPerLaneGroup + j);
        }
      }
    }
    remove_scores(scores, lane, [&](int tile, int e, int) {
      return ((removed_bits[e / 2] >> (tile * 2 + e % 2)) & 1u) != 0;
    });
  }

 private:
  // Whether the pair of `key` (of phase key_phase = key mod period, when the policy has a period)
  // in `slot` and this thread's row `row` is left out: the positional terms of the mask rule, the
  // band's modulo taken from the phases, which are cheap to step, instead of a division per score.
  __device__ bool removes(int slot, int32_t count, int32_t key, int32_t key_phase, int row) const {
    const bool kept = mask_rule::distance_keeps(policy_, aligned_[row] - key, key);
    if (slot >= count || !kept) return true;
    if (policy_.period == 0) return false;
    // Periodic masks are causal, so distance >= 0 here and its phase is the phases' difference.
    int32_t phase = row_phases_[row] - key_phase;
    if (phase < 0) phase += policy_.period;
    return !mask_rule::band_keeps(policy_, phase);
  }

  // classify() for a policy that reads tokens: loads the lane's keys and their tokens (slots lane
  // + i·32) for apply_with_tokens, and classifies by the key bounds, never kFull (proving a chunk
  // whole under token terms costs more than masking it) and never kNone where the media lift may
  // keep pairs that the positional terms remove.
  template <class Storage>
  __device__ ChunkCoverage classify_with_tokens(const Storage& storage, int stage,
                                                const KeyChunk& chunk, int lane) {
    int32_t key_lowest;
    int32_t key_highest;
    load_column_keys(chunk, lane);
#pragma unroll
    for (int i = 0; i < kColumnKeysPerLane; ++i) {
      const bool valid = lane + i * kWarpSize < chunk.count;
      key_tokens_[i] = valid ? __ldg(token_info_ + column_keys_[i]) : kNoToken;
    }
    if (Traits::kGathers && chunk.gathered()) {
      staged_key_bounds(storage, stage, lane, key_lowest, key_highest);
    } else {
      reduce_key_bounds(chunk, lane, key_lowest, key_highest);
    }
    return lift_skips(policy_, classify_chunk(policy_, row_lowest_, row_highest_, key_lowest,
                                              key_highest, /*element_mask_needed=*/true));
  }

  // apply() for a policy that reads tokens: every score by the whole rule, from the keys and tokens
  // classify_with_tokens loaded, shared by shuffles as in the gathered path.
  __device__ void apply_with_tokens(float (&scores)[Traits::kScoreTiles][4], const KeyChunk& chunk,
                                    int lane) const {
    uint32_t removed_bits[kRowsPerThread] = {};
#pragma unroll
    for (int i = 0; i < kColumnKeysPerLane; ++i) {
#pragma unroll 1
      for (int j = 0; j < kScoresPerLaneGroup; ++j) {
        const int in_group = j / 2 * Traits::kAccumulatorTileN + lane % kThreadsPerRow * 2 + j % 2;
        const int32_t key = __shfl_sync(kFullWarpMask, column_keys_[i], in_group);
        const int32_t key_token = __shfl_sync(kFullWarpMask, key_tokens_[i], in_group);
        const bool valid = i * kWarpSize + in_group < chunk.count;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
          const bool removed =
              !valid || !mask_rule::keeps(policy_, aligned_[r], key, query_tokens_[r], key_token);
          removed_bits[r] |= static_cast<uint32_t>(removed) << (i * kScoresPerLaneGroup + j);
        }
      }
    }
    remove_scores(scores, lane, [&](int tile, int e, int) {
      return ((removed_bits[e / 2] >> (tile * 2 + e % 2)) & 1u) != 0;
    });
  }

  // `position` mod the policy's period, in [0, period) also for negative positions.
  __device__ int32_t phase_of(int32_t position) const {
    const int32_t phase = position % policy_.period;
    return phase < 0 ? phase + policy_.period : phase;
  }

  // Bits [0, n) of a word, n clamped to [0, 32].
  __device__ static uint32_t ones_below(int32_t n) {
    if (n <= 0) return 0u;
    return n >= kDecisionBits ? ~0u : (1u << n) - 1u;
  }
  // The slots of [begin, end) that word `word` of a chunk's bit set holds.
  __device__ static uint32_t slot_bits(int32_t begin, int32_t end, int word) {
    const int32_t base = word * kDecisionBits;
    return ones_below(end - base) & ~ones_below(begin - base);
  }

  // The slots of a span chunk (key position = first position + slot) that this thread's row `row`
  // keeps, as bits: every positional term of the policy is an interval of slots (the band one per
  // period it meets), since the distance falls by one per slot.
  __device__ void span_keep_bits(const KeyChunk& chunk, int row,
                                 uint32_t (&keep)[kSlotWords]) const {
    const int32_t first = chunk.first_position();
    const int32_t reach = aligned_[row] - first;  // the slot at distance 0 (maybe outside)
    int32_t end = chunk.count;
    if (policy_.causal) end = min(end, reach + 1);
    if (policy_.min_distance > 0) end = min(end, reach - policy_.min_distance + 1);
#pragma unroll
    for (int word = 0; word < kSlotWords; ++word) keep[word] = slot_bits(0, end, word);
    if (policy_.window > 0) {
      // Distances below the window, or keys below the sink.
      const int32_t window_begin = reach - policy_.window + 1;
      const int32_t sink_end = policy_.window_sink - first;
#pragma unroll
      for (int word = 0; word < kSlotWords; ++word) {
        keep[word] &= slot_bits(window_begin, Traits::kBlockN, word) | slot_bits(0, sink_end, word);
      }
    }
    if (policy_.period > 0) {
      // Band j holds distances [j·period, j·period + band): slots (reach - j·period - band,
      // reach - j·period]. Periodic masks are causal, so j >= 0; from the first band that reaches
      // below slot kBlockN to the last that reaches slot 0.
      uint32_t band[kSlotWords] = {};
      const int32_t past_chunk = reach - policy_.band + 1 - Traits::kBlockN;
      const int32_t j = past_chunk > 0 ? (past_chunk + policy_.period - 1) / policy_.period : 0;
      for (int32_t nearest = reach - j * policy_.period; nearest >= 0; nearest -= policy_.period) {
#pragma unroll
        for (int word = 0; word < kSlotWords; ++word) {
          band[word] |= slot_bits(nearest - policy_.band + 1, nearest + 1, word);
        }
      }
#pragma unroll
      for (int word = 0; word < kSlotWords; ++word) keep[word] &= band[word];
    }
  }

  // Enters the lattice of `chunk` (lattice_bits_, a policy with a band): with a step that is a
  // multiple of the period, every chunk of the lattice has the key phases of its first key's
  // period, [first, first + kLatticeWidth - 1] mod period, so its phase and the band's verdict on
  // the warpgroup's row phases are found once per lattice, not once per chunk.
  template <class Storage>
  __device__ void enter_lattice(const Storage& storage, int warpgroup, const KeyChunk& chunk) {
    int32_t phase_lowest = ::cuda::std::numeric_limits<int32_t>::max();
    int32_t phase_highest = ::cuda::std::numeric_limits<int32_t>::min();
#pragma unroll
    for (int w = 0; w < kWarpgroupWarps; ++w) {
      phase_lowest = min(phase_lowest, storage.warp_phase_lowest[warpgroup * kWarpgroupWarps + w]);
      phase_highest =
          max(phase_highest, storage.warp_phase_highest[warpgroup * kWarpgroupWarps + w]);
    }
    lattice_range_ = chunk.range;
    lattice_key_phase_ = phase_of(static_cast<int32_t>(chunk.first));
    lattice_band_ = classify_lattice_band(phase_lowest, phase_highest);
    static_assert(
        kRowsPerThread * kLatticeWidth <= kDecisionBits && kDecisionBits % kLatticeWidth == 0,
        "one word holds the rows' band bytes, and whole periods");
    lattice_band_bytes_ = 0;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      lattice_band_bytes_ |= lattice_band_byte(r) << (r * kLatticeWidth);
    }
  }

  // The band's verdict on the current lattice's keys (phases from lattice_key_phase_) and rows of
  // phases [phase_lowest, phase_highest]: a pair's phase is its row phase minus its key's phase.
  __device__ ChunkCoverage classify_lattice_band(int32_t phase_lowest,
                                                 int32_t phase_highest) const {
    if (lattice_key_phase_ + kLatticeWidth > policy_.period) return ChunkCoverage::kPartial;
    // Phase differences [low, high]; a negative one is its value plus the period (one wrap at
    // most, both bounds lying in (-period, period)).
    int32_t low = phase_lowest - (lattice_key_phase_ + kLatticeWidth - 1);
    int32_t high = phase_highest - lattice_key_phase_;
    if (high < 0) {
      low += policy_.period;
      high += policy_.period;
    } else if (low < 0) {
      return ChunkCoverage::kPartial;  // the differences wrap: some near 0, some near the period
    }
    if (low >= policy_.band) return ChunkCoverage::kNone;
    if (high >= policy_.band) return ChunkCoverage::kPartial;
    return ChunkCoverage::kFull;
  }

  // A lattice chunk's coverage for a policy with a band, when lattice_bits_: the distance terms
  // from the key bounds as for any chunk, the band's as found for its lattice.
  __device__ ChunkCoverage classify_lattice(const KeyChunk& chunk, int32_t key_lowest,
                                            int32_t key_highest) const {
    MaskRecord distances = policy_;
    distances.period = 0;
    const ChunkCoverage by_distance =
        classify_chunk(distances, row_lowest_, row_highest_, key_lowest, key_highest,
                       chunk.count < Traits::kBlockN);
    if (by_distance == ChunkCoverage::kNone || lattice_band_ == ChunkCoverage::kFull) {
      return by_distance;
    }
    return lattice_band_;
  }

  // The periods of a whole lattice chunk (a lattice's last chunk may hold fewer).
  static constexpr int32_t kChunkPeriods = Traits::kBlockN / kLatticeWidth;
  static_assert((kChunkPeriods & (kChunkPeriods - 1)) == 0, "periods found by bisection");

  // The number of the chunk's slots whose keys lie below `key` (a lattice's keys ascend with the
  // slot: kLatticeWidth consecutive keys per period, periods `step` apart), counted over a whole
  // chunk's kChunkPeriods periods (the callers bound a partial chunk by its count). The key's
  // period in the chunk is found by bisection, not by a division: every product stays below
  // kChunkPeriods periods, and past the last period the clamp to kLatticeWidth counts them all.
  __device__ static int32_t lattice_slots_below(const KeyChunk& chunk, int32_t key) {
    const int32_t offset = key - static_cast<int32_t>(chunk.first);
    if (offset <= 0) return 0;
    int32_t period = 0;  // the last period of the chunk starting at or below offset
#pragma unroll
    for (int32_t half = kChunkPeriods / 2; half > 0; half /= 2) {
      if ((period + half) * chunk.step <= offset) period += half;
    }
    return period * kLatticeWidth + min(offset - period * chunk.step, kLatticeWidth);
  }

  // The slots of a lattice chunk that this thread's row `row` keeps, as bits. Keys ascend with the
  // slot, so every distance term (causal, minimum distance, window, sink) is an interval of
  // slots, and so are the chunk's own slots (a lattice's last chunk may end early: the box still
  // copies whole periods past it); the band, when lattice_bits_, keeps the same slots of every
  // period: the row's byte of the current lattice (enter_lattice), repeated.
  __device__ void lattice_keep_bits(const KeyChunk& chunk, int row,
                                    uint32_t (&keep)[kSlotWords]) const {
    constexpr int32_t kMaxInt = ::cuda::std::numeric_limits<int32_t>::max();
    int32_t farthest_kept = kMaxInt;  // the largest key the distance terms keep, if any bound
    if (policy_.causal) farthest_kept = aligned_[row];
    if (policy_.min_distance > 0) {
      farthest_kept = min(farthest_kept, aligned_[row] - policy_.min_distance);
    }
    const int32_t end = farthest_kept == kMaxInt
                            ? chunk.count
                            : min(chunk.count, lattice_slots_below(chunk, farthest_kept + 1));
#pragma unroll
    for (int word = 0; word < kSlotWords; ++word) keep[word] = slot_bits(0, end, word);
    if (policy_.window > 0) {
      const int32_t window_begin = lattice_slots_below(chunk, aligned_[row] - policy_.window + 1);
      const int32_t sink_end = lattice_slots_below(chunk, policy_.window_sink);
#pragma unroll
      for (int word = 0; word < kSlotWords; ++word) {
        keep[word] &= slot_bits(window_begin, Traits::kBlockN, word) | slot_bits(0, sink_end, word);
      }
    }
    if (policy_.period > 0) {
      // The band keeps the same slots of every period: the row's byte, repeated.
      const uint32_t band =
          lattice_band_bytes_ >> (row * kLatticeWidth) & ones_below(kLatticeWidth);
      uint32_t repeated = 0;
#pragma unroll
      for (int period = 0; period < kDecisionBits / kLatticeWidth; ++period) {
        repeated |= band << (period * kLatticeWidth);
      }
#pragma unroll
      for (int word = 0; word < kSlotWords; ++word) keep[word] &= repeated;
    }
  }

  // The slots of one period of the current lattice that the band keeps for this thread's row
  // `row`. Slot t of a period is at distance reach - t (mod period) from the row, reach being the
  // distance of slot 0; band j keeps distances [j·period, j·period + band), i.e. slots
  // (nearest - band, nearest] for nearest = reach - j·period, from reach mod period (the phases'
  // difference) up. The causal term of lattice_keep_bits removes the negative distances.
  __device__ uint32_t lattice_band_byte(int row) const {
    int32_t nearest = row_phases_[row] - lattice_key_phase_;
    if (nearest < 0) nearest += policy_.period;
    uint32_t band = 0;
    for (; nearest - policy_.band + 1 < kLatticeWidth; nearest += policy_.period) {
      band |= slot_bits(nearest - policy_.band + 1, nearest + 1, 0);
    }
    return band & ones_below(kLatticeWidth);
  }

  // removed(tile, e, slot): whether score e of score tile `tile` (key slot `slot`) is left out.
  template <class Removed>
  __device__ static void remove_scores(float (&scores)[Traits::kScoreTiles][4], int lane,
                                       Removed removed) {
    constexpr float kRemoved = -::cuda::std::numeric_limits<float>::infinity();
#pragma unroll
    for (int tile = 0; tile < Traits::kScoreTiles; ++tile) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = tile * Traits::kAccumulatorTileN + lane % kThreadsPerRow * 2 + e % 2;
        if (removed(tile, e, slot)) scores[tile][e] = kRemoved;
      }
    }
  }

  // The lane's keys of a gathered or lattice chunk (slots lane + i·32; 0 past the chunk).
  __device__ void load_column_keys(const KeyChunk& chunk, int lane) {
#pragma unroll
    for (int i = 0; i < kColumnKeysPerLane; ++i) {
      const int slot = lane + i * kWarpSize;
      column_keys_[i] = slot < chunk.count ? chunk.key(columns_, slot) : 0;
    }
  }

  // The bounds of the chunk's keys in column_keys_ (a column list's are unordered), reduced over
  // the warp.
  __device__ void reduce_key_bounds(const KeyChunk& chunk, int lane, int32_t& lowest,
                                    int32_t& highest) const {
    lowest = ::cuda::std::numeric_limits<int32_t>::max();
    highest = ::cuda::std::numeric_limits<int32_t>::min();
#pragma unroll
    for (int i = 0; i < kColumnKeysPerLane; ++i) {
      if (lane + i * kWarpSize < chunk.count) {
        lowest = min(lowest, column_keys_[i]);
        highest = max(highest, column_keys_[i]);
      }
    }
    lowest = __reduce_min_sync(kFullWarpMask, lowest);
    highest = __reduce_max_sync(kFullWarpMask, highest);
  }

  // The bounds of a gathered chunk's keys as the producer's warps staged them beside `stage`. Lane
  // 0 alone reads them and hands them on: the warp's release of the stage is lane 0's arrival,
  // which so orders every read of them before the producer's next write.
  template <class Storage>
  __device__ static void staged_key_bounds(const Storage& storage, int stage, int lane,
                                           int32_t& lowest, int32_t& highest) {
    int32_t lane_lowest = ::cuda::std::numeric_limits<int32_t>::max();
    int32_t lane_highest = ::cuda::std::numeric_limits<int32_t>::min();
    if (lane == 0) {
#pragma unroll
      for (int warp = 0; warp < Traits::kProducerWarps; ++warp) {
        lane_lowest = min(lane_lowest, storage.chunk_key_lowest[stage][warp]);
        lane_highest = max(lane_highest, storage.chunk_key_highest[stage][warp]);
      }
    }
    lowest = __shfl_sync(kFullWarpMask, lane_lowest, 0);
    highest = __shfl_sync(kFullWarpMask, lane_highest, 0);
  }

  MaskRecord policy_;
  const int32_t* columns_;              // the plan's columns, for gathered chunks
  const int32_t* token_info_;           // the plan's packed tokens (Traits::kTokens)
  int32_t aligned_[kRowsPerThread];     // aligned positions of this thread's rows
  int32_t row_phases_[kRowsPerThread];  // their phases mod the policy's period (0 without one)
  int32_t row_lowest_ = 0;              // bounds of the warpgroup's valid aligned positions
  int32_t row_highest_ = 0;
  // Lattice chunks take bit sets when every period sees the band alike: a step that is a multiple
  // of the band's period (or no band). Others are masked per score, like gathered keys.
  bool lattice_bits_;
  // The lattice whose chunks are being classified (its range index, -1 before the first), its
  // keys' phases' start, the band's verdict on them and, per row of this thread, the slots of a
  // period that the band keeps (byte r for row r) (enter_lattice).
  int32_t lattice_range_ = -1;
  int32_t lattice_key_phase_ = 0;
  ChunkCoverage lattice_band_ = ChunkCoverage::kNone;
  uint32_t lattice_band_bytes_ = 0;
  // The current gathered chunk's keys of slots lane + i·32 (see classify).
  int32_t column_keys_[kColumnKeysPerLane] = {};
  // With Traits::kTokens and a policy that reads tokens: the packed tokens of this thread's rows
  // (kNoToken for none) and of the current chunk's keys in column_keys_.
  int32_t query_tokens_[kRowsPerThread] = {};
  int32_t key_tokens_[kColumnKeysPerLane] = {};
};

}  // namespace mmsparse::cuda
