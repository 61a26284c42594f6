// The context split, essential-KV selection, the in-process transport's faults and the named
// errors of bad configs.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "common/random.h"
#include "dist/bounded_call.h"
#include "mmsparse/dist.h"
#include "mmsparse/status.h"

namespace mmsparse::dist {
namespace {

using test::Random;

void expect_covers_context(const SequenceSplit& split) {
  int64_t next = split.anchor_len;
  for (const VirtualHost& host : split.hosts) {
    EXPECT_EQ(host.begin, next);
    EXPECT_LE(host.passing, host.len);
    next += host.len;
  }
  const int64_t end = split.scheme == Scheme::kZigzagRing ? split.total_len() : split.context_len;
  EXPECT_EQ(next, end);
}

TEST(DistSplit, SpavaPlacesTwoZigzagHostsPerRankAlignedToTheTile) {
  DistConfig config;
  config.tile = 128;
  // 100000 context tokens: anchor 100000/64 = 1562 -> 1664 (13 tiles); 4 ranks, 8 hosts.
  const SequenceSplit split = split_sequence(config, 100000, 77, 4);
  EXPECT_EQ(split.anchor_len, 1664);
  ASSERT_EQ(split.hosts.size(), 8u);
  expect_covers_context(split);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(split.rank_hosts[static_cast<std::size_t>(r)], (std::vector<int>{r, 7 - r}));
  }
  for (std::size_t h = 0; h + 1 < split.hosts.size(); ++h) {
    EXPECT_EQ(split.hosts[h].begin % 128, 1664 % 128) << "host " << h;
    EXPECT_EQ(split.hosts[h].len % 128, 0) << "host " << h;
    EXPECT_EQ(split.hosts[h].passing, 100000 / 128);
  }
  // The partial tile lands on the last host, which has the fewest tiles: no padding.
  EXPECT_EQ((100000 - 1664) % 128, split.hosts.back().len % 128);
  const std::vector<Segment> layout = local_layout(split, 1);
  ASSERT_EQ(layout.size(), 4u);
  EXPECT_EQ(layout[1].global_begin, split.hosts[1].begin);
  EXPECT_EQ(layout[2].global_begin, split.hosts[6].begin);
  EXPECT_EQ(layout[3].global_begin, 100000);
  EXPECT_EQ(local_length(split, 1), 1664 + split.hosts[1].len + split.hosts[6].len + 77);
}

TEST(DistSplit, StarAnchorsTheFirstBlockAndRingSplitsEverything) {
  DistConfig star;
  star.scheme = Scheme::kStar;
  star.tile = 16;
  const SequenceSplit split = split_sequence(star, 301, 5, 3);
  EXPECT_EQ(split.anchor_len, 112);  // ceil(301 / 3) = 101 -> 7 tiles
  ASSERT_EQ(split.hosts.size(), 3u);
  EXPECT_EQ(split.hosts[0].len, 0);  // rank 0 holds the anchor only
  for (const VirtualHost& host : split.hosts) EXPECT_EQ(host.passing, 0);
  expect_covers_context(split);

  DistConfig ring;
  ring.scheme = Scheme::kZigzagRing;
  ring.tile = 8;
  const SequenceSplit chunks = split_sequence(ring, 97, 4, 2);
  ASSERT_EQ(chunks.hosts.size(), 4u);
  expect_covers_context(chunks);
  EXPECT_EQ(local_positions(chunks, 0).front(), 0);
  EXPECT_EQ(local_positions(chunks, 0).back(), 100);
}

TEST(DistSplit, BadConfigsNameTheArgument) {
  DistConfig config;
  testing::expect_error([&] { split_sequence(config, 100, 4, 0); }, ErrorCode::kInvalidArgument,
                        {"world"});
  testing::expect_error([&] { split_sequence(config, 100, 0, 2); }, ErrorCode::kInvalidArgument,
                        {"query_len"});
  config.anchor_len = 97;
  testing::expect_error([&] { split_sequence(config, 100, 4, 2); }, ErrorCode::kInvalidArgument,
                        {"anchor_len"});
  config.anchor_len = kUseDefault;
  config.pool_width = 4;
  testing::expect_error([&] { split_sequence(config, 100, 4, 2); }, ErrorCode::kInvalidArgument,
                        {"pool_width"});
  config.pool_width = 5;
  config.scheme = Scheme::kStar;
  config.passing_len = 3;
  testing::expect_error([&] { split_sequence(config, 100, 4, 2); }, ErrorCode::kInvalidArgument,
                        {"passing_len"});
  config.scheme = Scheme::kZigzagRing;
  testing::expect_error([&] { split_sequence(config, 100, 4, 2); }, ErrorCode::kInvalidArgument,
                        {"config"});
  config.passing_len = kUseDefault;
  testing::expect_error([&] { split_sequence(config, 5, 0, 4); }, ErrorCode::kInvalidArgument,
                        {"context_len + query_len"});
  testing::expect_error([&] { scheme_from_name("ring", "scheme"); }, ErrorCode::kInvalidArgument,
                        {"scheme"});
  EXPECT_EQ(scheme_from_name("zigzag-ring", "scheme"), Scheme::kZigzagRing);
}

// Brute force: pooled score of every key, each head's chosen set must hold the top `count`.
TEST(DistSelection, PicksTheTopPooledScoresPerKvHeadInPositionOrder) {
  Random random;
  SCOPED_TRACE(random.trace());
  constexpr int64_t kQueryLen = 5, kQHeads = 6, kKvHeads = 2, kDim = 8, kLen = 67, kCount = 9;
  constexpr int64_t kPool = 5;
  const Tensor q = random.normal_tensor(DType::kFloat32, {1, kQueryLen, kQHeads, kDim});
  const Tensor k = random.normal_tensor(DType::kFloat32, {1, kLen, kKvHeads, kDim});
  const auto selected = select_essential(q.view(), k.view(), kCount, kPool);
  ASSERT_EQ(selected.size(), static_cast<std::size_t>(kKvHeads));
  const int64_t group = kQHeads / kKvHeads;
  for (int64_t h = 0; h < kKvHeads; ++h) {
    std::vector<double> mean(kDim, 0.0);
    for (int64_t i = 0; i < kQueryLen; ++i) {
      for (int64_t g = 0; g < group; ++g) {
        for (int64_t d = 0; d < kDim; ++d) {
          mean[d] += q.data_as<float>()[(i * kQHeads + h * group + g) * kDim + d];
        }
      }
    }
    std::vector<double> score(kLen, 0.0);
    for (int64_t j = 0; j < kLen; ++j) {
      for (int64_t d = 0; d < kDim; ++d) {
        score[j] += k.data_as<float>()[(j * kKvHeads + h) * kDim + d] * mean[d] /
                    static_cast<double>(kQueryLen * group);
      }
    }
    std::vector<double> pooled(kLen);
    for (int64_t j = 0; j < kLen; ++j) {
      pooled[j] = -std::numeric_limits<double>::infinity();
      for (int64_t t = std::max<int64_t>(0, j - kPool / 2); t <= std::min(kLen - 1, j + kPool / 2);
           ++t) {
        pooled[j] = std::max(pooled[j], score[t]);
      }
    }
    const std::vector<int64_t>& chosen = selected[static_cast<std::size_t>(h)];
    ASSERT_EQ(chosen.size(), static_cast<std::size_t>(kCount));
    EXPECT_TRUE(std::is_sorted(chosen.begin(), chosen.end()));
    double lowest_chosen = std::numeric_limits<double>::infinity();
    for (int64_t j : chosen) lowest_chosen = std::min(lowest_chosen, pooled[j]);
    for (int64_t j = 0; j < kLen; ++j) {
      if (std::find(chosen.begin(), chosen.end(), j) != chosen.end()) continue;
      EXPECT_LE(pooled[j], lowest_chosen + 1e-5) << "head " << h << " skipped key " << j;
    }
  }
  // Deterministic: the same inputs give the same positions (ties broken by position).
  EXPECT_EQ(select_essential(q.view(), k.view(), kCount, kPool), selected);
  testing::expect_error([&] { select_essential(q.view(), k.view(), kLen + 1, kPool); },
                        ErrorCode::kInvalidArgument, {"count"});
}

TEST(DistFaults, AFailingRankEndsEveryRankWithItsReason) {
  std::atomic<int> aborted{0};
  const auto start = std::chrono::steady_clock::now();
  testing::expect_error(
      [&] {
        run_in_process(4, [&](Communicator& communicator) {
          if (communicator.rank() == 2) {
            throw Error(ErrorCode::kBackendError, "rank 2 died");
          }
          try {
            communicator.barrier();
          } catch (const Error& error) {
            ++aborted;
            throw;
          }
        });
      },
      ErrorCode::kBackendError, {"rank 2 died"});
  EXPECT_EQ(aborted.load(), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(DistFaults, AStalledRankTimesOutInsteadOfHanging) {
  const auto start = std::chrono::steady_clock::now();
  testing::expect_error(
      [&] {
        run_in_process(
            2,
            [&](Communicator& communicator) {
              if (communicator.rank() == 0) communicator.barrier();  // rank 1 never comes
            },
            /*timeout_seconds=*/0.2);
      },
      ErrorCode::kBackendError, {"waited more than"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// A transport's abort that never returns (NCCL's teardown waiting for a dead peer) must not keep
// the rank alive: the bounded call gives up at its bound and leaves the call running.
TEST(DistFaults, ABoundedCallGivesUpOnAHangingCallAtItsBound) {
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(detail::run_bounded([released] { released.wait(); }, 0.2));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(190));
  EXPECT_LT(waited, std::chrono::seconds(3));
  release->set_value();  // lets the abandoned call end before the test does

  std::atomic<int> calls{0};
  EXPECT_TRUE(detail::run_bounded([&calls] { ++calls; }, 5.0));
  EXPECT_EQ(calls.load(), 1);
  testing::expect_error(
      [] {
        detail::run_bounded([] { throw Error(ErrorCode::kBackendError, "abort failed"); }, 5.0);
      },
      ErrorCode::kBackendError, {"abort failed"});
  testing::expect_error([] { detail::run_bounded([] {}, -1.0); }, ErrorCode::kInvalidArgument,
                        {"seconds"});
}

TEST(DistFaults, MismatchedConfigsAndSizesFailOnEveryRank) {
  std::atomic<int> failed{0};
  testing::expect_error(
      [&] {
        run_in_process(3, [&](Communicator& communicator) {
          DistConfig config;
          config.passing_len = communicator.rank() == 1 ? 4 : 3;  // rank 1 disagrees
          const SequenceSplit split = split_sequence(config, 900, 3, 3);
          Tensor q(DType::kFloat32, {1, local_length(split, communicator.rank()), 2, 8});
          Tensor k(DType::kFloat32, {1, local_length(split, communicator.rank()), 1, 8});
          try {
            check_same_config(communicator, config, split, q.view(), k.view());
          } catch (const Error&) {
            ++failed;
            throw;
          }
        });
      },
      ErrorCode::kInvalidArgument, {"different config"});
  EXPECT_EQ(failed.load(), 3);
  testing::expect_error(
      [&] {
        run_in_process(2, [&](Communicator& communicator) {
          std::vector<std::byte> send(16), recv(16);
          const int64_t bytes = communicator.rank() == 1 ? 16 : 8;
          const GatherSlot slots[2] = {{0, 8}, {8, 8}};
          communicator.all_gather(send.data(), bytes, recv.data(), slots, nullptr);
        });
      },
      ErrorCode::kBackendError, {"expected 8 bytes from rank 1"});
}

}  // namespace
}  // namespace mmsparse::dist
