// Rendering: numbers and durations for people, JSON for scripts, and the
// `inspect` table. Pure functions of their inputs; nothing here touches a
// segment.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

// The human `inspect` view, readable on 80 columns.
std::string inspect_table(std::string_view segment, const Snapshot& s, const QueueConfig& c);

}  // namespace fairlane::cli
