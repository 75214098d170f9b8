// fairlane::Worker (see worker.hpp and docs/worker.md).
//
// Every lease the worker holds sits in one slot of a fixed table of
// max_in_flight slots. A slot's `phase` says who may act on its lease:
//
//   free --claimer--> claiming --claimer--> queued --handler--> running
//   running --handler--> finishing --handler--> free         (acknowledged)
//   queued|running --supervisor or handler--> abandoned      (given up: timeout,
//                                  lost lease, shutdown; the lease was failed
//                                  or handed back by whoever won that CAS)
//   abandoned --handler--> free                              (when it gets there)
//
// Exactly one thread acknowledges a lease: the one whose CAS moved the slot
// out of `queued`/`running` (to running+finishing or to abandoned). Only the
// handler thread that dequeued a slot's index returns it to `free`, so a
// slot is never reused while a handler may still touch it. `gen` (changed
// under `mu` on every free) lets the supervisor tell a slot it looked at
// from the same slot reused for another job.
#include "fairlane/worker.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <random>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <concurrentqueue/blockingconcurrentqueue.h>

namespace fairlane {

std::string_view to_string(JobEvent::Kind k) noexcept {
  switch (k) {
    case JobEvent::Kind::claimed: return "claimed";
    case JobEvent::Kind::completed: return "completed";
    case JobEvent::Kind::retrying: return "retrying";
    case JobEvent::Kind::dead: return "dead";
    case JobEvent::Kind::handed_back: return "handed_back";
    case JobEvent::Kind::lost: return "lost";
  }
  return "unknown";
}

// ---- backends and clocks -------------------------------------------------------------------

namespace {

// Every thread's "own" backend is this forwarder to the one shared backend.
class SharedBackend final : public Backend {
 public:
  explicit SharedBackend(std::shared_ptr<Backend> b) : b_(std::move(b)) {}
  Queue* segment() noexcept override { return b_->segment(); }
  bool writable() override { return b_->writable(); }
  std::string describe() const override { return b_->describe(); }
  std::string job_kind() const override { return b_->job_kind(); }
  BackendCapabilities capabilities() const override { return b_->capabilities(); }
  std::uint64_t now_ms() override { return b_->now_ms(); }
  BrandedId mint() override { return b_->mint(); }
  using Backend::enqueue;
  EnqueueStatus enqueue(const BrandedId& g, const BrandedId& j, std::string_view p, const EnqueueOptions& o) override {
    return b_->enqueue(g, j, p, o);
  }
  // (It forwarded no enqueue_wait at first: through shared_backend() the
  // call answered `full` at once, as Backend's default does.)
  EnqueueStatus enqueue_wait(const BrandedId& g, const BrandedId& j, std::string_view p, const EnqueueOptions& o,
                             std::chrono::milliseconds t) override {
    return b_->enqueue_wait(g, j, p, o, t);
  }
  std::size_t enqueue_batch(std::span<const EnqueueItem> i, std::span<EnqueueStatus> st) override {
    return b_->enqueue_batch(i, st);
  }
  std::size_t enqueue_batch_wait(std::span<const EnqueueItem> i, std::span<EnqueueStatus> st,
                                 std::chrono::milliseconds t) override {
    return b_->enqueue_batch_wait(i, st, t);
  }
  bool claim(Lease& out, std::uint32_t ms) override { return b_->claim(out, ms); }
  bool claim_wait(Lease& out, std::uint32_t ms, std::chrono::milliseconds t) override {
    return b_->claim_wait(out, ms, t);
  }
  std::size_t claim_batch(std::span<Lease> out, std::uint32_t ms) override { return b_->claim_batch(out, ms); }
  std::size_t claim_lane_batch(std::span<Lease> out, std::uint32_t ms) override { return b_->claim_lane_batch(out, ms); }
  AckStatus complete(const BrandedId& j, Token t) override { return b_->complete(j, t); }
  std::size_t complete_batch(std::span<const Lease> l, std::span<AckStatus> st) override { return b_->complete_batch(l, st); }
  FailStatus fail(const BrandedId& j, Token t, const FailOptions& o) override { return b_->fail(j, t, o); }
  AckStatus extend(const BrandedId& j, Token t, std::uint32_t ms) override { return b_->extend(j, t, ms); }
  AckStatus release(const BrandedId& j, Token t) override { return b_->release(j, t); }
  LaneStatus pause(const BrandedId& g) override { return b_->pause(g); }
  LaneStatus resume(const BrandedId& g) override { return b_->resume(g); }
  LaneStatus pause_all() override { return b_->pause_all(); }
  LaneStatus resume_all() override { return b_->resume_all(); }
  LaneStatus set_limit(const BrandedId& g, std::uint32_t n) override { return b_->set_limit(g, n); }
  LaneStatus clear_limit(const BrandedId& g) override { return b_->clear_limit(g); }
  LaneStatus set_weight(const BrandedId& g, std::uint32_t w) override { return b_->set_weight(g, w); }
  std::uint64_t depth(const BrandedId& g) override { return b_->depth(g); }
  std::uint64_t drain(const BrandedId& g) override { return b_->drain(g); }
  MoveStatus reassign(const BrandedId& j, const BrandedId& g) override { return b_->reassign(j, g); }
  std::uint64_t tick() override { return b_->tick(); }
  Snapshot snapshot() override { return b_->snapshot(); }
  std::optional<JobInfo> job(const BrandedId& id, bool p) override { return b_->job(id, p); }
  std::vector<JobInfo> jobs(const JobFilter& f) override { return b_->jobs(f); }
  AckStatus requeue_dead(const BrandedId& id) override { return b_->requeue_dead(id); }
  std::uint64_t requeue_all_dead() override { return b_->requeue_all_dead(); }
  std::uint64_t purge_dead() override { return b_->purge_dead(); }
  std::vector<ProcessInfo> processes() override { return b_->processes(); }
  void advance_clock(std::uint64_t ms) override { b_->advance_clock(ms); }

