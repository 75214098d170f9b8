// What the multi-process tests and their helper executable agree on: lane
// names, payload contents and the consumer's output line.
//
// A payload names its producer, lane and sequence number and is padded with a
// byte derived from them, so a torn, mixed-up or duplicated job is caught by
// comparing it with expected_payload().
#pragma once

#include <fairlane/ids.hpp>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace fairlane::test::proto {

// Lane i (0-based) of the multi-process tests: "LNE00000000001", ...
inline BrandedId lane_group(std::uint32_t lane) { return BrandedId::make("LNE", lane + 1); }

inline std::string expected_payload(std::uint32_t producer, std::uint32_t lane, std::uint64_t seq, std::size_t len) {
  char head[64];
  const int n = std::snprintf(head, sizeof head, "P%04u L%04u S%010llu ", producer, lane,
                              static_cast<unsigned long long>(seq));
  std::string p(head, static_cast<std::size_t>(n));
  const char fill = static_cast<char>('a' + (producer * 7 + seq * 13 + lane) % 26);
  if (p.size() < len) p.append(len - p.size(), fill);
  return p;
}

struct PayloadFields {
  std::uint32_t producer = 0, lane = 0;
  std::uint64_t seq = 0;
};

inline std::optional<PayloadFields> parse_payload(std::string_view p) {
  unsigned producer = 0, lane = 0;
  unsigned long long seq = 0;
  const std::string s(p.substr(0, 40));
  if (std::sscanf(s.c_str(), "P%u L%u S%llu ", &producer, &lane, &seq) != 3) return std::nullopt;
  return PayloadFields{producer, lane, seq};
}

// One consumer output line: "<id> <group> <attempt> <payload>\n".
struct ClaimRecord {
  std::string id, group;
  std::uint32_t attempt = 0;
  std::string payload;
};

inline std::optional<ClaimRecord> parse_record(std::string_view line) {
  ClaimRecord r;
  const auto s1 = line.find(' ');
  if (s1 == std::string_view::npos) return std::nullopt;
  const auto s2 = line.find(' ', s1 + 1);
  if (s2 == std::string_view::npos) return std::nullopt;
  const auto s3 = line.find(' ', s2 + 1);
  if (s3 == std::string_view::npos) return std::nullopt;
  r.id = std::string(line.substr(0, s1));
  r.group = std::string(line.substr(s1 + 1, s2 - s1 - 1));
  r.attempt = static_cast<std::uint32_t>(std::stoul(std::string(line.substr(s2 + 1, s3 - s2 - 1))));
  r.payload = std::string(line.substr(s3 + 1));
  return r;
}

}  // namespace fairlane::test::proto
