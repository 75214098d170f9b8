// Rendering shared by the inspection commands (see job_format.hpp).
#include "job_format.hpp"

#include <time.h>

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "args.hpp"
#include "cli_error.hpp"
#include "format.hpp"
#include "retry_format.hpp"

namespace fairlane::cli {

std::string id_text(const BrandedId& id) {
  std::string out(id.str());
  // An id is base62 text; anything else came from a scribbled segment.
  for (char& c : out)
    if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) c = '?';
  return out;
}

std::string group_name(const BrandedId& group) {
  if (!group.valid() || group.str() == kDefaultGroup) return "default";
  return id_text(group);
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
  for (std::size_t i = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u < 0x80) {
      out.push_back(u < 0x20 || u == 0x7f ? '?' : text[i]);
      ++i;
      continue;
    }
    // A whole UTF-8 sequence stays (an error message in any language); a
    // stray byte, or a C1 control (U+0080..U+009F, which some terminals
    // obey as escapes), becomes '?'.
    const std::size_t n = (u & 0xE0) == 0xC0 ? 2 : (u & 0xF0) == 0xE0 ? 3 : (u & 0xF8) == 0xF0 ? 4 : 0;
    const std::string_view seq = n != 0 && i + n <= text.size() ? text.substr(i, n) : std::string_view();
    const bool c1 = n == 2 && u == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0;
    if (!seq.empty() && valid_utf8(seq) && !c1) {
      out += seq;
      i += n;
    } else {
      out.push_back('?');
      ++i;
    }
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
                      {"retry", policy_json(j.retry)},
                      {"last_error", j.last_error}};
  o["token"] = nullptr;  // only a lease has one
  if (j.state == JobState::leased) {
    o["token"] = j.token.value;
    o["holder_pid"] = j.holder_pid != 0 ? nlohmann::json(j.holder_pid) : nlohmann::json(nullptr);
  }
  if (j.ready_ms != 0) {
    o["ready_ms"] = j.ready_ms;  // segment clock: when it last became pending
    o["ready_unix_ms"] = segment_to_unix_ms(j.ready_ms, seg_now_ms, unix_now);
  }
  if (j.state != JobState::pending) {
    const char* key = j.state == JobState::leased ? "deadline" : j.state == JobState::scheduled ? "due" : "died";
    o[fmt::format("{}_ms", key)] = j.when_ms;  // segment clock
    o[fmt::format("{}_unix_ms", key)] = segment_to_unix_ms(j.when_ms, seg_now_ms, unix_now);
  }
  return o;
}

std::string escape_bytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') out += "\\\\";
    else if (u >= 0x20 && u < 0x7f) out.push_back(c);
    else out += fmt::format("\\x{:02x}", u);
  }
  return out;
}

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = std::uint32_t(static_cast<unsigned char>(bytes[i])) << 16 |
                            std::uint32_t(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                            std::uint32_t(static_cast<unsigned char>(bytes[i + 2]));
    for (int k = 3; k >= 0; --k) out.push_back(kAlphabet[(v >> (6 * k)) & 63]);
  }
  const std::size_t rest = bytes.size() - i;
  if (rest != 0) {
    std::uint32_t v = std::uint32_t(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) v |= std::uint32_t(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

bool valid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
    else return false;
    for (std::size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
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