 private:
  std::shared_ptr<Backend> b_;
};

class SteadyClock final : public WorkerClock {
 public:
  std::uint64_t now_ms() noexcept override {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
  }
};

}  // namespace

BackendFactory shared_backend(std::shared_ptr<Backend> backend) {
  if (!backend) throw std::invalid_argument("shared_backend: null backend");
  return [b = std::move(backend)]() -> std::unique_ptr<Backend> { return std::make_unique<SharedBackend>(b); };
}

std::shared_ptr<WorkerClock> steady_worker_clock() { return std::make_shared<SteadyClock>(); }

// ---- the signal hook -----------------------------------------------------------------------
//
// One per process: the handler may only touch lock-free atomics and write(2).

namespace {

std::atomic<int> g_signal_fd{-1};     // write end of the hook's self-pipe, -1 when unhooked
std::atomic<int> g_signal_count{0};   // signals seen since the hook was installed
std::atomic<bool> g_hook_taken{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

extern "C" void fairlane_worker_on_signal(int sig) {
  const int saved = errno;
  // Relaxed: the count and the fd carry nothing else to publish; the
  // installer stored the fd before sigaction(), which orders it for us.
  if (g_signal_count.fetch_add(1, std::memory_order_relaxed) > 0) {
    // Second signal: the user insists. Take the default action now (leases
    // still held then expire and are redelivered: nothing is lost).
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
  const int fd = g_signal_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const char c = 's';
    (void)!::write(fd, &c, 1);  // nonblocking: a full pipe already says "stop"
  }
  errno = saved;
}

[[noreturn]] void throw_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

void close_fd(int& fd) noexcept {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

constexpr std::uint32_t kSentinel = UINT32_MAX;  // "no more work": one per handler thread

enum Phase : int { kFree, kClaiming, kQueued, kRunning, kFinishing, kAbandoned };

struct Slot {
  Lease lease;  // written by the claimer in `claiming` only; read-only afterwards until free
  // acq_rel CASes on phase decide who acknowledges (see the top of the file).
  std::atomic<int> phase{kFree};
  // Under State::mu:
  std::uint64_t gen = 0;
  std::uint64_t claimed_ms = 0, started_ms = 0, extended_ms = 0;
  std::stop_source stop{std::nostopstate};
};

std::uint64_t relaxed_get(const std::atomic<std::uint64_t>& a) noexcept { return a.load(std::memory_order_relaxed); }
void relaxed_inc(std::atomic<std::uint64_t>& a) noexcept { a.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

struct Worker::State {
  BackendFactory factory;
  WorkerOptions o;
  Handler handler;
  std::shared_ptr<WorkerClock> clock;
  std::uint32_t max_in_flight = 0;
  std::uint32_t heartbeat_ms = 0;
  std::chrono::milliseconds supervise_every{0};

  std::unique_ptr<Slot[]> slots;
  // The claimer hands slot indexes to the handler threads: the queue's
  // enqueue/dequeue is a release/acquire pair, so the Lease the claimer
  // wrote is visible to the handler that dequeues its index.
  moodycamel::BlockingConcurrentQueue<std::uint32_t> work;

  // mu guards the slot table's timestamps, gens and stop sources, the free
  // list, the stop time and the thread bookkeeping; cv signals "a slot was
  // freed", "stop was requested" and "a thread exited".
  mutable std::mutex mu;
  std::condition_variable cv;
  std::condition_variable sup_cv;  // wakes the supervisor: a stop, or a lease freed while stopping
  std::vector<std::uint32_t> free_slots;
  std::uint64_t stop_at_ms = 0;
  bool claimer_done = false;
  int live_threads = 0;

  // Acquire/release: a thread that sees `stopping` also sees stop_at_ms
  // (both written under mu; the atomic is for lock-free reads).
  std::atomic<bool> stopping{false};
  std::atomic<bool> started{false};

  std::vector<std::unique_ptr<Backend>> backends;  // [0] claimer, [1] supervisor, [2..] handlers
  std::vector<std::thread> threads;
  std::thread signal_thread;
  std::mutex join_mu;  // one joiner at a time

  std::mutex tick_mu;  // tick() is serialised; guards tick_rng and actions
  std::mt19937_64 tick_rng;
  struct Action {
    std::uint32_t idx;
    std::uint64_t gen;
    enum What { extend, timeout, hand_back } what;
    int phase;  // the phase it was seen in
    BrandedId id, group;
    std::uint32_t attempt;
    Token token;
    RetryPolicy retry;  // the job's own, for a timeout's fail
    std::stop_source stop{std::nostopstate};  // a timeout's or hand-back's: the handler's, to request
  };
  std::vector<Action> actions;

  bool hooked = false;
  int sig_pipe[2] = {-1, -1};
  int wake_pipe[2] = {-1, -1};

  // Relaxed counters: statistics, read for display only.
  std::atomic<std::uint64_t> claimed{0}, completed{0}, retried{0}, dead{0}, timed_out{0}, handed_back{0},
      lost{0}, extended{0}, handler_exceptions{0}, backend_errors{0};
  std::atomic<std::uint32_t> in_flight{0}, busy{0};

  // ---- helpers ----

  void emit(const JobEvent& e) noexcept {
    if (!o.on_event) return;
    try {
      o.on_event(e);
    } catch (...) {
    }
  }
  JobEvent event(JobEvent::Kind k, const Lease& l) const noexcept {
    JobEvent e;
    e.kind = k;
    e.id = l.id;
    e.group = l.group;
    e.attempt = l.attempt;
    return e;
  }

  void thread_exited() {
    {
      std::lock_guard l(mu);
      --live_threads;
    }
    cv.notify_all();
    sup_cv.notify_all();  // the supervisor leaves once the others are done
  }

  // Only the handler thread that dequeued `idx` calls this.
  void free_slot(std::uint32_t idx) {
    Slot& s = slots[idx];
    {
      // [W3] under mu: free and gen++ together, so a supervisor that checks
      // gen under mu never acts on a slot reused for another job.
      std::lock_guard l(mu);
      s.phase.store(kFree, std::memory_order_release);
      ++s.gen;
      s.stop = std::stop_source(std::nostopstate);
      free_slots.push_back(idx);
      in_flight.fetch_sub(1, std::memory_order_relaxed);
    }
    cv.notify_all();
    if (stopping.load(std::memory_order_acquire)) sup_cv.notify_all();
  }

  // A read_only answer to an acknowledgement is a
  // backend error, as the ReadOnlyError the Valkey backend threw before
  // 2026-12-05 was: the keyspace became a segment's mirror while this
  // worker held the lease (the mirror writes its owner with every batch),
  // and nothing says the job was lost. The lease is left as it is.
  // Counts it; true when the answer was read_only.
  bool refused_as_read_only(bool read_only) noexcept {
    if (read_only) relaxed_inc(backend_errors);
    return read_only;
  }

  // fail() the lease and report what became of it. False when the backend
  // threw (the lease then expires and the job is redelivered).
  bool fail_lease(Backend& b, const Lease& l, std::uint64_t delay_ms, std::uint32_t max_attempts,
                  std::string_view error, bool timed_out_flag) noexcept {
    FailStatus st;
    try {
      st = b.fail(l.id, l.token, FailOptions{delay_ms, max_attempts, error});
    } catch (const std::exception&) {
      relaxed_inc(backend_errors);
      return false;
    }
    if (refused_as_read_only(st == FailStatus::read_only)) return true;
    JobEvent e = event(JobEvent::Kind::retrying, l);
    e.timed_out = timed_out_flag;
    e.error = error;
    switch (st) {
      case FailStatus::retrying:
        relaxed_inc(retried);
        e.delay_ms = delay_ms;
        break;
      case FailStatus::dead:
        relaxed_inc(dead);
        e.kind = JobEvent::Kind::dead;
        break;
      case FailStatus::stale:
      case FailStatus::gone:
      case FailStatus::corrupt:
      case FailStatus::read_only:  // (answered before the switch)
        relaxed_inc(lost);
        e = event(JobEvent::Kind::lost, l);
        break;
    }
    if (timed_out_flag && (st == FailStatus::retrying || st == FailStatus::dead)) relaxed_inc(timed_out);
    emit(e);
    return true;
  }

  // Back to its lane now with release(): no attempt is spent, the job's
  // last error is kept (docs/worker.md, "Hand-back"). False when the
  // backend threw (the lease then expires).
  bool hand_back(Backend& b, const Lease& l) noexcept {
    AckStatus st;
    try {
      st = b.release(l.id, l.token);
    } catch (const std::exception&) {
      relaxed_inc(backend_errors);
      return false;
    }
    if (refused_as_read_only(st == AckStatus::read_only)) return true;
    if (st == AckStatus::ok) {
      relaxed_inc(handed_back);
      emit(event(JobEvent::Kind::handed_back, l));
    } else {
      relaxed_inc(lost);
      emit(event(JobEvent::Kind::lost, l));
    }
    return true;
  }

  // The job's own retry policy wins, field by field, over the worker's
  // (docs/worker.md, "Retries"): a job enqueued with max_attempts 3 is
  // dead-lettered at its third failure whatever WorkerOptions says.
  std::uint32_t max_attempts_for(const Lease& l) const noexcept {
    return l.retry.max_attempts != 0 ? l.retry.max_attempts : o.max_attempts;
  }
  std::uint64_t backoff_ms(const Lease& l, std::uint32_t attempt, std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const Backoff& b = l.retry.backoff ? *l.retry.backoff : o.backoff;
    return static_cast<std::uint64_t>(b.delay(attempt, u).count());
  }

  // ---- threads ----

  void claimer_main(Backend& b) {
    for (;;) {
      std::uint32_t idx = 0;
      {
        std::unique_lock l(mu);
        cv.wait(l, [&] { return stopping.load(std::memory_order_acquire) || !free_slots.empty(); });
        if (stopping.load(std::memory_order_acquire)) break;
        idx = free_slots.back();
        free_slots.pop_back();
        slots[idx].phase.store(kClaiming, std::memory_order_relaxed);  // only this thread looks at it now
      }
      Slot& s = slots[idx];
      bool got = false;
      while (!got && !stopping.load(std::memory_order_acquire)) {
        try {
          got = b.claim_wait(s.lease, o.lease_ms, o.idle_poll);
        } catch (const std::exception&) {
          relaxed_inc(backend_errors);
          std::unique_lock l(mu);  // back off before reconnecting, but wake for a stop
          cv.wait_for(l, o.idle_poll, [&] { return stopping.load(std::memory_order_acquire); });
        }
      }
      if (!got) {
        std::lock_guard l(mu);
        s.phase.store(kFree, std::memory_order_relaxed);
        free_slots.push_back(idx);
        break;
      }
      {
        std::lock_guard l(mu);
        // Counted from the claim, not the reservation: an idle claimer
        // parked in claim_wait holds a slot but no lease (free_slot gives
        // the count back).
        in_flight.fetch_add(1, std::memory_order_relaxed);
        const std::uint64_t now = clock->now_ms();
        s.claimed_ms = s.started_ms = s.extended_ms = now;
        s.stop = std::stop_source();
        s.phase.store(kQueued, std::memory_order_release);
      }
      relaxed_inc(claimed);
      emit(event(JobEvent::Kind::claimed, s.lease));
      work.enqueue(idx);  // [W1] release: publishes the Lease; pairs with the handler's dequeue
    }
    {
      std::lock_guard l(mu);
      claimer_done = true;
    }
    cv.notify_all();
    sup_cv.notify_all();
    for (std::uint32_t i = 0; i < o.threads; ++i) work.enqueue(kSentinel);
  }

  void handler_main(Backend& b, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (;;) {
      std::uint32_t idx = 0;
      work.wait_dequeue(idx);  // [W1] acquire: the claimer's Lease is visible
      if (idx == kSentinel) break;
      Slot& s = slots[idx];
      std::stop_token token;
      bool run = false, give_back = false;
      {
        std::unique_lock l(mu);
        int ph = kQueued;
        if (stopping.load(std::memory_order_acquire)) {
          // Hand back only once our claimer has stopped, or it could claim
          // the job straight back (see wait_claimer_done).
          wait_claimer_done(l);
          give_back = s.phase.compare_exchange_strong(ph, kAbandoned, std::memory_order_acq_rel);
        } else if (s.phase.compare_exchange_strong(ph, kRunning, std::memory_order_acq_rel)) {
          run = true;
          s.started_ms = clock->now_ms();
          token = s.stop.get_token();
        }
      }
      if (give_back) hand_back(b, s.lease);
      if (!run) {  // handed back here, or given up by the supervisor while queued
        free_slot(idx);
        continue;
      }
      busy.fetch_add(1, std::memory_order_relaxed);
      Outcome out = Outcome::ok();
      try {
        Job job(s.lease, token);
        out = handler(job);
      } catch (const std::exception& e) {
        relaxed_inc(handler_exceptions);
        out = Outcome::retry(e.what());
      } catch (...) {
        relaxed_inc(handler_exceptions);
        out = Outcome::retry("handler threw a non-std exception");
      }
      busy.fetch_sub(1, std::memory_order_relaxed);
      int ph = kRunning;
      // [W2] acq_rel: running -> finishing races the supervisor's running ->
      // abandoned; exactly one wins and acknowledges. Lost to the supervisor
      // (timeout, lost lease, shutdown): it already failed or handed back the
      // lease; this result is discarded.
      if (s.phase.compare_exchange_strong(ph, kFinishing, std::memory_order_acq_rel)) acknowledge(b, s.lease, out, rng);
      free_slot(idx);
    }
    thread_exited();
  }

  void acknowledge(Backend& b, const Lease& l, const Outcome& out, std::mt19937_64& rng) noexcept {
    switch (out.kind()) {
      case Outcome::Kind::ok: {
        AckStatus st;
        try {
          st = b.complete(l.id, l.token);
        } catch (const std::exception&) {
          relaxed_inc(backend_errors);
          return;
        }
        if (refused_as_read_only(st == AckStatus::read_only)) return;
        if (st == AckStatus::ok) {
          relaxed_inc(completed);
          emit(event(JobEvent::Kind::completed, l));
        } else {
          relaxed_inc(lost);
          emit(event(JobEvent::Kind::lost, l));
        }
        return;
      }
      case Outcome::Kind::retry:
        fail_lease(b, l, backoff_ms(l, l.attempt, rng), max_attempts_for(l), out.error(), false);
        return;
      case Outcome::Kind::retry_after:
        fail_lease(b, l, static_cast<std::uint64_t>(std::max<std::int64_t>(0, out.delay().count())),
                   max_attempts_for(l), out.error(), false);
        return;
      case Outcome::Kind::dead:
        fail_lease(b, l, 0, 1, out.error(), false);
        return;
    }
  }

  // After a stop, the claimer may still be inside claim_wait (a futex wait
  // or BLPOP cannot be interrupted) for up to idle_poll. A job handed back
  // before it has left could be claimed straight back by it, costing the job
  // an attempt for nothing; so every hand-back waits for this first.
  void wait_claimer_done(std::unique_lock<std::mutex>& l) {
    cv.wait(l, [&] { return claimer_done; });
  }

  // Is any lease still held for the supervisor to look after?
  bool leases_held_locked() const {
    for (std::uint32_t i = 0; i < max_in_flight; ++i) {
      const int ph = slots[i].phase.load(std::memory_order_acquire);
      if (ph == kClaiming || ph == kQueued || ph == kRunning || ph == kFinishing) return true;
    }
    return false;
  }

  void supervisor_main() {
    for (;;) {
      tick();
      std::unique_lock l(mu);
      if (stopping.load(std::memory_order_acquire) && claimer_done && !leases_held_locked()) break;
      sup_cv.wait_for(l, supervise_every);
    }
    thread_exited();
  }

  void signal_main() {
    pollfd fds[2] = {{sig_pipe[0], POLLIN, 0}, {wake_pipe[0], POLLIN, 0}};
    for (;;) {
      const int n = ::poll(fds, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || (fds[1].revents != 0)) return;
      if (fds[0].revents != 0) {
        char buf[64];
        while (::read(sig_pipe[0], buf, sizeof buf) > 0) {
        }
        request_stop();
      }
    }
  }

  void request_stop() noexcept {
    {
      std::lock_guard l(mu);
      if (!stopping.load(std::memory_order_relaxed)) {
        stop_at_ms = clock->now_ms();
        // [W4] release: pairs with the acquire loads outside mu (claimer's
        // claim loop); under mu, the mutex orders it anyway.
        stopping.store(true, std::memory_order_release);
      }
    }
    cv.notify_all();
    sup_cv.notify_all();
  }

  std::size_t tick() {
    std::lock_guard tl(tick_mu);
    if (backends.size() < 2) return 0;  // not started
    Backend& b = *backends[1];
    const std::uint64_t now = clock->now_ms();
    const auto timeout = static_cast<std::uint64_t>(o.handler_timeout.count());
    const auto grace = static_cast<std::uint64_t>(o.shutdown_grace.count());
    actions.clear();
    std::size_t acted = 0;
    {
      std::unique_lock l(mu);
      const bool stop = stopping.load(std::memory_order_acquire);
      if (stop) wait_claimer_done(l);
      for (std::uint32_t i = 0; i < max_in_flight; ++i) {
        Slot& s = slots[i];
        int ph = s.phase.load(std::memory_order_acquire);
        if (ph != kQueued && ph != kRunning) continue;
        Action a{i, s.gen, Action::extend, ph, s.lease.id, s.lease.group, s.lease.attempt, s.lease.token, s.lease.retry};
        if (stop && (ph == kQueued || now >= stop_at_ms + grace)) {
          a.what = Action::hand_back;
        } else if (ph == kRunning && timeout != 0 && now >= s.started_ms + timeout) {
          a.what = Action::timeout;
        } else if (now >= s.extended_ms + heartbeat_ms) {
          a.what = Action::extend;
        } else {
          continue;
        }
        if (a.what != Action::extend) {
          // Given up here, before any backend call: a server that does not
          // answer holds each call below for its whole timeout, and the
          // handlers of every lease given up now are told now, not one
          // such timeout after another. Under mu every other move out of
          // queued (the handler's) is made, so the phase seen here can
          // change only by running -> finishing, which the CAS settles:
          // exactly one of us acknowledges the lease.
          // [W2] acq_rel: pairs with the handler's running -> finishing.
          if (!s.phase.compare_exchange_strong(ph, kAbandoned, std::memory_order_acq_rel)) continue;
          a.stop = s.stop;
          ++acted;
        }
        actions.push_back(a);
      }
    }
    for (Action& a : actions)
      if (a.stop.stop_possible()) a.stop.request_stop();
    // Once a call has thrown (the backend reconnected and resent, and the
    // server stayed away), the rest of this pass is not sent: each would
    // wait out the same timeouts, and a stop would wait for all of them.
    // Each call left out is counted as the backend error it would have
    // been: an extend is tried again next pass, a lease given up expires.
    bool unreachable = false;
    for (const Action& a : actions) {
      if (unreachable) {
        relaxed_inc(backend_errors);
        continue;
      }
      Lease l;  // id, group, attempt and policy are all fail/emit need
      l.id = a.id;
      l.group = a.group;
      l.attempt = a.attempt;
      l.token = a.token;
      l.retry = a.retry;
      switch (a.what) {
        case Action::extend: break;
        case Action::timeout: {
          const std::string why = "timed out after " + std::to_string(timeout) + " ms";
          unreachable = !fail_lease(b, l, backoff_ms(l, a.attempt, tick_rng), max_attempts_for(l), why, true);
          continue;
        }
        case Action::hand_back: unreachable = !hand_back(b, l); continue;
      }
      AckStatus st = AckStatus::ok;
      try {
        st = b.extend(a.id, a.token, o.lease_ms);
      } catch (const std::exception&) {
        relaxed_inc(backend_errors);
        unreachable = true;
        continue;
      }
      if (refused_as_read_only(st == AckStatus::read_only)) continue;  // the handler runs on
      if (st == AckStatus::ok) {
        std::lock_guard lk(mu);
        if (slots[a.idx].gen == a.gen) slots[a.idx].extended_ms = now;
        relaxed_inc(extended);
        ++acted;
        continue;
      }
      // Stale or gone: the lease expired and someone else has the job, or
      // the handler acknowledged it a moment ago (then the CAS fails).
      std::stop_source src(std::nostopstate);
      {
        std::lock_guard lk(mu);
        Slot& s = slots[a.idx];
        if (s.gen != a.gen) continue;  // acknowledged and reused since we looked
        int ph = s.phase.load(std::memory_order_acquire);
        if (ph != kQueued && ph != kRunning) continue;
        // [W2] acq_rel: pairs with the handler's running -> finishing.
        if (!s.phase.compare_exchange_strong(ph, kAbandoned, std::memory_order_acq_rel)) continue;
        src = s.stop;
      }
      ++acted;
      if (src.stop_possible()) src.request_stop();
      relaxed_inc(lost);
      emit(event(JobEvent::Kind::lost, l));
    }
    return acted;
  }

  // ---- the signal hook ----

  void install_hook() {
    bool expected = false;
    if (!g_hook_taken.compare_exchange_strong(expected, true))
      throw std::logic_error("fairlane::Worker: another Worker of this process holds the SIGTERM/SIGINT hook");
    hooked = true;
    if (::pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw_errno("pipe2");
    if (::pipe2(wake_pipe, O_CLOEXEC) != 0) throw_errno("pipe2");
    g_signal_count.store(0, std::memory_order_relaxed);
    g_signal_fd.store(sig_pipe[1], std::memory_order_relaxed);
    struct sigaction sa {};
    sa.sa_handler = fairlane_worker_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (::sigaction(SIGTERM, &sa, &old_term) != 0) throw_errno("sigaction");
    term_set = true;
    if (::sigaction(SIGINT, &sa, &old_int) != 0) throw_errno("sigaction");
    int_set = true;
  }

  void remove_hook() noexcept {
    if (!hooked) return;
    if (term_set) ::sigaction(SIGTERM, &old_term, nullptr);
    if (int_set) ::sigaction(SIGINT, &old_int, nullptr);
    term_set = int_set = false;
    g_signal_fd.store(-1, std::memory_order_relaxed);
    for (int& fd : sig_pipe) close_fd(fd);
    for (int& fd : wake_pipe) close_fd(fd);
    hooked = false;
    g_hook_taken.store(false);
  }

  bool term_set = false, int_set = false;
  struct sigaction old_term {}, old_int {};

  // Joins every thread; the caller holds join_mu.
  void join_all() {
    for (auto& t : threads)
      if (t.joinable()) t.join();
    if (signal_thread.joinable()) {
      const char c = 'w';
      (void)!::write(wake_pipe[1], &c, 1);
      signal_thread.join();
    }
    remove_hook();
  }
};

// ---- Worker --------------------------------------------------------------------------------

Worker::Worker(BackendFactory backends, WorkerOptions options, Handler handler) : s_(std::make_unique<State>()) {
  auto bad = [](const std::string& why) { throw std::invalid_argument("fairlane::Worker: " + why); };
  if (!backends) bad("no backend factory");
  if (!handler) bad("no handler");
  if (options.threads == 0 || options.threads > 4096) bad("threads must be 1..4096");
  if (options.lease_ms == 0) bad("lease_ms must be at least 1");
  // The ranges of a stored policy (retry.hpp): the worker's policy is what
  // its fail() calls apply, and what a job's stored one would have to be.
  if (options.max_attempts == 0 || options.max_attempts > 65535) bad("max_attempts must be 1..65535");
  const Backoff& bo = options.backoff;
  if (bo.base.count() < 0 || bo.cap.count() < 0) bad("backoff delays must not be negative");
  if (bo.base.count() > 0xFFFFFFFFLL || bo.cap.count() > 0xFFFFFFFFLL)
    bad("backoff delays must be at most 2^32-1 ms (about 49.7 days)");
  if (!(bo.factor >= 1.0 && bo.factor <= 1000.0)) bad("backoff factor must be 1..1000");
  if (!(bo.jitter >= 0.0 && bo.jitter <= 1.0)) bad("backoff jitter must be within [0, 1]");
  if (bo.kind == Backoff::Kind::exponential && bo.base > bo.cap)
    bad("an exponential backoff's base must not exceed its cap");
  if (!bo.valid()) bad("backoff out of range (retry.hpp, Backoff::valid)");
  if (options.handler_timeout.count() < 0 || options.shutdown_grace.count() < 0) bad("timeouts must not be negative");
  if (options.idle_poll.count() < 1) bad("idle_poll must be at least 1 ms");
  if (options.supervise_every.count() < 0) bad("supervise_every must not be negative");

  State& s = *s_;
  s.max_in_flight = options.max_in_flight == 0 ? options.threads : options.max_in_flight;
  if (s.max_in_flight > 65536) bad("max_in_flight must be at most 65536");
  s.heartbeat_ms = options.heartbeat_ms == 0 ? std::max<std::uint32_t>(1, options.lease_ms / 3) : options.heartbeat_ms;
  if (s.heartbeat_ms >= options.lease_ms) bad("heartbeat_ms must be shorter than lease_ms, or the lease expires between heartbeats");
  std::int64_t every = options.supervise_every.count();
  if (every == 0) {
    every = std::min<std::int64_t>(1000, s.heartbeat_ms / 4);
    if (options.handler_timeout.count() > 0) every = std::min<std::int64_t>(every, options.handler_timeout.count() / 4);
    if (options.shutdown_grace.count() > 0) every = std::min<std::int64_t>(every, options.shutdown_grace.count() / 4);
    every = std::max<std::int64_t>(1, every);
  }
  s.supervise_every = std::chrono::milliseconds(every);
  s.clock = options.clock ? options.clock : steady_worker_clock();
  s.factory = std::move(backends);
  s.handler = std::move(handler);
  s.o = std::move(options);
  s.slots = std::make_unique<Slot[]>(s.max_in_flight);
  s.free_slots.reserve(s.max_in_flight);
  for (std::uint32_t i = s.max_in_flight; i-- > 0;) s.free_slots.push_back(i);
  s.actions.reserve(s.max_in_flight);
}

Worker::~Worker() {
  request_stop();
  wait();
}

void Worker::start() {
  State& s = *s_;
  if (s.started.exchange(true)) throw std::logic_error("fairlane::Worker::start called twice");
  const std::uint64_t seed = s.o.seed != 0 ? s.o.seed : (std::uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  s.tick_rng.seed(seed + s.o.threads + 1);
  std::vector<std::unique_ptr<Backend>> made;
  for (std::uint32_t i = 0; i < s.o.threads + 2; ++i) {
    made.push_back(s.factory());
    if (!made.back()) throw std::invalid_argument("fairlane::Worker: the backend factory returned null");
    // A handle that makes no claims would leave the worker idle, for good
    // or until a process record comes free for a copy (silently on a
    // segment; on Valkey, every claim a backend error): refused here, by name.
    if (!made.back()->writable())
      throw BackendError("fairlane::Worker: " + made.back()->describe() +
                         " makes no claims through this handle: " +
                         (made.back()->segment() ? "an observer, or a copy in a forked child that found no process "
                                                   "record free (open the segment as a member in this process, or start once a record is free)"
                                                 : "the keyspace is a segment's mirror (claim through that "
                                                   "segment, or open with ValkeyOptions::force)"));
  }
  {
    std::lock_guard tl(s.tick_mu);
    s.backends = std::move(made);
  }
  try {
    if (s.o.stop_on_signals) s.install_hook();
    auto spawn = [&s](auto fn) {
      {
        std::lock_guard l(s.mu);
        ++s.live_threads;
      }
      try {
        s.threads.emplace_back(std::move(fn));
      } catch (...) {
        s.thread_exited();
        throw;
      }
    };
    // The claimer counts as live until it has queued the sentinels.
    spawn([&s] {
      s.claimer_main(*s.backends[0]);
      s.thread_exited();
    });
    for (std::uint32_t i = 0; i < s.o.threads; ++i)
      spawn([&s, i, seed] { s.handler_main(*s.backends[2 + i], seed + i); });
    if (s.o.supervisor_thread) spawn([&s] { s.supervisor_main(); });
    if (s.hooked) s.signal_thread = std::thread([&s] { s.signal_main(); });
  } catch (...) {
    s.request_stop();
    std::lock_guard jl(s.join_mu);
    // A claimer that never started cannot queue the sentinels for the
    // handlers, nor say that it is done.
    if (s.threads.empty()) {
      {
        std::lock_guard l(s.mu);
        s.claimer_done = true;
      }
      s.cv.notify_all();
      for (std::uint32_t i = 0; i < s.o.threads; ++i) s.work.enqueue(kSentinel);
    }
    s.join_all();
    throw;
  }
}

void Worker::request_stop() noexcept { s_->request_stop(); }

bool Worker::stop_requested() const noexcept { return s_->stopping.load(std::memory_order_acquire); }

void Worker::wait() {
  State& s = *s_;
  std::lock_guard jl(s.join_mu);
  s.join_all();
}

bool Worker::wait_for(std::chrono::milliseconds timeout) {
  State& s = *s_;
  {
    std::unique_lock l(s.mu);
    if (!s.cv.wait_for(l, timeout, [&] { return s.live_threads == 0; })) return false;
  }
  wait();
  return true;
}

void Worker::run() {
  start();
  wait();
}

std::size_t Worker::tick() { return s_->tick(); }

WorkerStats Worker::stats() const noexcept {
  const State& s = *s_;
  WorkerStats w;
  w.claimed = relaxed_get(s.claimed);
  w.completed = relaxed_get(s.completed);
  w.retried = relaxed_get(s.retried);
  w.dead = relaxed_get(s.dead);
  w.timed_out = relaxed_get(s.timed_out);
  w.handed_back = relaxed_get(s.handed_back);
  w.lost = relaxed_get(s.lost);
  w.extended = relaxed_get(s.extended);
  w.handler_exceptions = relaxed_get(s.handler_exceptions);
  w.backend_errors = relaxed_get(s.backend_errors);
  w.in_flight = s.in_flight.load(std::memory_order_relaxed);
  w.busy_threads = s.busy.load(std::memory_order_relaxed);
  return w;
}

}  // namespace fairlane
