// Rendering shared by the inspection commands (see job_format.hpp).
#include "job_format.hpp"

#include <time.h>

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "args.hpp"
#include "cli_error.hpp"
#include "format.hpp"

namespace fairlane::cli {

std::string parse_segment_only(std::string_view text, std::string_view command) {
  for (std::string_view scheme : {"valkey://", "redis://"})
    if (text.substr(0, scheme.size()) == scheme)
      fail(fmt::format("{} works on a segment only (it reads the segment's job table, wait histograms and "
                       "process table, which a Valkey queue does not keep): '{}'",
                       command, text));
  return parse_segment(text);
}

Queue open_segment(const std::string& segment) {
  auto r = Queue::open(segment);
  if (!r) fail(r.error().message);
  return std::move(r).value();
}

std::string group_name(const BrandedId& group) {
  if (!group.valid() || group.str() == kDefaultGroup) return "default";
  return group.string();
}

JobState parse_state(std::string_view text) {
  for (JobState s : {JobState::pending, JobState::leased, JobState::scheduled, JobState::dead})
    if (text == to_string(s)) return s;
  fail(fmt::format("invalid --state '{}': expected pending, leased, scheduled or dead", text));
}

std::string span_ms(std::uint64_t ms) {
  if (ms < 1000) return fmt::format("{} ms", ms);
  if (ms < 60'000) return fmt::format("{:.1f} s", static_cast<double>(ms) / 1e3);
  const std::uint64_t s = ms / 1000;
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

std::string one_line(std::string_view text, std::size_t max) {
  std::string out;
  out.reserve(std::min(text.size(), max));
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u == 0x7f ? '?' : c);
  }
  if (out.size() > max) {
    out.resize(max == 0 ? 0 : max - 1);
    if (max != 0) out.push_back('~');
  }
  return out;
}

std::string local_time(std::uint64_t unix_ms) {
  const auto t = static_cast<time_t>(unix_ms / 1000);
  tm local{};
  if (localtime_r(&t, &local) == nullptr) return "?";
  char buf[32];
  const std::size_t n = strftime(buf, sizeof buf, "%m-%d %H:%M:%S", &local);
  return std::string(buf, n);
}

std::uint64_t unix_now_ms() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000u + static_cast<std::uint64_t>(ts.tv_nsec) / 1'000'000u;
}

std::string job_when(const JobInfo& j, std::uint64_t seg_now_ms) {
  const bool future = j.when_ms >= seg_now_ms;
  const std::uint64_t d = future ? j.when_ms - seg_now_ms : seg_now_ms - j.when_ms;
  switch (j.state) {
    case JobState::pending: return "";
    case JobState::leased: return future ? "expires in " + span_ms(d) : "expired " + span_ms(d) + " ago";
    case JobState::scheduled: return future ? "due in " + span_ms(d) : "due " + span_ms(d) + " ago";
    case JobState::dead: return "died " + span_ms(future ? 0 : d) + " ago";
  }
  return "";
}

nlohmann::json job_json(const JobInfo& j, std::uint64_t seg_now_ms, std::uint64_t unix_now) {
  nlohmann::json o = {{"id", j.id.string()},
                      {"group", group_name(j.group)},
                      {"state", std::string(to_string(j.state))},
                      {"attempt", j.attempt},
                      {"minted_unix_ms", j.minted_unix_ms},
                      {"age_ms", unix_now >= j.minted_unix_ms ? unix_now - j.minted_unix_ms : 0},
                      {"payload_bytes", j.payload_bytes},
                      {"last_error", j.last_error}};
  if (j.state != JobState::pending) {
    const char* key = j.state == JobState::leased ? "deadline" : j.state == JobState::scheduled ? "due" : "died";
    o[fmt::format("{}_ms", key)] = j.when_ms;  // segment clock
    o[fmt::format("{}_unix_ms", key)] = segment_to_unix_ms(j.when_ms, seg_now_ms, unix_now);
  }
  return o;
}

nlohmann::json wait_json(const WaitHistogram& h) {
  nlohmann::json buckets = nlohmann::json::array();
  for (std::uint64_t b : h.buckets) buckets.push_back(b);
  return {{"count", h.count()},
          {"p50_us", h.quantile_us(0.50)},
          {"p90_us", h.quantile_us(0.90)},
          {"p99_us", h.quantile_us(0.99)},
          {"buckets", std::move(buckets)}};
}

std::string wait_quantile(const WaitHistogram& h, double q) {
  if (h.count() == 0) return "-";
  return duration_us(h.quantile_us(q));
}

}  // namespace fairlane::cli
