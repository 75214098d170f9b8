// A fixture for single-process queue tests: one fresh segment per test,
// removed at the end, plus helpers to fill lanes and claim.
#pragma once

#include "test_support.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fairlane::test {

class QueueTest : public SegmentFixture {
 protected:
  // Tests that need other options call make_queue() themselves first.
  void make_queue(QueueOptions opts) { create(opts); }
  static QueueOptions small_options() {
    QueueOptions o;
    o.jobs = 256;
    o.lanes = 32;
    o.payload_bytes = 64;
    return o;
  }
  Queue& q() {
    if (!created()) make_queue(small_options());
    return SegmentFixture::q();
  }

  // Enqueues n jobs into a lane with fresh minted ids; returns their ids in mint order.
  std::vector<BrandedId> fill(const BrandedId& g, int n, std::string_view payload_prefix = "p") {
    std::vector<BrandedId> ids;
    for (int i = 0; i < n; ++i) {
      const BrandedId id = q().mint();
      const std::string payload = std::string(payload_prefix).append(std::to_string(i));
      EXPECT_EQ(q().enqueue(g, id, payload), EnqueueStatus::enqueued) << "lane " << g.str() << " job " << i;
      ids.push_back(id);
    }
    return ids;
  }

  // One claim that must succeed.
  Lease claim_one(std::uint32_t lease_ms = 60000) {
    Lease l;
    EXPECT_TRUE(q().claim(l, lease_ms)) << "claim returned false";
    return l;
  }

  // The groups served by n single claims (jobs stay leased).
  std::vector<BrandedId> claim_groups(int n, std::uint32_t lease_ms = 60000) {
    std::vector<BrandedId> out;
    for (int i = 0; i < n; ++i) {
      Lease l;
      if (!q().claim(l, lease_ms)) break;
      out.push_back(l.group);
    }
    return out;
  }

  std::optional<LaneInfo> lane(const BrandedId& g) {
    const Snapshot s = q().snapshot();
    for (const auto& li : s.lanes)
      if (li.group == g) return li;
    return std::nullopt;
  }
};

// "AAB" style printing of a served sequence, for failure messages.
inline std::string seq_string(const std::vector<BrandedId>& groups) {
  std::string s;
  for (const auto& g : groups) {
    if (!s.empty()) s += ' ';
    s += g.valid() ? std::string(g.kind()) : std::string("<none>");
  }
  return s;
}

}  // namespace fairlane::test
