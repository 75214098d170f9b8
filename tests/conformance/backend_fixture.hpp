// One fixture, every backend: each TEST_P body runs against a fresh segment,
// a fresh queue on one Valkey server and a fresh queue on a 3-master Valkey
// Cluster (a unique queue name per test, so a different slot and often
// another master; its keys deleted at the end). Time moves only by
// advance_clock.
#pragma once

#include <fairlane/backend.hpp>
#include <fairlane/valkey.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "redis_server.hpp"
#include "test_support.hpp"

namespace fairlane::test {

enum class BackendKind { segment, valkey, cluster };

inline std::string backend_name(const ::testing::TestParamInfo<BackendKind>& info) {
  switch (info.param) {
    case BackendKind::segment: return "segment";
    case BackendKind::valkey: return "valkey";
    default: return "cluster";
  }
}

// The payload limit both backends are set up with.
inline constexpr std::uint32_t kConformancePayload = 256;

class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    name_ = unique_segment_name();
    if (GetParam() == BackendKind::segment) {
      guard_ = std::make_unique<SegmentGuard>(name_);
      QueueOptions o;
      o.jobs = 1024;
      o.lanes = 64;
      o.payload_bytes = kConformancePayload;
      auto q = Queue::create(name_, o);
      ASSERT_TRUE(q.ok()) << describe(q.error());
      b_ = segment_backend(std::move(q).value());
      return;
    }
    if (GetParam() == BackendKind::cluster) {
      ClusterTarget& c = cluster_target();
      if (!c.available) FAIRLANE_SKIP_OR_FAIL("no Valkey Cluster for these cases: " + c.skip_reason);
      url_ = c.url(name_);
    } else {
      ValkeyTarget& t = valkey_target();
      if (!t.available) FAIRLANE_SKIP_OR_FAIL("no Valkey server for these cases: " + t.skip_reason);
      url_ = t.url(name_);
    }
    auto v = ValkeyBackend::open(url_, valkey_options());
    ASSERT_TRUE(v.ok()) << v.error().message;
    valkey_ = v.value().get();
    valkey_->remove_queue();  // leftovers of an earlier run with the same name
    v = ValkeyBackend::open(url_, valkey_options());  // records kind and payload limit again
    ASSERT_TRUE(v.ok()) << v.error().message;
    valkey_ = v.value().get();
    b_ = std::move(v).value();
  }

  void TearDown() override {
    others_.clear();
    if (valkey_) {
      try {
        valkey_->remove_queue();
      } catch (const BackendError&) {
      }
    }
    valkey_ = nullptr;
    b_.reset();
    guard_.reset();
  }

  static ValkeyOptions valkey_options() {
    ValkeyOptions o;
    o.max_payload = kConformancePayload;
    return o;
  }

  Backend& q() { return *b_; }
  bool is_valkey() const { return GetParam() != BackendKind::segment; }

  // Another client of the same queue: a second attachment of the segment, or
  // a second connection. Owned by the fixture.
  Backend& another() { return *others_.emplace_back(open_another()); }
  std::unique_ptr<Backend> open_another() {
    if (GetParam() == BackendKind::segment) {
      auto q = Queue::open(name_);
      EXPECT_TRUE(q.ok()) << describe(q.error());
      return segment_backend(std::move(q).value());
    }
    auto v = open_valkey(url_, valkey_options());
    EXPECT_TRUE(v.ok()) << v.error().message;
    return std::move(v).value();
  }

  std::vector<BrandedId> fill(const BrandedId& g, int n, std::string_view prefix = "p") {
    std::vector<BrandedId> ids;
    for (int i = 0; i < n; ++i) {
      const BrandedId id = q().mint();
      EXPECT_EQ(q().enqueue(g, id, std::string(prefix) + std::to_string(i)), EnqueueStatus::enqueued)
          << "lane " << g.str() << " job " << i;
      ids.push_back(id);
    }
    return ids;
  }

  Lease claim_one(std::uint32_t lease_ms = 60000) {
    Lease l;
    EXPECT_TRUE(q().claim(l, lease_ms)) << "claim returned false";
    return l;
  }

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

  std::string name_, url_;
  std::unique_ptr<SegmentGuard> guard_;
  std::unique_ptr<Backend> b_;
  ValkeyBackend* valkey_ = nullptr;
  std::vector<std::unique_ptr<Backend>> others_;
};

// "AAA BBB" printing of a served sequence, for failure messages.
inline std::string seq_string(const std::vector<BrandedId>& groups) {
  std::string s;
  for (const auto& g : groups) {
    if (!s.empty()) s += ' ';
    s += g.valid() ? std::string(g.kind()) : std::string("<none>");
  }
  return s;
}

inline std::vector<BrandedId> pattern(std::initializer_list<BrandedId> cycle, int repeats) {
  std::vector<BrandedId> out;
  for (int r = 0; r < repeats; ++r) out.insert(out.end(), cycle.begin(), cycle.end());
  return out;
}

}  // namespace fairlane::test
