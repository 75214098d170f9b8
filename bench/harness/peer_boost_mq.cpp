// Peer: Boost.Interprocess message_queue across processes.
//
// One bounded FIFO in a named segment, guarded by a process-shared mutex and
// two condition variables. No lanes (so no fairness: tenants are served in
// arrival order), no leases, no acknowledgement: a "cycle" is one receive.
// The capacity is the harness backlog (in the bare flow: the capacity every
// peer gets), so both sides see the same bound. In the bare flow the sender
// uses try_send and the receiver try_receive, spinning on full and empty as
// the other peers do (the blocking calls would park on the condvars); with
// --bare-blocking both sides use the blocking calls.
#include <boost/date_time/posix_time/posix_time_types.hpp>
#include <boost/interprocess/ipc/message_queue.hpp>
#include <unistd.h>

#include <memory>

#include "peer.hpp"

namespace fairlane::bench {
namespace {

namespace bip = boost::interprocess;

class BoostMqPeer final : public Peer {
 public:
  std::string_view name() const noexcept override { return "boost-mq"; }
  std::string_view what() const noexcept override {
    return "one FIFO (mutex + condvars in shm); receive only: no lanes, no lease, no ack";
  }

  bool setup(const Params& p, std::string& info, std::string& error) override {
    qname_ = "fairlane-bench-mq-" + std::to_string(getpid());
    bip::message_queue::remove(qname_.c_str());
    try {
      const std::uint64_t cap = p.capacity ? p.capacity : std::max(p.backlog, p.drain_jobs) + 64;
      bip::message_queue q(bip::create_only, qname_.c_str(), cap, p.payload);
      shared_ = q.get_max_msg() * (q.get_max_msg_size() + 32);
    } catch (const std::exception& e) {
      error = std::string("message_queue create: ") + e.what();
      return false;
    }
    info = "mq=" + qname_;
    return true;
  }

  bool attach(const Params&, std::string_view info, std::string& error) override {
    auto name = std::string(info.substr(info.find('=') + 1));
    try {
      q_ = std::make_unique<bip::message_queue>(bip::open_only, name.c_str());
    } catch (const std::exception& e) {
      error = std::string("message_queue open: ") + e.what();
      return false;
    }
    return true;
  }

  void producer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    // --bare-blocking: a full queue is waited out in timed_send (a second at
    // a time), as fairlane's producer waits in enqueue_wait.
    const bool blocking = ctx.params().mode == Mode::bare && ctx.params().bare_blocking;
    ctx.produce([&](std::uint32_t, const char* data, std::uint32_t len) {
      if (!blocking) return q.try_send(data, len, 0);
      return q.timed_send(data, len, 0,
                          boost::posix_time::microsec_clock::universal_time() + boost::posix_time::seconds(1));
    }, [] {});
  }

  void consumer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    std::vector<char> buf(ctx.params().payload);
    bip::message_queue::size_type got = 0;
    unsigned prio = 0;
    // --bare-blocking: an empty queue is waited out in timed_receive (10 ms
    // at a time), as fairlane's consumer waits in claim_wait.
    const bool blocking = ctx.params().mode == Mode::bare && ctx.params().bare_blocking;
    ctx.consume(
        [&]() -> const char* {
          if (!blocking) return q.try_receive(buf.data(), buf.size(), got, prio) ? buf.data() : nullptr;
          const auto until = boost::posix_time::microsec_clock::universal_time() + boost::posix_time::milliseconds(10);
          return q.timed_receive(buf.data(), buf.size(), got, prio, until) ? buf.data() : nullptr;
        },
        [] {},
        [&](int timeout_ms) -> const char* {
          auto until = boost::posix_time::microsec_clock::universal_time() +
                       boost::posix_time::milliseconds(timeout_ms);
          return q.timed_receive(buf.data(), buf.size(), got, prio, until) ? buf.data() : nullptr;
        });
  }

  void detach() override { q_.reset(); }

  void teardown() override {
    if (!qname_.empty()) bip::message_queue::remove(qname_.c_str());
    qname_.clear();
  }

  std::uint64_t shared_bytes() const override { return shared_; }

 private:
  std::string qname_;
  std::uint64_t shared_ = 0;
  std::unique_ptr<bip::message_queue> q_;
};

}  // namespace

std::unique_ptr<Peer> make_boost_mq_peer() { return std::make_unique<BoostMqPeer>(); }

}  // namespace fairlane::bench
