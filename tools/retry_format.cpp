// Retry policies on the command line (see retry_format.hpp).
#include "retry_format.hpp"

#include <charconv>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "job_format.hpp"

namespace fairlane::cli {

namespace {

constexpr std::uint64_t kMaxDelayMs = 0xFFFFFFFFULL;  // Backoff::valid's 32-bit ms

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const std::size_t at = text.find(sep);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return out;
    text.remove_prefix(at + 1);
  }
}

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  fail(fmt::format("invalid --backoff '{}': {} (expected fixed:MS or exponential:BASE_MS[:CAP_MS[:FACTOR[:JITTER]]])",
                   text, why));
}

std::uint64_t field_ms(std::string_view text, std::string_view field, std::string_view name) {
  bool digits = !field.empty() && field.size() <= 20;
  for (char c : field) digits = digits && c >= '0' && c <= '9';
  std::uint64_t v = 0;
  if (!digits || std::from_chars(field.data(), field.data() + field.size(), v).ec != std::errc())
    bad(text, fmt::format("{} '{}' is not a whole number of milliseconds", name, field));
  if (v > kMaxDelayMs) bad(text, fmt::format("{} {} is over the largest delay, {} ms", name, v, kMaxDelayMs));
  return v;
}

double field_real(std::string_view text, std::string_view field, std::string_view name, double lo, double hi) {
  bool plain = !field.empty();
  for (char c : field) plain = plain && ((c >= '0' && c <= '9') || c == '.');
  double v = 0;
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (!plain || ec != std::errc() || ptr != field.data() + field.size() || !std::isfinite(v))
    bad(text, fmt::format("{} '{}' is not a number", name, field));
  if (v < lo || v > hi) bad(text, fmt::format("{} {} is out of range ({} to {})", name, field, lo, hi));
  return v;
}

// 2.0 -> "2", 0.25 -> "0.25": no trailing zeros in a spec people retype.
std::string real(double v) { return fmt::format("{}", v); }

}  // namespace

Backoff parse_backoff(std::string_view text) {
  const std::vector<std::string_view> f = split(text, ':');
  if (f[0] == "fixed") {
    if (f.size() != 2) bad(text, "fixed takes exactly one field, the delay in ms");
    return Backoff::fixed(std::chrono::milliseconds(field_ms(text, f[1], "MS")));
  }
  if (f[0] != "exponential") bad(text, fmt::format("unknown kind '{}'", f[0]));
  if (f.size() < 2 || f.size() > 5) bad(text, "exponential takes one to four fields");
  const Backoff d;  // the documented defaults of the optional fields
  const std::uint64_t base = field_ms(text, f[1], "BASE_MS");
  const std::uint64_t cap = f.size() > 2 ? field_ms(text, f[2], "CAP_MS") : static_cast<std::uint64_t>(d.cap.count());
  const double factor = f.size() > 3 ? field_real(text, f[3], "FACTOR", 1.0, 1000.0) : d.factor;
  const double jitter = f.size() > 4 ? field_real(text, f[4], "JITTER", 0.0, 1.0) : d.jitter;
  if (base > cap) bad(text, fmt::format("BASE_MS {} is above CAP_MS {}", base, cap));
  Backoff b = Backoff::exponential(std::chrono::milliseconds(base), std::chrono::milliseconds(cap), factor, jitter);
  if (!b.valid()) bad(text, "out of range");
  return b;
}

std::string backoff_spec(const Backoff& b) {
  if (b.kind == Backoff::Kind::fixed) return fmt::format("fixed:{}", b.base.count());
  return fmt::format("exponential:{}:{}:{}:{}", b.base.count(), b.cap.count(), real(b.factor), real(b.jitter));
}

std::string policy_text(const RetryPolicy& p) {
  if (p.empty()) return "-";
  std::string out;
  if (p.max_attempts != 0) out = fmt::format("{} attempt{}", p.max_attempts, p.max_attempts == 1 ? "" : "s");
  if (p.backoff) {
    const Backoff& b = *p.backoff;
    if (!out.empty()) out += ", ";
    const auto ms = [](std::chrono::milliseconds d) { return span_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(0, d.count()))); };
    if (b.kind == Backoff::Kind::fixed) out += "fixed " + ms(b.base);
    else out += fmt::format("exponential {}..{} x{}", ms(b.base), ms(b.cap), real(b.factor));
    if (b.jitter > 0) out += " jitter " + real(b.jitter);
  }
  return out;
}

nlohmann::json policy_json(const RetryPolicy& p) {
  nlohmann::json max = nullptr;
  if (p.max_attempts != 0) max = p.max_attempts;
  nlohmann::json backoff = nullptr;
  if (p.backoff) {
    const Backoff& b = *p.backoff;
    backoff = {{"kind", b.kind == Backoff::Kind::fixed ? "fixed" : "exponential"},
               {"base_ms", b.base.count()},
               {"cap_ms", b.cap.count()},
               {"factor", b.factor},
               {"jitter", b.jitter},
               {"spec", backoff_spec(b)}};
  }
  return {{"max_attempts", std::move(max)}, {"backoff", std::move(backoff)}};
}

}  // namespace fairlane::cli
