// The backend registry and the defaults of Backend's optional operations.

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "mmsparse/status.h"

namespace mmsparse {
namespace {

// The CPU reference is seeded here, the other backends register themselves. A function-local
// static, so that registrations from other libraries' static initialisers find the registry
// constructed whatever the order of initialisation.
struct Registry {
  Registry() { backends.emplace(DeviceType::kCPU, make_cpu_backend()); }

  std::mutex mutex;
  std::map<DeviceType, std::unique_ptr<Backend>> backends;  // ordered by type: the CPU first
};

Registry& registry() {
  static Registry instance;
  return instance;
}

// The engine a device type needs, and how to build it in, for the errors of a missing backend.
std::string missing_engine(DeviceType type) {
  switch (type) {
    case DeviceType::kCUDA:
      return "CUDA engine";
    case DeviceType::kCPU:
      break;
  }
  return "engine for " + device_name(Device{type, 0});
}

constexpr const char* kHowToBuildCuda =
    "configure with -DMMSPARSE_CUDA=ON on a machine with the CUDA toolkit, and link mmsparse::cuda";

[[noreturn]] void throw_unknown_device(const std::string& argument, Device device) {
  std::string known;
  for (const Backend* backend : registered_backends()) {
    known += (known.empty() ? "" : " or ") + backend->name();
  }
  throw_invalid_argument(argument, "a device served by this build (" + known + ")",
                         device_name(device));
}

bool is_known_type(DeviceType type) {
  return type == DeviceType::kCPU || type == DeviceType::kCUDA;
}

[[noreturn]] void throw_no_memory(const char* what, Device device) {
  throw_invalid_argument(std::string(what) + " device",
                         "a CUDA device (cuda:N), which has memory of its own",
                         device_name(device));
}

}  // namespace

void register_backend(DeviceType type, std::unique_ptr<Backend> backend) {
  Registry& instance = registry();
  const std::lock_guard lock(instance.mutex);
  if (!instance.backends.emplace(type, std::move(backend)).second) {
    throw std::logic_error("register_backend: a second backend for " +
                           device_name(Device{type, 0}));
  }
}

Backend* find_backend(DeviceType type) {
  Registry& instance = registry();
  const std::lock_guard lock(instance.mutex);
  const auto found = instance.backends.find(type);
  return found == instance.backends.end() ? nullptr : found->second.get();
}

Backend& backend_for_tensors(const char* entry_point, Device device) {
  if (Backend* backend = find_backend(device.type)) return *backend;
  if (!is_known_type(device.type))
    throw_unknown_device(std::string(entry_point) + " device", device);
  throw Error(ErrorCode::kUnsupported,
              std::string(entry_point) + ": tensors on " + device_name(device) + " need the " +
                  missing_engine(device.type) + ", which this build does not have (" +
                  kHowToBuildCuda + "); pass host tensors to run the CPU reference");
}

Backend& backend_for_memory(const char* what, Device device) {
  if (Backend* backend = find_backend(device.type)) return *backend;
  if (!is_known_type(device.type)) throw_unknown_device(std::string(what) + " device", device);
  throw Error(ErrorCode::kUnsupported, std::string(what) + ": this build of mmsparse has no " +
                                           missing_engine(device.type) + " (" + kHowToBuildCuda +
                                           ")");
}

std::vector<const Backend*> registered_backends() {
  Registry& instance = registry();
  const std::lock_guard lock(instance.mutex);
  std::vector<const Backend*> backends;
  for (const auto& [type, backend] : instance.backends) backends.push_back(backend.get());
  return backends;
}

// --- Defaults of the operations only some backends serve ---------------------------------------

void Backend::attention_masked(const AttentionProblem& problem, const TensorView&,
                               const TensorView&, const TensorView&, const TensorView&,
                               const TensorView&, const TensorView&, const AttentionOptions&) {
  throw Error(ErrorCode::kUnsupported,
              "attention_masked: tensors on " + device_name(problem.device) +
                  " are not served: the masked-dense oracle is CPU-only; pass host tensors to run "
                  "the CPU reference");
}

bool Backend::builds_pattern(const PatternSpec&, const PlanShape&, const ModalityLayout*) const {
  return false;
}

std::optional<BuiltPattern> Backend::prepare_pattern(const PatternSpec&, const PlanShape&,
                                                     const ModalityLayout*, Device, void*,
                                                     const PatternInputs*) {
  return std::nullopt;
}

std::optional<BuiltPattern> Backend::prepare_pattern(const std::vector<PatternSpec>&,
                                                     const PlanShape&, const ModalityLayout*,
                                                     Device, void*, const PatternInputs*,
                                                     const PatternInputs*) {
  return std::nullopt;
}

std::optional<PlanBuildTimes> Backend::build_times(const PreparedState&) const {
  return std::nullopt;
}

std::optional<Plan> Backend::download_plan(const PreparedState&) const { return std::nullopt; }

void Backend::tile_mass(const TensorView& q, const TensorView&, const TensorView&, int64_t, int64_t,
                        float, int64_t, int64_t, std::span<const int64_t>, std::span<double>,
                        void*) {
  throw Error(ErrorCode::kUnsupported, "tile_mass: tensors on " + device_name(q.device) +
                                           " are not served by the " + name() + " backend");
}

void* Backend::allocate(const char* what, std::size_t, Device device) {
  throw_no_memory(what, device);
}
void Backend::release(void*, Device) noexcept {}
void Backend::copy_to_device(void*, const void*, std::size_t, Device device) {
  throw_no_memory("copy_from_host", device);
}
void Backend::copy_to_host(void*, const void*, std::size_t, Device device) {
  throw_no_memory("copy_to_host", device);
}
void Backend::synchronize(Device device) { throw_no_memory("synchronize", device); }
double Backend::median_device_milliseconds(const std::function<void()>&, int, int, Device device) {
  throw_no_memory("median_device_milliseconds", device);
}

}  // namespace mmsparse
