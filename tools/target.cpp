// The queue a command works on (see target.hpp).
#include "target.hpp"

#include <fmt/format.h>

#include "args.hpp"
#include "cli_error.hpp"

namespace fairlane::cli {

namespace {

// The segment behind Backend, keeping the Queue reachable for what only a
// segment has. segment_backend() would own the Queue out of our reach.
class SegmentTarget final : public Backend {
 public:
  explicit SegmentTarget(Queue q) : q_(std::move(q)) {}
  Queue& queue() noexcept { return q_; }

  std::string describe() const override { return "segment " + q_.name(); }
  std::string job_kind() const override { return q_.config().job_kind; }
  BackendCapabilities capabilities() const override { return {true, true, true, true}; }
  std::uint64_t now_ms() override { return q_.now_ms(); }
  BrandedId mint() override { return q_.mint(); }
  EnqueueStatus enqueue(const BrandedId& g, const BrandedId& j, std::string_view p, EnqueueOptions o) override {
    return q_.enqueue(g, j, p, o);
  }
  std::size_t enqueue_batch(std::span<const EnqueueItem> i, std::span<EnqueueStatus> st) override {
    return q_.enqueue_batch(i, st);
  }
  bool claim(Lease& out, std::uint32_t ms) override { return q_.claim(out, ms); }
  bool claim_wait(Lease& out, std::uint32_t ms, std::chrono::milliseconds t) override { return q_.claim_wait(out, ms, t); }
  std::size_t claim_batch(std::span<Lease> out, std::uint32_t ms) override { return q_.claim_batch(out, ms); }
  std::size_t claim_lane_batch(std::span<Lease> out, std::uint32_t ms) override { return q_.claim_lane_batch(out, ms); }
  AckStatus complete(const BrandedId& j, Token t) override { return q_.complete(j, t); }
  std::size_t complete_batch(std::span<const Lease> l, std::span<AckStatus> st) override { return q_.complete_batch(l, st); }
  FailStatus fail(const BrandedId& j, Token t, const FailOptions& o) override { return q_.fail(j, t, o); }
  AckStatus extend(const BrandedId& j, Token t, std::uint32_t ms) override { return q_.extend(j, t, ms); }
  AckStatus release(const BrandedId& j, Token t) override { return q_.release(j, t); }
  LaneStatus pause(const BrandedId& g) override { return q_.pause(g); }
  LaneStatus resume(const BrandedId& g) override { return q_.resume(g); }
  void pause_all() override { q_.pause_all(); }
  void resume_all() override { q_.resume_all(); }
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

 private:
  Queue q_;
};

}  // namespace

QueueConfig Target::config() const {
  if (queue_ != nullptr) return queue_->config();
  QueueConfig c;
  c.job_kind = backend_->job_kind();
  if (valkey_ != nullptr) {
    c.payload_bytes = valkey_->max_payload();
    c.node = valkey_->node();
  }
  return c;
}

std::string parse_target(std::string_view text) {
  if (is_valkey_url(text)) {
    auto u = ValkeyUrl::parse(text);
    if (!u) fail(u.error().message);
    return std::string(text);
  }
  return parse_segment(text);
}

std::string parse_segment_target(std::string_view text, std::string_view command) {
  if (is_valkey_url(text))
    fail(fmt::format("{} does not apply to a Valkey queue ('{}'): it works on a shared-memory segment", command, text));
  return parse_segment(text);
}

Target open_target(const std::string& label, Access access, bool force_valkey) {
  Target t;
  t.label_ = label;
  if (is_valkey_url(label)) {
    ValkeyOptions vo;
    vo.force = force_valkey;
    vo.create = access == Access::create;
    auto r = ValkeyBackend::open(label, vo);
    if (!r) fail(r.error().message);
    t.valkey_ = r->get();
    t.backend_ = std::move(r).value();
    return t;
  }
  auto r = Queue::open(label, access == Access::look ? Queue::Attach::observer : Queue::Attach::member);
  if (!r) {
    const std::string& m = r.error().message;
    // The process table is full: say which creation flag sizes it.
    if (m.find("process record") != std::string::npos && m.find("--processes") == std::string::npos)
      fail(fmt::format("{}; recreate it with a larger --processes (fairlane create {} --processes N)", m, label));
    fail(m);
  }
  auto seg = std::make_unique<SegmentTarget>(std::move(r).value());
  t.queue_ = &seg->queue();
  t.backend_ = std::move(seg);
  return t;
}

void fail_read_only(const Target& t) {
  fail(fmt::format("'{}' is read-only: it is the Valkey copy of a mirrored segment, which owns it "
                   "(write through that segment)",
                   t.label()));
}

}  // namespace fairlane::cli
