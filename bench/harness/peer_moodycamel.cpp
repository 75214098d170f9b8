// Peer: moodycamel::ConcurrentQueue inside one process (threads only).
//
// The in-process ceiling: a lock-free MPMC queue of fixed-size items with
// producer and consumer tokens (its fastest mode). No lanes, no leases, no
// acknowledgement; a cycle is one try_dequeue. It cannot live in shared
// memory (it holds process-local pointers), so this peer runs only with the
// threads topology. For the wake-up test a LightweightSemaphore (what
// BlockingConcurrentQueue uses) is signalled after each enqueue; during the
// load phases it is not touched, so it costs the throughput nothing.
#include <concurrentqueue/concurrentqueue.h>
#include <concurrentqueue/lightweightsemaphore.h>

#include <array>
#include <cstring>
#include <memory>

#include "peer.hpp"

namespace fairlane::bench {
namespace {

template <std::size_t N>
struct Item {
  std::uint32_t len;
  std::array<char, N> data;
};

class MoodycamelBase : public Peer {
 public:
  std::string_view name() const noexcept override { return "moodycamel"; }
  std::string_view what() const noexcept override {
    return "lock-free MPMC in one process, tokens; dequeue only: no lanes, no lease, no ack";
  }
  bool supports(Topology t) const noexcept override { return t == Topology::threads; }
  Topology natural_topology() const noexcept override { return Topology::threads; }
  bool setup(const Params&, std::string&, std::string&) override { return true; }
  void teardown() override {}
};

template <std::size_t N>
class MoodycamelPeer final : public MoodycamelBase {
 public:
  bool attach(const Params& p, std::string_view, std::string&) override {
    q_ = std::make_unique<moodycamel::ConcurrentQueue<Item<N>>>(p.backlog + 1024);
    return true;
  }

  void producer_loop(WorkerCtx& ctx) override {
    moodycamel::ProducerToken tok(*q_);
    Item<N> item{};
    ctx.produce([&](std::uint32_t, const char* data, std::uint32_t len) {
      item.len = len;
      std::memcpy(item.data.data(), data, len);
      if (!q_->enqueue(tok, item)) return false;
      if (ctx.phase() >= kWake) sem_.signal();
      return true;
    }, [] {});
  }

  void consumer_loop(WorkerCtx& ctx) override {
    moodycamel::ConsumerToken tok(*q_);
    Item<N> item{};
    ctx.consume(
        [&]() -> const char* { return q_->try_dequeue(tok, item) ? item.data.data() : nullptr; },
        [] {},
        [&](int timeout_ms) -> const char* {
          if (!sem_.wait(std::int64_t(timeout_ms) * 1000)) return nullptr;
          // The semaphore counts wake-phase items; one is there or on its way.
          while (!q_->try_dequeue(tok, item)) {
          }
          return item.data.data();
        });
  }

  void detach() override { q_.reset(); }

 private:
  std::unique_ptr<moodycamel::ConcurrentQueue<Item<N>>> q_;
  moodycamel::LightweightSemaphore sem_;
};

// A peer built for the configured payload: items of the next size class up.
class MoodycamelDispatch final : public MoodycamelBase {
 public:
  bool attach(const Params& p, std::string_view info, std::string& error) override {
    if (p.payload <= 16) impl_ = std::make_unique<MoodycamelPeer<16>>();
    else if (p.payload <= 64) impl_ = std::make_unique<MoodycamelPeer<64>>();
    else if (p.payload <= 256) impl_ = std::make_unique<MoodycamelPeer<256>>();
    else if (p.payload <= 1024) impl_ = std::make_unique<MoodycamelPeer<1024>>();
    else if (p.payload <= 4096) impl_ = std::make_unique<MoodycamelPeer<4096>>();
    else if (p.payload <= 65536) impl_ = std::make_unique<MoodycamelPeer<65536>>();
    else { error = "moodycamel peer: payload over 64 KiB"; return false; }
    return impl_->attach(p, info, error);
  }
  void producer_loop(WorkerCtx& ctx) override { impl_->producer_loop(ctx); }
  void consumer_loop(WorkerCtx& ctx) override { impl_->consumer_loop(ctx); }
  void detach() override {
    if (impl_) impl_->detach();
    impl_.reset();
  }

 private:
  std::unique_ptr<MoodycamelBase> impl_;
};

}  // namespace

std::unique_ptr<Peer> make_moodycamel_peer() { return std::make_unique<MoodycamelDispatch>(); }

}  // namespace fairlane::bench
