// Peer: fairlane itself, one named segment.
//
// setup() creates the segment sized for the run (jobs >= twice the backlog,
// a lane per tenant plus the default lane); workers open it. Each producer
// mints a job id per job (the shared lock-free mint) and enqueues it under
// the tenant's group; each consumer claims (ring rotation + lease) and
// completes with the attempt token; a parked consumer is claim_wait on the
// segment's futex. Threads of one worker process share one Queue handle.
// Batch mode: enqueue_batch of freshly minted ids, claim_batch and
// complete_batch (one status per job).
#include <unistd.h>

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "fairlane/queue.hpp"
#include "peer.hpp"

namespace fairlane::bench {
namespace {

std::uint32_t pow2_at_least(std::uint64_t v) {
  std::uint64_t p = 1024;
  while (p < v) p <<= 1;
  return std::uint32_t(p);
}

class FairlanePeer final : public Peer {
 public:
  std::string_view name() const noexcept override { return "fairlane"; }
  std::string_view what() const noexcept override {
    return "named shm segment: mint + enqueue; claim (ring rotation, lease) + complete (fenced)";
  }
  bool supports_batch() const noexcept override { return true; }

  bool setup(const Params& p, std::string& info, std::string& error) override {
    name_ = "fairlane-bench-" + std::to_string(getpid());
    (void)fairlane::Queue::remove(name_);
    fairlane::QueueOptions o;
    o.jobs = p.capacity ? std::uint32_t(p.capacity)
                        : pow2_at_least(std::max(p.backlog * 2, p.drain_jobs + p.backlog) + 1024);
    o.lanes = std::max<std::uint32_t>(p.lanes + 1, 64);
    o.payload_bytes = p.payload;
    auto q = fairlane::Queue::create(name_, o);
    if (!q) {
      error = "Queue::create " + name_ + ": " + q.error().message;
      name_.clear();
      return false;
    }
    bytes_ = q->config().segment_bytes;
    info = "segment=" + name_;
    return true;
  }

  bool attach(const Params& p, std::string_view info, std::string& error) override {
    auto name = std::string(info.substr(info.find('=') + 1));
    auto q = fairlane::Queue::open(name);
    if (!q) {
      error = "Queue::open " + name + ": " + q.error().message;
      return false;
    }
    q_.emplace(std::move(q).value());
    groups_.resize(p.lanes);
    for (std::uint32_t i = 0; i < p.lanes; ++i) groups_[i] = fairlane::BrandedId::make("TEN", i + 1);
    return true;
  }

  void producer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    fairlane::BrandedId id;
    // --bare-blocking: a full queue is waited out in enqueue_wait (a second
    // at a time: the harness's abort word is looked at between).
    const bool blocking = ctx.params().mode == Mode::bare && ctx.params().bare_blocking;
    auto enq = [&](std::uint32_t lane, const char* data, std::uint32_t len) {
      if (!id.valid()) id = q.mint();  // a refused job is offered again under the same id
      const auto st = blocking ? q.enqueue_wait(groups_[lane], id, std::string_view(data, len), std::chrono::seconds(1))
                               : q.enqueue(groups_[lane], id, std::string_view(data, len));
      if (st == fairlane::EnqueueStatus::enqueued) {
        id = {};
        return true;
      }
      if (st != fairlane::EnqueueStatus::full) {
        ctx.fail("fairlane enqueue: " + std::string(fairlane::to_string(st)));
        id = {};
      }
      return false;
    };
    if (ctx.params().mode != Mode::batch) return ctx.produce(enq, [] {});

    const std::uint32_t b = ctx.params().batch;
    std::vector<fairlane::EnqueueItem> items(b);
    std::vector<fairlane::EnqueueStatus> st(b);
    auto enq_many = [&](const std::uint32_t* lanes, std::uint32_t n, const char* data, std::uint32_t len) {
      for (std::uint32_t i = 0; i < n; ++i) {
        items[i].group = groups_[lanes[i]];
        items[i].job = q.mint();
        items[i].payload = std::string_view(data, len);
      }
      q.enqueue_batch(std::span<const fairlane::EnqueueItem>(items.data(), n),
                      std::span<fairlane::EnqueueStatus>(st.data(), n));
      for (std::uint32_t i = 0; i < n; ++i) {
        if (st[i] == fairlane::EnqueueStatus::enqueued) continue;
        // A full queue refuses some of a batch: offer those again one by one.
        while (st[i] == fairlane::EnqueueStatus::full && !ctx.failed()) {
          sched_yield();
          st[i] = q.enqueue(items[i].group, items[i].job, items[i].payload);
        }
        if (st[i] != fairlane::EnqueueStatus::enqueued) {
          ctx.fail("fairlane enqueue_batch: " + std::string(fairlane::to_string(st[i])));
          return false;
        }
      }
      return true;
    };
    ctx.produce_batch(enq, enq_many, [] {});
  }

  void consumer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    const std::uint32_t lease_ms = ctx.params().lease_ms;
    fairlane::Lease lease;
    lease.payload.reserve(ctx.params().payload);
    // --bare-blocking: an empty queue is waited out in claim_wait (10 ms at
    // a time: the consumer's end-of-run looks go between).
    const bool blocking = ctx.params().mode == Mode::bare && ctx.params().bare_blocking;
    auto claim = [&]() -> const char* {
      const bool got = blocking ? q.claim_wait(lease, lease_ms, std::chrono::milliseconds(10)) : q.claim(lease, lease_ms);
      return got ? lease.payload.data() : nullptr;
    };
    auto complete = [&] {
      const auto st = q.complete(lease.id, lease.token);
      if (st != fairlane::AckStatus::ok) ctx.fail("fairlane complete: " + std::string(fairlane::to_string(st)));
    };
    if (ctx.params().mode != Mode::batch) {
      return ctx.consume(claim, complete, [&](int timeout_ms) -> const char* {
        return q.claim_wait(lease, lease_ms, std::chrono::milliseconds(timeout_ms)) ? lease.payload.data() : nullptr;
      });
    }

    std::vector<fairlane::Lease> leases(ctx.params().batch);
    for (auto& l : leases) l.payload.reserve(ctx.params().payload);
    std::vector<fairlane::AckStatus> acks(leases.size());
    auto claim_many = [&] { return q.claim_batch(std::span<fairlane::Lease>(leases), lease_ms); };
    auto complete_many = [&](std::size_t n) {
      const std::size_t ok = q.complete_batch(std::span<const fairlane::Lease>(leases.data(), n),
                                              std::span<fairlane::AckStatus>(acks.data(), n));
      if (ok != n) {
        for (std::size_t i = 0; i < n; ++i)
          if (acks[i] != fairlane::AckStatus::ok)
            return ctx.fail("fairlane complete_batch: " + std::string(fairlane::to_string(acks[i])));
      }
    };
    ctx.consume_batch(claim, complete, claim_many, complete_many);
  }

  void detach() override { q_.reset(); }

  void teardown() override {
    if (!name_.empty()) (void)fairlane::Queue::remove(name_);
    name_.clear();
  }

  std::uint64_t shared_bytes() const override { return bytes_; }

 private:
  std::string name_;
  std::uint64_t bytes_ = 0;
  std::optional<fairlane::Queue> q_;
  std::vector<fairlane::BrandedId> groups_;
};

}  // namespace

std::unique_ptr<Peer> make_fairlane_peer() { return std::make_unique<FairlanePeer>(); }

}  // namespace fairlane::bench
