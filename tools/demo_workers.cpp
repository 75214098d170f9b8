// The demo's child processes: a producer per tenant and a few consumers.
//
// Both run for a fixed time (or until SIGINT/SIGTERM), then write a JSON
// report the parent reads (see demo_report.hpp). Payloads are
// "<CLOCK_MONOTONIC ns at enqueue>:<sequence>", so a consumer in another
// process measures how long each job waited on the same clock.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "args.hpp"
#include "cli_error.hpp"
#include "demo.hpp"
#include "demo_report.hpp"
#include "fairlane/queue.hpp"
#include "process.hpp"

namespace fairlane::cli {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

// Burns CPU for `us` microseconds: the "work" of a job.
void spin_for(std::chrono::microseconds us) {
  auto until = Clock::now() + us;
  while (Clock::now() < until) {
  }
}

// The enqueue timestamp at the front of a demo payload.
std::optional<std::uint64_t> enqueue_ns(std::string_view payload) {
  std::uint64_t ns = 0;
  auto [ptr, ec] = std::from_chars(payload.data(), payload.data() + payload.size(), ns);
  if (ec != std::errc() || ptr == payload.data() + payload.size() || *ptr != ':') return std::nullopt;
  return ns;
}

}  // namespace

int run_demo_producer(const ProducerArgs& a) {
  install_stop_handlers();
  const std::string seg = parse_segment(a.segment);
  const BrandedId group = parse_id(a.group, "group");
  const std::uint64_t rate = a.rate == "max" ? 0 : parse_u64(a.rate, "RATE", 1, 10'000'000);
  const auto duration = parse_seconds(a.seconds, "SECONDS", 0.1, 3600);
  const std::uint64_t backlog = parse_u64(a.backlog, "--backlog");
  Queue q = open_queue(seg);

  ProducerReport rep;
  rep.group = group.string();
  char buf[64];
  const auto start = Clock::now();
  const auto end = start + duration;
  while (!stop_requested()) {
    const auto now = Clock::now();
    if (now >= end) break;
    std::uint64_t batch = 256;
    if (rate == 0) {
      // As fast as it can, but only up to `backlog` waiting: the point is a
      // deep lane, not a full segment that turns the others away.
      if (backlog != 0 && q.depth(group) >= backlog) {
        sleep_unless_stopped(std::chrono::microseconds(200));
        continue;
      }
    } else {
      auto elapsed = static_cast<std::uint64_t>(std::chrono::duration_cast<nanoseconds>(now - start).count());
      std::uint64_t due = rate * elapsed / 1'000'000'000ULL + 1;
      if (rep.enqueued >= due) {
        auto next = start + nanoseconds(rep.enqueued * 1'000'000'000ULL / rate);
        sleep_unless_stopped(std::min(next, end) - now);
        continue;
      }
      batch = std::min<std::uint64_t>(due - rep.enqueued, 1000);
    }
    for (std::uint64_t i = 0; i < batch; ++i) {
      BrandedId id = q.mint();
      auto res = fmt::format_to_n(buf, sizeof buf, "{}:{}", mono_ns(), rep.enqueued);
      EnqueueStatus st = q.enqueue(group, id, std::string_view(buf, res.size));
      if (st == EnqueueStatus::enqueued) {
        ++rep.enqueued;
      } else if (st == EnqueueStatus::duplicate) {
        ++rep.duplicates;  // a fresh mint is never a duplicate: counted to show it
      } else if (st == EnqueueStatus::full || st == EnqueueStatus::lanes_full) {
        ++rep.full;
        sleep_unless_stopped(std::chrono::milliseconds(1));
        break;
      } else {
        fail(fmt::format("demo producer {}: enqueue refused: {}", group.str(), to_string(st)));
      }
    }
  }
  write_json_file(a.results, rep.to_json());
  return kExitOk;
}

int run_demo_consumer(const ConsumerArgs& a) {
  install_stop_handlers();
  const std::string seg = parse_segment(a.segment);
  const auto duration = parse_seconds(a.seconds, "SECONDS", 0.1, 3600);
  const auto work = std::chrono::microseconds(parse_u64(a.work_us, "--work-us", 0, 100'000));
  Queue q = open_queue(seg);

  ConsumerReport rep;
  Lease lease;
  lease.payload.reserve(64);
  TenantWaits* last = nullptr;  // consecutive claims often share a tenant
  const auto end = Clock::now() + duration;
  while (!stop_requested()) {
    const auto now = Clock::now();
    if (now >= end) break;
    auto timeout = std::min<Clock::duration>(std::chrono::milliseconds(100), end - now);
    if (!q.claim_wait(lease, 10'000, std::chrono::ceil<std::chrono::milliseconds>(timeout))) continue;
    const std::uint64_t claimed_ns = mono_ns();
    ++rep.claimed;
    if (last == nullptr || last->group != lease.group.str()) last = &rep.of(lease.group.str());
    if (auto sent = enqueue_ns(lease.payload)) {
      last->wait_us.record(claimed_ns > *sent ? (claimed_ns - *sent) / 1000 : 0);
    } else {
      ++rep.bad_payload;
    }
    last->lib_wait_us.record(lease.waited_us);
    spin_for(work);
    if (q.complete(lease.id, lease.token) == AckStatus::ok) {
      ++rep.completed;
      ++last->served;
    } else {
      ++rep.refused;
    }
  }
  write_json_file(a.results, rep.to_json());
  return kExitOk;
}

}  // namespace fairlane::cli
