// Validation of command-line arguments (see args.hpp).
#include "args.hpp"

#include <charconv>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "fairlane/valkey.hpp"

namespace fairlane::cli {

std::string describe(IdError why) {
  switch (why) {
    case IdError::ok: return "ok";
    case IdError::wrong_length:
      return fmt::format("wrong length (expected {} characters)", kIdLength);
    case IdError::bad_kind:
      return fmt::format("bad namespace (the first {} characters must be letters A-Z)", kKindLength);
    case IdError::bad_digit:
      return fmt::format("bad digit (the last {} characters must be base62: 0-9, A-Z, a-z)", kDigits);
    case IdError::overflow: return "out of range (the value exceeds 2^63 - 1)";
  }
  return std::string(to_string(why));
}

BrandedId parse_id(std::string_view text, std::string_view what) {
  IdError why = IdError::ok;
  auto id = BrandedId::parse(text, &why);
  if (!id) fail(fmt::format("invalid {} '{}': {}", what, text, describe(why)));
  return *id;
}

GroupArg parse_group(std::string_view text) {
  if (text == "default") return GroupArg{parse_id(kDefaultGroup, "group"), true};
  GroupArg g{parse_id(text, "group"), false};
  g.is_default = g.id.str() == kDefaultGroup;
  return g;
}

std::string parse_kind(std::string_view text) {
  if (!valid_kind(text)) fail(fmt::format("invalid namespace '{}': expected three letters A-Z", text));
  return std::string(text);
}

std::uint64_t parse_u64(std::string_view text, std::string_view what, std::uint64_t min,
                        std::uint64_t max) {
  std::uint64_t v = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  // from_chars alone would accept a leading '-' for signed types only; we
  // also refuse '+', spaces and trailing garbage by requiring every char.
  bool digits = !text.empty();
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits) fail(fmt::format("invalid {} '{}': expected a non-negative integer", what, text));
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec == std::errc::result_out_of_range || v > max)
    fail(fmt::format("invalid {} '{}': too large (at most {})", what, text, max));
  if (ec != std::errc() || ptr != last)
    fail(fmt::format("invalid {} '{}': expected a non-negative integer", what, text));
  if (v < min) fail(fmt::format("invalid {} '{}': must be at least {}", what, text, min));
  return v;
}

std::uint32_t parse_u32(std::string_view text, std::string_view what, std::uint32_t min,
                        std::uint32_t max) {
  return static_cast<std::uint32_t>(parse_u64(text, what, min, max));
}

std::uint32_t parse_mode(std::string_view text) {
  bool octal = !text.empty() && text.size() <= 4;
  for (char c : text) octal = octal && c >= '0' && c <= '7';
  if (!octal) fail(fmt::format("invalid --mode '{}': expected an octal file mode such as 0600", text));
  std::uint32_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v, 8);
  if (v > 0777) fail(fmt::format("invalid --mode '{}': at most 0777", text));
  return v;
}

Durability parse_durability(std::string_view text) {
  if (text == "sync") return Durability::sync;
  if (text == "async") return Durability::async;
  fail(fmt::format("--durability must be async or sync, got '{}'", text));
}

MirrorFull parse_on_full(std::string_view text) {
  if (text == "drop") return MirrorFull::drop;
  if (text == "refuse") return MirrorFull::refuse;
  fail(fmt::format("--on-full must be refuse or drop, got '{}'", text));
}

std::chrono::milliseconds parse_seconds(std::string_view text, std::string_view what, double min,
                                        double max) {
  double v = 0;
  bool plain = !text.empty();
  for (char c : text) plain = plain && ((c >= '0' && c <= '9') || c == '.');
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (!plain || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v))
    fail(fmt::format("invalid {} '{}': expected a number of seconds", what, text));
  if (v < min || v > max)
    fail(fmt::format("invalid {} '{}': must be between {} and {} seconds", what, text, min, max));
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(v * 1000.0)));
}

std::string parse_segment(std::string_view text) {
  if (text.empty()) fail("invalid segment name '': must not be empty");
  // A URL given where a segment name goes is echoed without its password.
  const std::string shown = shown_target(text);
  if (text.size() > 200)
    fail(fmt::format("invalid segment name '{}...': longer than 200 characters", std::string_view(shown).substr(0, 20)));
  for (char c : text) {
    if (c == '/') fail(fmt::format("invalid segment name '{}': must not contain '/'", shown));
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
      fail(fmt::format("invalid segment name '{}': must not contain spaces or control characters", shown));
  }
  return std::string(text);
}

std::string shown_target(std::string_view text) {
  const std::size_t sep = text.find("://");
  if (sep == std::string_view::npos) return std::string(text);  // a segment name
  const std::string_view rest = text.substr(sep + 3);
  // A URL that parses: its user information ends at the last '@' before
  // the first '/', as ValkeyUrl::parse reads it (a queue name may hold an
  // '@'). Any other: at the last '@' of all.
  const bool parses = is_valkey_url(text) && ValkeyUrl::parse(text).ok();
  const std::size_t at = rest.substr(0, parses ? rest.find('/') : std::string_view::npos).rfind('@');
  if (at == std::string_view::npos) return std::string(text);
  const std::string_view userinfo = rest.substr(0, at);
  const std::size_t colon = userinfo.find(':');
  if (colon == std::string_view::npos) return std::string(text);  // a user name alone is not a secret
  std::string out(text.substr(0, sep + 3));
  if (colon > 0) out.append(userinfo.substr(0, colon)).append("@");
  out.append(rest.substr(at + 1));
  return out;
}

Queue open_queue(const std::string& segment) {
  auto r = Queue::open(segment);
  if (!r) fail(r.error().message);
  return std::move(r).value();
}

}  // namespace fairlane::cli
