// dist::attention: argument checks and the scheme dispatch; the config fingerprint check; the
// host copies between global tensors and a rank's local sequence.

#include <cstring>
#include <string>
#include <vector>

#include "dist/approximate.h"
#include "dist/views.h"
#include "dist/workspace.h"
#include "mmsparse/device.h"
#include "mmsparse/status.h"

namespace mmsparse::dist {
namespace {

void check_local(const char* argument, const TensorView& view, int64_t local_len, Device device) {
  if (view.ndim != 4 || view.shape[0] != 1 || view.shape[1] != local_len) {
    throw_invalid_argument(argument,
                           "[1, " + std::to_string(local_len) +
                               " (the rank's local length), heads, "
                               "head_dim]",
                           view.shape_string());
  }
  if (view.device != device) {
    throw_invalid_argument(argument, device_name(device) + " (the communicator's device)",
                           device_name(view.device));
  }
}

void check_lse(const TensorView& lse, int64_t q_heads, int64_t local_len, Device device) {
  const std::string expected = "[1, " + std::to_string(q_heads) + ", " + std::to_string(local_len) +
                               "] (q_heads, the rank's local length)";
  if (lse.ndim != 3 || lse.shape[0] != 1 || lse.shape[1] != q_heads || lse.shape[2] != local_len) {
    throw_invalid_argument("lse", expected, lse.shape_string());
  }
  if (lse.dtype != DType::kFloat32) {
    throw_invalid_argument("lse", "float32", std::string(dtype_name(lse.dtype)));
  }
  if (lse.device != device) {
    throw_invalid_argument("lse", device_name(device) + " (the communicator's device)",
                           device_name(lse.device));
  }
}

// FNV-1a over the values that must agree across ranks.
class Fingerprint {
 public:
  void add(int64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash_ = (hash_ ^ static_cast<uint64_t>((value >> (8 * byte)) & 0xff)) * kPrime;
    }
  }
  void add(std::string_view text) {
    for (char c : text) add(static_cast<int64_t>(c));
  }
  uint64_t value() const { return hash_; }

 private:
  static constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t hash_ = 14695981039346656037ULL;
};

void copy_rows(const SequenceSplit& split, int rank, const TensorView& from, const TensorView& to,
               bool to_local, bool with_shared_rows) {
  const bool ring = split.scheme == Scheme::kZigzagRing;
  const std::vector<Segment> segments = local_layout(split, rank);
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& segment = segments[i];
    const bool shared = !ring && (i == 0 || i + 1 == segments.size());
    if (!to_local && shared && !with_shared_rows) continue;
    if (segment.len == 0) continue;
    const int64_t from_begin = to_local ? segment.global_begin : segment.local_begin;
    const int64_t to_begin = to_local ? segment.local_begin : segment.global_begin;
    copy_tensor(detail::rows(from, from_begin, segment.len),
                detail::rows(to, to_begin, segment.len));
  }
}

}  // namespace

