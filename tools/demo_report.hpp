// What the demo's children report to the parent, and what the parent makes
// of it: the summary table and the verdict.
//
// Each child writes one JSON file when it ends (to a temporary name, then
// renamed, so the parent never reads half a file). The parent merges the
// consumers' per-tenant histograms and joins them with the producers'
// counts and its own snapshots.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "histogram.hpp"

namespace fairlane::cli {

// Writes atomically (temporary file + rename). Throws cli::Failure.
void write_json_file(const std::string& path, const nlohmann::json& j);
// nullopt when the file is missing or not JSON.
std::optional<nlohmann::json> read_json_file(const std::string& path);

struct ProducerReport {
  std::string group;
  std::uint64_t enqueued = 0, full = 0, duplicates = 0;
  nlohmann::json to_json() const;
  static ProducerReport from_json(const nlohmann::json& j);
};

// One tenant as one consumer saw it.
struct TenantWaits {
  std::string group;
  std::uint64_t served = 0;  // completed with AckStatus::ok
  Histogram wait_us;         // producer's enqueue clock to claim, from the payload
  Histogram lib_wait_us;     // Lease::waited_us, the library's own measure
};

struct ConsumerReport {
  std::uint64_t claimed = 0, completed = 0, refused = 0;  // refused: complete said stale/gone
  std::uint64_t bad_payload = 0;
  std::vector<TenantWaits> tenants;
  TenantWaits& of(std::string_view group);
  void merge(const ConsumerReport& other);
  nlohmann::json to_json() const;
  static ConsumerReport from_json(const nlohmann::json& j);
};

// One row of the summary.
struct TenantRow {
  std::string name, group;
  std::uint64_t rate = 0;             // 0: as fast as it can
  std::uint64_t enqueued = 0, served = 0, backlog = 0, lane_served = 0, full = 0;
  double mean_backlog = 0;            // sampled by the parent while the demo ran
  std::uint64_t peak_backlog = 0;
  Histogram wait_us, lib_wait_us;
};

struct Summary {
  std::string segment;
  double seconds = 0;
  unsigned consumers = 0;
  std::uint64_t refused = 0, bad_payload = 0;
  bool interrupted = false;
  std::vector<TenantRow> rows;
};

struct Verdict {
  bool fair = false;
  bool conclusive = false;            // the flood did build a backlog
  std::vector<std::string> lines;     // first line is the headline
};

Verdict judge(const Summary& s);
std::string summary_table(const Summary& s);
nlohmann::json summary_json(const Summary& s, const Verdict& v);

}  // namespace fairlane::cli
