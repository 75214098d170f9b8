// Peer: fairlane's work behind one robust process-shared pthread mutex
// (mutex_queue.hpp), the honest straw man of issue 12: the producer mints a
// text id and enqueues it under its tenant's group (dedup by id, a lane per
// group made and given back as groups come and go), the consumer claims
// (lease expiry, strict rotation, a fencing token, the payload copied out)
// and completes by id and token, exactly the calls the fairlane peer makes.
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "mutex_queue.hpp"
#include "peer.hpp"

namespace fairlane::bench {
namespace {

class MutexShmPeer final : public Peer {
 public:
  std::string_view name() const noexcept override { return "mutex-shm"; }
  std::string_view what() const noexcept override {
    return "fairlane's work under one robust process-shared mutex: mint + enqueue (text ids, dedup, lanes); "
           "claim (expiry, rotation, token lease) + complete (by id, fenced)";
  }

  bool setup(const Params& p, std::string& info, std::string& error) override {
    name_ = "/fairlane-bench-mutex-" + std::to_string(getpid());
    shm_unlink(name_.c_str());
    const std::uint64_t jobs = p.capacity ? p.capacity : std::max(p.backlog * 2, p.drain_jobs + p.backlog) + 1024;
    if (!MutexQueue::create(name_, std::uint32_t(jobs), std::max<std::uint32_t>(p.lanes + 1, 64), p.payload, bytes_,
                            error))
      return false;
    info = "shm=" + name_;
    return true;
  }

  bool attach(const Params& p, std::string_view info, std::string& error) override {
    q_ = std::make_unique<MutexQueue>();
    groups_.resize(p.lanes);
    for (std::uint32_t i = 0; i < p.lanes; ++i) groups_[i] = fairlane::BrandedId::make("TEN", i + 1);
    return q_->open(std::string(info.substr(info.find('=') + 1)), error);
  }

  void producer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    fairlane::BrandedId id;
    ctx.produce([&](std::uint32_t lane, const char* data, std::uint32_t len) {
      if (!id.valid()) id = q.mint();  // a refused job is offered again under the same id
      const auto st = q.enqueue(groups_[lane], id, std::string_view(data, len));
      if (st == fairlane::EnqueueStatus::enqueued) {
        id = {};
        return true;
      }
      if (st != fairlane::EnqueueStatus::full) {
        ctx.fail("mutex-shm enqueue: " + std::string(fairlane::to_string(st)));
        id = {};
      }
      return false;
    }, [] {});
  }

  void consumer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    const std::uint32_t lease_ms = ctx.params().lease_ms;
    fairlane::Lease lease;
    lease.payload.reserve(ctx.params().payload);
    ctx.consume(
        [&]() -> const char* { return q.claim(lease, lease_ms) ? lease.payload.data() : nullptr; },
        [&] {
          const auto st = q.complete(lease.id, lease.token);
          if (st != fairlane::AckStatus::ok) ctx.fail("mutex-shm complete: " + std::string(fairlane::to_string(st)));
        },
        [&](int timeout_ms) -> const char* {
          return q.claim_wait(lease, lease_ms, timeout_ms) ? lease.payload.data() : nullptr;
        });
  }

  void detach() override { q_.reset(); }

  void teardown() override {
    if (!name_.empty()) shm_unlink(name_.c_str());
    name_.clear();
  }

  std::uint64_t shared_bytes() const override { return bytes_; }

 private:
  std::string name_;
  std::uint64_t bytes_ = 0;
  std::unique_ptr<MutexQueue> q_;
  std::vector<fairlane::BrandedId> groups_;
};

}  // namespace

std::unique_ptr<Peer> make_mutex_shm_peer() { return std::make_unique<MutexShmPeer>(); }

}  // namespace fairlane::bench