void attention(const DistConfig& config, const SequenceSplit& split, Communicator& communicator,
               const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionOptions& options, Workspace* workspace, const TensorView& lse) {
  if (communicator.world_size() != split.world) {
    throw_invalid_argument("communicator", std::to_string(split.world) + " ranks (the split's)",
                           std::to_string(communicator.world_size()));
  }
  if (config.scheme != split.scheme) {
    throw_invalid_argument("split",
                           std::string(scheme_name(config.scheme)) + " (the config's scheme)",
                           std::string(scheme_name(split.scheme)));
  }
  const int64_t local_len = local_length(split, communicator.rank());
  const Device device = communicator.device();
  check_local("q", q, local_len, device);
  check_local("k", k, local_len, device);
  check_local("v", v, local_len, device);
  check_local("out", out, local_len, device);
  if (out.dtype != q.dtype) {
    throw_invalid_argument("out", std::string(dtype_name(q.dtype)) + " (the dtype of q)",
                           std::string(dtype_name(out.dtype)));
  }
  if (k.strides[3] != 1 || v.strides[3] != 1) {
    throw_invalid_argument(
        "k, v", "a contiguous last dimension (rows are gathered as they are)",
        "strides " + std::to_string(k.strides[3]) + ", " + std::to_string(v.strides[3]));
  }
  describe_attention(q, k, v, options);  // dtypes, GQA ratio, head_dim
  if (lse.data != nullptr) check_lse(lse, q.shape[2], local_len, device);
  Workspace local_workspace;
  Workspace::Impl& scratch = workspace != nullptr ? workspace->impl() : local_workspace.impl();
  if (config.scheme == Scheme::kZigzagRing) {
    detail::ring_attention(split, communicator, q, k, v, out, lse, options, scratch);
  } else {
    detail::approximate_attention(config, split, communicator, q, k, v, out, lse, options, scratch);
  }
}

void check_same_config(Communicator& communicator, const DistConfig& config,
                       const SequenceSplit& split, const TensorView& q, const TensorView& k) {
  Fingerprint fingerprint;
  fingerprint.add(static_cast<int64_t>(config.scheme));
  fingerprint.add(config.tile);
  fingerprint.add(config.pool_width);
  fingerprint.add(config.local_pattern);
  fingerprint.add(split.anchor_len);
  fingerprint.add(split.query_len);
  for (const VirtualHost& host : split.hosts) {
    fingerprint.add(host.len);
    fingerprint.add(host.passing);
  }
  for (int dim = 2; dim < 4; ++dim) {
    fingerprint.add(q.shape[dim]);
    fingerprint.add(k.shape[dim]);
  }
  fingerprint.add(static_cast<int64_t>(q.dtype));
  const int world = communicator.world_size();
  const uint64_t own = fingerprint.value();
  std::vector<uint64_t> gathered(static_cast<std::size_t>(world));
  std::vector<GatherSlot> slots;
  for (int r = 0; r < world; ++r) {
    slots.push_back({r * static_cast<int64_t>(sizeof(uint64_t)), sizeof(uint64_t)});
  }
  const Device device = communicator.device();
  if (device.type == DeviceType::kCPU) {
    communicator.all_gather(&own, sizeof(uint64_t), gathered.data(), slots, nullptr);
  } else {
    Tensor host(DType::kInt64, {world});
    std::memcpy(host.data(), &own, sizeof(uint64_t));  // own value in slot 0 for the upload
    DeviceTensor buffer(DType::kInt64, {world}, device);
    DeviceTensor send =
        DeviceTensor::from_host(TensorView::contiguous(host.data(), DType::kInt64, {1}), device);
    communicator.all_gather(send.view().data, sizeof(uint64_t), buffer.view().data, slots, nullptr);
    communicator.synchronize(nullptr);
    buffer.copy_to_host(host.view());
    std::memcpy(gathered.data(), host.data(), world * sizeof(uint64_t));
  }
  for (int r = 0; r < world; ++r) {
    if (gathered[static_cast<std::size_t>(r)] != gathered[0]) {
      throw Error(ErrorCode::kInvalidArgument,
                  "dist config: rank " + std::to_string(r) +
                      " runs a different config or shape than rank 0 (scheme, lengths, anchor, "
                      "passing, heads, head_dim or dtype differ); every rank must run the same");
    }
  }
}

void gather_local(const SequenceSplit& split, int rank, const TensorView& global,
                  const TensorView& local) {
  copy_rows(split, rank, global, local, /*to_local=*/true, /*with_shared_rows=*/true);
}

void scatter_local(const SequenceSplit& split, int rank, const TensorView& local,
                   const TensorView& global, bool with_shared_rows) {
  copy_rows(split, rank, local, global, /*to_local=*/false, with_shared_rows);
}

}  // namespace mmsparse::dist
