// Rendering: numbers and durations for people, JSON for scripts, and the
// `inspect` table. Pure functions of their inputs; nothing here touches a
// segment except segment_view(), which reads one through a Queue.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fairlane/queue.hpp"

namespace fairlane::cli {

// 1234567 -> "1,234,567"
std::string grouped(std::uint64_t n);
// 1234 -> "1.2k", 2500000 -> "2.5M"; below 10,000 the plain number.
std::string compact(std::uint64_t n);
// Microseconds for a person: "35 us", "2.1 ms", "1.02 s".
std::string duration_us(std::uint64_t us);
// Bytes for a person: "512 B", "17.3 MiB".
std::string bytes(std::uint64_t n);

// Prints JSON on one line on stdout. Invalid UTF-8 (a binary payload) is
// replaced, never thrown on.
void print_json(const nlohmann::json& j);
// The same, as a string.
std::string dump_json(const nlohmann::json& j);

nlohmann::json config_json(const QueueConfig& c);
nlohmann::json lease_json(const Lease& l);
nlohmann::json snapshot_json(std::string_view segment, const Snapshot& s, const QueueConfig& c);

// What only a segment can tell, for `inspect`: the processes attached to it
// (other than the one reading), what recovery last did, and its mirror.
struct SegmentView {
  std::vector<ProcessInfo> processes;
  RecoveryInfo recovery;
  MirrorStatus mirror;
  std::uint64_t unix_ms = 0;  // when it was read (wall clock)
};
// Reads it; processes of this very process (the reader's own handles) are left out.
SegmentView segment_view(const Queue& q);
// {"processes": [...], "recovery": {...}, "mirror": {...} or null}
nlohmann::json segment_view_json(const SegmentView& v);

// The human `inspect` view, readable on 80 columns. With a SegmentView it
// also shows recovery and the mirror under the counters, and the attached
// processes under the lanes.
std::string inspect_table(std::string_view segment, const Snapshot& s, const QueueConfig& c,
                          const SegmentView* view = nullptr);

}  // namespace fairlane::cli
