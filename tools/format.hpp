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
// (1, "lane", "lanes") -> "1 lane"; (65536, ...) -> "65,536 lanes".
std::string plural(std::uint64_t n, std::string_view one, std::string_view many);
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

// Groups live at once and the bound on them. The snapshot's own figures
// when it has them; otherwise the lanes it lists and the segment's --lanes.
std::uint64_t lanes_live(const Snapshot& s);
std::uint64_t lanes_capacity(const Snapshot& s, const QueueConfig& c);

// What only a segment can tell: the processes attached to it (tools that
// only look are not among them), what recovery last did, its mirror, and the
// corruption the library has met in it.
struct SegmentView {
  std::vector<ProcessInfo> processes;  // by pid
  RecoveryInfo recovery;
  MirrorStatus mirror;
  CorruptionInfo corruption;
  std::uint64_t unix_ms = 0;  // when it was read (wall clock)
};
SegmentView segment_view(const Queue& q);

// Process records in use and their capacity (create --processes).
std::uint64_t processes_used(const Snapshot& s, const SegmentView& v);
std::uint64_t processes_capacity(const Snapshot& s, const QueueConfig& c);

// One process for scripts: pid, name, state, alive, attached_unix_ms, leases.
nlohmann::json process_json(const ProcessInfo& p);

// `inspect --json`: the snapshot, and with a SegmentView also
// "processes": [...], "recovery": {...}, "mirror": {...} or null, "corruption".
// Without one (a Valkey queue) those are null: the backend has none.
nlohmann::json snapshot_json(std::string_view label, const Snapshot& s, const QueueConfig& c,
                             const SegmentView* view = nullptr);

// The human `inspect` view, readable on 80 columns. With a SegmentView (a
// segment) it shows the layout, recovery, the mirror and the processes;
// without one (a Valkey queue) it says what the backend does not keep.
std::string inspect_table(std::string_view label, const Snapshot& s, const QueueConfig& c,
                          const SegmentView* view = nullptr);

}  // namespace fairlane::cli
