// Local uploads, scheme configs, host-value gathers and the correctness checks of a rank.

#include "rank_support.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "accuracy.h"
#include "mmsparse/attention.h"
#include "mmsparse/status.h"

namespace mmsparse::dist_bench {
namespace {

constexpr const char* kExactSuffix = "-exact";
constexpr const char* kSparseSuffix = "+sparse";
// Passing lengths are clipped to each block: this passes whole blocks (Spava's exactness setting).
constexpr int64_t kWholeBlocks = int64_t{1} << 40;
// bf16 outputs of split computations against fp32 or bf16 references: a few bf16 roundings
// (2^-9 relative each) with room to spare; a missing or doubled key set costs far more. Checked on
// the query rows apart too, so that an error confined to them is not diluted by the context rows.
constexpr double kRelativeTolerance = 1e-2;

struct Errors {
  double relative = 0.0;
  double max_abs = 0.0;
};

// Over rows [row_begin, row_end) of [1, seq, heads, dim] host views.
Errors compare(const TensorView& actual, const TensorView& expected, int64_t row_begin,
               int64_t row_end) {
  const int64_t row = expected.shape[2] * expected.shape[3];
  double error_squares = 0.0, expected_squares = 0.0, max_abs = 0.0;
  for (int64_t i = row_begin * row; i < row_end * row; ++i) {
    const double a = load_float(actual, i);
    const double e = load_float(expected, i);
    error_squares += (a - e) * (a - e);
    expected_squares += e * e;
    max_abs = std::max(max_abs, std::abs(a - e));
  }
  const double relative =
      expected_squares > 0 ? std::sqrt(error_squares / expected_squares) : std::sqrt(error_squares);
  return {std::isfinite(relative) ? relative : INFINITY, max_abs};
}

// Every rank's local output on every rank, assembled into the global output (host, bf16).
Tensor assemble_output(const dist::SequenceSplit& split, const TensorView& local_out,
                       dist::Communicator& communicator, cudaStream_t stream) {
  const int64_t row_bytes = local_out.shape[2] * local_out.shape[3] * 2;
  std::vector<dist::GatherSlot> slots;
  int64_t total = 0;
  for (int r = 0; r < split.world; ++r) {
    const int64_t bytes = dist::local_length(split, r) * row_bytes;
    slots.push_back({total, bytes});
    total += bytes;
  }
  DeviceTensor gathered(DType::kUInt8, {total}, communicator.device());
  communicator.all_gather(local_out.data,
                          slots[static_cast<std::size_t>(communicator.rank())].bytes,
                          gathered.view().data, slots, stream);
  communicator.synchronize(stream);
  Tensor bytes(DType::kUInt8, {total});
  gathered.copy_to_host(bytes.view());
  Tensor global(DType::kBFloat16, {1, split.total_len(), local_out.shape[2], local_out.shape[3]});
  for (int r = 0; r < split.world; ++r) {
    const TensorView local = TensorView::contiguous(
        bytes.data() + slots[static_cast<std::size_t>(r)].offset, DType::kBFloat16,
        {1, dist::local_length(split, r), local_out.shape[2], local_out.shape[3]});
    dist::scatter_local(split, r, local, global.view(), /*with_shared_rows=*/r == 0);
  }
  return global;
}

Tensor dense_reference(const Workload::Tensors& host, Device device) {
  const DeviceTensor q = DeviceTensor::from_host(host.q.view(), device);
  const DeviceTensor k = DeviceTensor::from_host(host.k.view(), device);
  const DeviceTensor v = DeviceTensor::from_host(host.v.view(), device);
  const DeviceTensor out(DType::kBFloat16, host.q.shape(), device);
  const DeviceTensor lse(DType::kFloat32,
                         std::vector<int64_t>{1, host.q.shape()[2], host.q.shape()[1]}, device);
  attention_dense(q.view(), k.view(), v.view(), out.view(), lse.view());
  Tensor result(DType::kBFloat16, host.q.shape());
  out.copy_to_host(result.view());  // synchronises
  return result;
}

Tensor approximation_reference(const dist::DistConfig& config, const dist::SequenceSplit& split,
                               const Workload::Tensors& host) {
  const Tensor q = to_contiguous(host.q.view(), DType::kFloat32);
  const Tensor k = to_contiguous(host.k.view(), DType::kFloat32);
  const Tensor v = to_contiguous(host.v.view(), DType::kFloat32);
  Tensor out(DType::kFloat32, host.q.shape());
  Tensor lse(DType::kFloat32, {1, host.q.shape()[2], host.q.shape()[1]});
  dist::reference_attention(config, split, q.view(), k.view(), v.view(), out.view(), lse.view());
  return out;
}

}  // namespace

LocalProblem upload_local(const Workload::Tensors& host, const dist::SequenceSplit& split, int rank,
                          Device device) {
  const int64_t local_len = dist::local_length(split, rank);
  const auto local = [&](const Tensor& global) {
    Tensor part(DType::kBFloat16, {1, local_len, global.shape()[2], global.shape()[3]});
    dist::gather_local(split, rank, global.view(), part.view());
    return DeviceTensor::from_host(part.view(), device);
  };
  return {
      local(host.q), local(host.k), local(host.v),
      DeviceTensor(DType::kBFloat16, {1, local_len, host.q.shape()[2], host.q.shape()[3]}, device)};
}

dist::DistConfig config_for(const std::string& name, const BenchOptions& options) {
  std::string base = name;
  const auto strip = [&](const char* suffix) {
    const std::size_t length = std::strlen(suffix);
    const bool found = base.size() > length && base.ends_with(suffix);
    if (found) base.resize(base.size() - length);
    return found;
  };
  const bool sparse = strip(kSparseSuffix);
  const bool exact = strip(kExactSuffix);
  dist::DistConfig config;
  config.scheme = dist::scheme_from_name(base, "--schemes");
  if (config.scheme == dist::Scheme::kZigzagRing) return config;
  config.anchor_len = options.anchor_len;
  if (config.scheme != dist::Scheme::kStar) {
    config.passing_len = exact ? kWholeBlocks : options.passing_len;
  }
  if (sparse) {
    if (options.local_pattern.empty()) {
      throw_invalid_argument("--local-pattern", "a pattern spec for " + name, "none");
    }
    config.local_pattern = options.local_pattern;
  }
  return config;
}

std::vector<double> gather_doubles(dist::Communicator& communicator,
                                   const std::vector<double>& values) {
  const int world = communicator.world_size();
  const auto count = static_cast<int64_t>(values.size());
  const int64_t bytes = count * static_cast<int64_t>(sizeof(double));
  std::vector<dist::GatherSlot> slots;
  for (int r = 0; r < world; ++r) slots.push_back({r * bytes, bytes});
  Tensor host(DType::kUInt8, {world * bytes});
  std::memcpy(host.data() + communicator.rank() * bytes, values.data(), bytes);
  DeviceTensor device = DeviceTensor::from_host(host.view(), communicator.device());
  std::byte* base = static_cast<std::byte*>(device.view().data);
  communicator.all_gather(base + communicator.rank() * bytes, bytes, base, slots, nullptr);
  communicator.synchronize(nullptr);
  device.copy_to_host(host.view());
  std::vector<double> all(static_cast<std::size_t>(world * count));
  std::memcpy(all.data(), host.data(), world * bytes);
  return all;
}

SchemeResult check_scheme(const std::string& name, const BenchOptions& options,
                          const Workload::Tensors& host, int64_t context_len, int64_t query_len,
                          dist::Communicator& communicator, cudaStream_t stream) {
  SchemeResult result;
  result.name = name;
  const dist::DistConfig config = config_for(name, options);
  const bool exact = config.scheme == dist::Scheme::kZigzagRing ||
                     (name.ends_with(kExactSuffix) && config.local_pattern.empty());
  const dist::SequenceSplit split =
      dist::split_sequence(config, context_len, query_len, communicator.world_size());
  if (!exact && split.total_len() > options.check_max_len) {
    result.reference = "skipped: longer than --check-max-len";
    return result;
  }
  const int rank = communicator.rank();
  LocalProblem local = upload_local(host, split, rank, communicator.device());
  dist::check_same_config(communicator, config, split, local.q.view(), local.k.view());
  AttentionOptions attention_options;
  attention_options.stream = stream;
  dist::attention(config, split, communicator, local.q.view(), local.k.view(), local.v.view(),
                  local.out.view(), attention_options);
  const Tensor actual = assemble_output(split, local.out.view(), communicator, stream);
  double passed = 1.0;
  if (rank == 0) {
    const Tensor expected = exact ? dense_reference(host, communicator.device())
                                  : approximation_reference(config, split, host);
    result.reference = exact ? "single-GPU dense (engine)" : "CPU oracle of the approximation";
    const Errors all = compare(actual.view(), expected.view(), 0, split.total_len());
    const Errors query = compare(actual.view(), expected.view(), context_len, split.total_len());
    result.relative_error = std::max(all.relative, query.relative);
    result.max_abs_error = all.max_abs;
    passed = result.relative_error <= kRelativeTolerance ? 1.0 : 0.0;
  }
  const std::vector<double> verdicts = gather_doubles(communicator, {passed});
  result.checked = true;
  result.passed = verdicts[0] == 1.0;
  return result;
}

void print_checks(const std::vector<SchemeResult>& results) {
  fmt::print("{:<14} {:>8} {:>14} {:>12}  {}\n", "scheme", "verdict", "relative err", "max |err|",
             "reference");
  for (const SchemeResult& result : results) {
    fmt::print("{:<14} {:>8} {:>14.3e} {:>12.3e}  {}\n", result.name,
               !result.checked ? "skip" : (result.passed ? "PASS" : "FAIL"), result.relative_error,
               result.max_abs_error, result.reference);
  }
  fmt::print(
      "tolerance: relative L2 error <= {} over all rows and over the query rows (the larger "
      "is shown)\n",
      kRelativeTolerance);
}

void print_needles_kept(const BenchOptions& options, const Workload::Tensors& host,
                        const std::vector<Needle>& needles, int64_t context_len, int64_t query_len,
                        int world) {
  const int64_t kv_heads = host.k.shape()[2];
  fmt::print(
      "needles the passing blocks keep for later hosts ({} needles x {} KV heads; the "
      "query itself attends exactly; synthetic):\n",
      needles.size(), kv_heads);
  for (const char* scheme : {"spava", "apb"}) {
    const dist::DistConfig base = config_for(scheme, options);
    const int64_t passing =
        dist::split_sequence(base, context_len, query_len, world).hosts.front().passing;
    for (const int64_t scaled : {passing / 2, passing, 2 * passing}) {
      dist::DistConfig config = base;
      config.passing_len = scaled;
      const dist::SequenceSplit split = dist::split_sequence(config, context_len, query_len, world);
      const NeedlesKept count = count_needles_kept(config, split, host, needles);
      fmt::print("  {:<6} anchor {:>7} passing {:>7}: {} of {} (needle, KV head) pairs kept\n",
                 scheme, split.anchor_len, scaled, count.kept, count.pairs);
    }
  }
}

}  // namespace mmsparse::dist_bench
