#include "progress.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace mmsparse::cli {

namespace {

constexpr int kBarWidth = 24;
constexpr double kSecondsPerMinute = 60.0;
constexpr double kSecondsPerHour = 3600.0;
constexpr double kMillisecondsPerSecond = 1000.0;
constexpr double kPercent = 100.0;
constexpr const char* kClearToEndOfLine = "\033[K";

double elapsed_seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

ProgressMode progress_mode(bool quiet, const std::string& json_path) {
  if (quiet || json_path == "-") return ProgressMode::kQuiet;
  return isatty(STDERR_FILENO) != 0 ? ProgressMode::kBar : ProgressMode::kLines;
}

std::string format_duration(double seconds) {
  if (seconds < 1.0) return fmt::format("{:.0f} ms", seconds * kMillisecondsPerSecond);
  if (seconds < kSecondsPerMinute) return fmt::format("{:.1f} s", seconds);
  if (seconds < kSecondsPerHour) {
    const double minutes = std::floor(seconds / kSecondsPerMinute);
    return fmt::format("{:.0f} min {:.0f} s", minutes, seconds - minutes * kSecondsPerMinute);
  }
  const double hours = std::floor(seconds / kSecondsPerHour);
  return fmt::format("{:.0f} h {:.0f} min", hours,
                     std::floor((seconds - hours * kSecondsPerHour) / kSecondsPerMinute));
}

StepProgress::StepProgress(ProgressMode mode, std::FILE* stream) : mode_(mode), stream_(stream) {}

void StepProgress::begin(const std::string& label, double estimated_seconds) {
  if (active_) end();
  label_ = label;
  active_ = true;
  estimated_seconds_ = estimated_seconds;
  started_ = std::chrono::steady_clock::now();
  last_draw_ = started_;
  if (mode_ == ProgressMode::kBar) draw_bar(0.0);
}

void StepProgress::update(double fraction) {
  if (!active_ || mode_ != ProgressMode::kBar) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  draw_bar(std::clamp(fraction, 0.0, 1.0));
}

void StepProgress::end(const std::string& summary) {
  if (!active_) return;
  active_ = false;
  const std::string tail = summary.empty() ? "" : " (" + summary + ")";
  const double elapsed = elapsed_seconds(started_);
  if (mode_ == ProgressMode::kBar) {
    fmt::print(stream_, "\r  {}: {}{}{}\n", label_, format_duration(elapsed), tail,
               kClearToEndOfLine);
  } else if (mode_ == ProgressMode::kLines) {
    fmt::print(stream_, "  {}: {}{}\n", label_, format_duration(elapsed), tail);
  }
  std::fflush(stream_);
}

std::function<void(double)> StepProgress::fraction_callback() {
  return [this](double fraction) { update(fraction); };
}

void StepProgress::draw_bar(double fraction) {
  const double elapsed = elapsed_seconds(started_);
  const int filled = static_cast<int>(std::lround(fraction * kBarWidth));
  std::string left;
  if (fraction > 0.0) {
    left = ", ~" + format_duration(elapsed * (1.0 - fraction) / fraction) + " left";
  } else if (estimated_seconds_ > 0.0) {
    left =
        ", ~" + format_duration(std::max(0.0, estimated_seconds_ - elapsed)) + " left (estimate)";
  }
  fmt::print(stream_, "\r  {} [{}{}] {:3.0f}%  {} elapsed{}{}", label_, std::string(filled, '#'),
             std::string(kBarWidth - filled, '.'), kPercent * fraction, format_duration(elapsed),
             left, kClearToEndOfLine);
  std::fflush(stream_);
}

void SearchProgress::begin_layer(const std::string& label, int64_t heads, int64_t scopes_per_head) {
  std::lock_guard<std::mutex> lock(mutex_);
  scopes_ = heads * scopes_per_head;
  scopes_done_ = 0;
  steps_.begin(label);
}

std::function<void(int64_t, const ScopeSearch&)> SearchProgress::scope_callback() {
  return [this](int64_t, const ScopeSearch& search) {
    if (search.stage == "raise") return;
    std::lock_guard<std::mutex> lock(mutex_);
    scopes_done_ = std::min(scopes_done_ + 1, scopes_);
    if (scopes_ > 0) {
      steps_.update(static_cast<double>(scopes_done_) / static_cast<double>(scopes_));
    }
  };
}

void SearchProgress::end_layer(const std::string& summary) {
  std::lock_guard<std::mutex> lock(mutex_);
  steps_.end(summary);
}

}  // namespace mmsparse::cli
