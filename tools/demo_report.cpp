// Demo results: files, merging, summary and verdict (see demo_report.hpp).
#include "demo_report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "format.hpp"

namespace fairlane::cli {

using nlohmann::json;

void write_json_file(const std::string& path, const json& j) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << dump_json(j) << '\n';
    out.flush();
    if (!out) fail(fmt::format("cannot write {}", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(fmt::format("cannot rename {} to {}", tmp, path));
}

std::optional<json> read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

json ProducerReport::to_json() const {
  return {{"group", group}, {"enqueued", enqueued}, {"full", full}, {"duplicates", duplicates}};
}

ProducerReport ProducerReport::from_json(const json& j) {
  ProducerReport r;
  r.group = j.at("group").get<std::string>();
  r.enqueued = j.at("enqueued").get<std::uint64_t>();
  r.full = j.at("full").get<std::uint64_t>();
  r.duplicates = j.at("duplicates").get<std::uint64_t>();
  return r;
}

TenantWaits& ConsumerReport::of(std::string_view group) {
  for (auto& t : tenants)
    if (t.group == group) return t;
  tenants.push_back(TenantWaits{std::string(group), 0, {}, {}});
  return tenants.back();
}

void ConsumerReport::merge(const ConsumerReport& o) {
  claimed += o.claimed;
  completed += o.completed;
  refused += o.refused;
  bad_payload += o.bad_payload;
  for (const auto& t : o.tenants) {
    TenantWaits& mine = of(t.group);
    mine.served += t.served;
    mine.wait_us.merge(t.wait_us);
    mine.lib_wait_us.merge(t.lib_wait_us);
  }
}

json ConsumerReport::to_json() const {
  json ts = json::array();
  for (const auto& t : tenants)
    ts.push_back({{"group", t.group},
                  {"served", t.served},
                  {"wait_us", t.wait_us.to_json()},
                  {"lib_wait_us", t.lib_wait_us.to_json()}});
  return {{"claimed", claimed}, {"completed", completed}, {"refused", refused},
          {"bad_payload", bad_payload}, {"tenants", std::move(ts)}};
}

ConsumerReport ConsumerReport::from_json(const json& j) {
  ConsumerReport r;
  r.claimed = j.at("claimed").get<std::uint64_t>();
  r.completed = j.at("completed").get<std::uint64_t>();
  r.refused = j.at("refused").get<std::uint64_t>();
  r.bad_payload = j.at("bad_payload").get<std::uint64_t>();
  for (const auto& t : j.at("tenants"))
    r.tenants.push_back(TenantWaits{t.at("group").get<std::string>(), t.at("served").get<std::uint64_t>(),
                                    Histogram::from_json(t.at("wait_us")),
                                    Histogram::from_json(t.at("lib_wait_us"))});
  return r;
}

Verdict judge(const Summary& s) {
  Verdict v;
  if (s.rows.empty()) {
    v.lines.push_back("verdict: no tenants ran");
    return v;
  }
  // The flood is whoever kept the most jobs waiting, whatever its name.
  auto flood = std::max_element(s.rows.begin(), s.rows.end(), [](const TenantRow& a, const TenantRow& b) {
    return a.mean_backlog < b.mean_backlog;
  });
  const std::uint64_t flood_p50 = flood->wait_us.percentile(50);
  v.conclusive = flood->mean_backlog >= 100.0;

  std::vector<std::string> detail;
  bool all_ok = true;
  for (const auto& r : s.rows) {
    if (&r == &*flood) continue;
    std::uint64_t unserved = r.enqueued > r.served ? r.enqueued - r.served : 0;
    std::uint64_t p99 = r.wait_us.percentile(99);
    // Not starved: (nearly) everything it sent was served, and its slowest
    // 1% waited less than the flood's typical job.
    bool ok = r.enqueued > 0 && unserved <= std::max<std::uint64_t>(1, r.enqueued / 100) &&
              (p99 < flood_p50 || !v.conclusive);
    all_ok = all_ok && ok;
    std::string served = unserved == 0 ? fmt::format("every job served ({} of {})", grouped(r.served), grouped(r.enqueued))
                                       : fmt::format("{} of {} served", grouped(r.served), grouped(r.enqueued));
    detail.push_back(fmt::format("  {:<8} {}, p99 wait {}{}", std::string(r.name) + ":", served,
                                 duration_us(p99), ok ? "" : "  <-- starved"));
  }
  v.fair = all_ok;
  if (!v.conclusive) {
    v.lines.push_back(fmt::format(
        "verdict: inconclusive: {} never built a backlog (mean {:.0f} jobs); the consumers kept up with everyone",
        flood->name, flood->mean_backlog));
  } else if (all_ok) {
    v.lines.push_back(fmt::format("verdict: fair. {} kept ~{} jobs waiting (p50 wait {}), and yet:", flood->name,
                                  grouped(static_cast<std::uint64_t>(flood->mean_backlog)),
                                  duration_us(flood_p50)));
  } else {
    v.lines.push_back(fmt::format("verdict: STARVED: while {} kept ~{} jobs waiting (p50 wait {}):",
                                  flood->name, grouped(static_cast<std::uint64_t>(flood->mean_backlog)),
                                  duration_us(flood_p50)));
  }
  for (auto& d : detail) v.lines.push_back(std::move(d));
  return v;
}

std::string summary_table(const Summary& s) {
  std::uint64_t total = 0;
  for (const auto& r : s.rows) total += r.served;
  std::string out;
  out += fmt::format("{:<9}{:>10}{:>10}{:>9}{:>7}{:>11}{:>11}{:>11}\n", "tenant", "enqueued", "served",
                     "backlog", "share", "wait p50", "wait p99", "wait max");
  for (const auto& r : s.rows) {
    double share = total == 0 ? 0.0 : 100.0 * static_cast<double>(r.served) / static_cast<double>(total);
    std::string pct = share > 0.0 && share < 0.1 ? std::string("<0.1%") : fmt::format("{:.1f}%", share);
    out += fmt::format("{:<9}{:>10}{:>10}{:>9}{:>7}{:>11}{:>11}{:>11}\n", r.name, grouped(r.enqueued),
                       grouped(r.served), grouped(r.backlog), pct, duration_us(r.wait_us.percentile(50)),
                       duration_us(r.wait_us.percentile(99)), duration_us(r.wait_us.max()));
  }
  double rate = s.seconds > 0 ? static_cast<double>(total) / s.seconds : 0.0;
  out += fmt::format("served {} jobs in {:.1f} s ({}/s) with {} consumer processes", grouped(total), s.seconds,
                     compact(static_cast<std::uint64_t>(rate)), s.consumers);
  out += "\nwait: from the producer's enqueue to the claim, on CLOCK_MONOTONIC\n";
  out += "      (the library's own Lease::waited_us, p99:";
  const char* sep = " ";
  for (const auto& r : s.rows) {
    out += fmt::format("{}{} {}", sep, r.name, duration_us(r.lib_wait_us.percentile(99)));
    sep = ", ";
  }
  out += ")\n";
  if (s.refused != 0 || s.bad_payload != 0)
    out += fmt::format("note: {} completes refused (stale/gone), {} unreadable payloads\n", s.refused, s.bad_payload);
  return out;
}

json summary_json(const Summary& s, const Verdict& v) {
  std::uint64_t total = 0;
  for (const auto& r : s.rows) total += r.served;
  json rows = json::array();
  auto stats = [](const Histogram& h) {
    return json{{"count", h.count()}, {"mean", h.mean()}, {"p50", h.percentile(50)},
                {"p99", h.percentile(99)}, {"max", h.max()}};
  };
  for (const auto& r : s.rows) {
    double share = total == 0 ? 0.0 : static_cast<double>(r.served) / static_cast<double>(total);
    rows.push_back({{"name", r.name},
                    {"group", r.group},
                    {"rate", r.rate},
                    {"enqueued", r.enqueued},
                    {"served", r.served},
                    {"lane_served", r.lane_served},
                    {"backlog", r.backlog},
                    {"mean_backlog", r.mean_backlog},
                    {"peak_backlog", r.peak_backlog},
                    {"full", r.full},
                    {"share", share},
                    {"wait_us", stats(r.wait_us)},
                    {"lib_wait_us", stats(r.lib_wait_us)}});
  }
  return {{"segment", s.segment},
          {"seconds", s.seconds},
          {"consumers", s.consumers},
          {"interrupted", s.interrupted},
          {"served", total},
          {"refused", s.refused},
          {"bad_payload", s.bad_payload},
          {"tenants", std::move(rows)},
          {"verdict", {{"fair", v.fair}, {"conclusive", v.conclusive}, {"lines", v.lines}}}};
}

}  // namespace fairlane::cli
