// Queue behind the Backend interface: a thin forwarder.
#include "fairlane/backend.hpp"
#include "fairlane/valkey.hpp"

namespace fairlane {
namespace {

class SegmentBackend final : public Backend {
 public:
  explicit SegmentBackend(Queue q) : q_(std::move(q)) {}

  std::string describe() const override { return "segment " + q_.name(); }
  std::string job_kind() const override { return q_.config().job_kind; }
  BackendCapabilities capabilities() const override { return {true, true, true, true}; }
  std::uint64_t now_ms() override { return q_.now_ms(); }
  BrandedId mint() override { return q_.mint(); }
  using Backend::enqueue;
  EnqueueStatus enqueue(const BrandedId& g, const BrandedId& j, std::string_view p, const EnqueueOptions& o) override {
    return q_.enqueue(g, j, p, o);
  }
  EnqueueStatus enqueue_wait(const BrandedId& g, const BrandedId& j, std::string_view p, const EnqueueOptions& o,
                             std::chrono::milliseconds timeout) override {
    return q_.enqueue_wait(g, j, p, o, timeout);
  }
  std::size_t enqueue_batch(std::span<const EnqueueItem> items, std::span<EnqueueStatus> st) override {
    return q_.enqueue_batch(items, st);
  }
  std::size_t enqueue_batch_wait(std::span<const EnqueueItem> items, std::span<EnqueueStatus> st,
                                 std::chrono::milliseconds timeout) override {
    return q_.enqueue_batch_wait(items, st, timeout);
  }
  bool claim(Lease& out, std::uint32_t lease_ms) override { return q_.claim(out, lease_ms); }
  bool claim_wait(Lease& out, std::uint32_t lease_ms, std::chrono::milliseconds t) override {
    return q_.claim_wait(out, lease_ms, t);
  }
  std::size_t claim_batch(std::span<Lease> out, std::uint32_t lease_ms) override { return q_.claim_batch(out, lease_ms); }
  std::size_t claim_lane_batch(std::span<Lease> out, std::uint32_t lease_ms) override {
    return q_.claim_lane_batch(out, lease_ms);
  }
  AckStatus complete(const BrandedId& j, Token t) override { return q_.complete(j, t); }
  std::size_t complete_batch(std::span<const Lease> l, std::span<AckStatus> st) override { return q_.complete_batch(l, st); }
  FailStatus fail(const BrandedId& j, Token t, const FailOptions& o) override { return q_.fail(j, t, o); }
  AckStatus extend(const BrandedId& j, Token t, std::uint32_t ms) override { return q_.extend(j, t, ms); }
  AckStatus release(const BrandedId& j, Token t) override { return q_.release(j, t); }
  LaneStatus pause(const BrandedId& g) override { return q_.pause(g); }
  LaneStatus resume(const BrandedId& g) override { return q_.resume(g); }
  LaneStatus pause_all() override { return q_.pause_all(); }
  LaneStatus resume_all() override { return q_.resume_all(); }
  LaneStatus set_limit(const BrandedId& g, std::uint32_t n) override { return q_.set_limit(g, n); }
  LaneStatus clear_limit(const BrandedId& g) override { return q_.clear_limit(g); }
  LaneStatus set_weight(const BrandedId& g, std::uint32_t w) override { return q_.set_weight(g, w); }
  std::uint64_t depth(const BrandedId& g) override { return q_.depth(g); }
  std::uint64_t drain(const BrandedId& g) override { return q_.drain(g); }
  MoveStatus reassign(const BrandedId& j, const BrandedId& g) override { return q_.reassign(j, g); }
  std::uint64_t tick() override { return q_.tick(); }
  Snapshot snapshot() override { return q_.snapshot(); }
  std::optional<JobInfo> job(const BrandedId& id, bool with_payload) override { return q_.job(id, with_payload); }
  std::vector<JobInfo> jobs(const JobFilter& f) override { return q_.jobs(f); }
  AckStatus requeue_dead(const BrandedId& id) override { return q_.requeue_dead(id); }
  std::uint64_t requeue_all_dead() override { return q_.requeue_all_dead(); }
  std::uint64_t purge_dead() override { return q_.purge_dead(); }
  std::vector<ProcessInfo> processes() override { return q_.processes(); }
  void advance_clock(std::uint64_t ms) override { q_.advance_clock(ms); }
  Queue* segment() noexcept override { return &q_; }
  bool writable() override { return q_.writable(); }

 private:
  Queue q_;
};

}  // namespace

std::unique_ptr<Backend> segment_backend(Queue queue) { return std::make_unique<SegmentBackend>(std::move(queue)); }

Result<std::unique_ptr<Backend>> open_backend(std::string_view target) {
  if (is_valkey_url(target)) return open_valkey(target);
  auto q = Queue::open(target);
  if (!q) return q.error();
  return segment_backend(std::move(q).value());
}

}  // namespace fairlane
