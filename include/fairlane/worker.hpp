// fairlane::Worker: the consumer runtime. Runs a handler on N threads of one
// process against a Backend (the segment or Valkey), and does what every
// production consumer otherwise writes by hand: parks when idle, heartbeats
// the leases of slow jobs, completes on success, retries on failure with a
// backoff policy, dead-letters after the last attempt, gives up on a handler
// that runs past its timeout, and shuts down gracefully, handing back the
// leases it will not finish so another consumer can claim them at once.
//
// Threads of one Worker (see docs/worker.md):
//
//   claimer      1   reserves an in-flight slot, claim_wait()s into it, hands
//                    the slot index to the handlers through a moodycamel
//                    BlockingConcurrentQueue. Never more than max_in_flight
//                    leases are held at once.
//   handlers     N   run the handler, then complete/fail with their own backend.
//   supervisor   1   every `supervise_every`: extends leases (heartbeat), gives
//                    up on timed-out handlers, hands back leases on shutdown.
//                    Optional: with supervisor_thread = false the owner calls
//                    tick() (tests drive it with a ManualClock).
//   signals      0/1 with stop_on_signals: turns SIGTERM/SIGINT into
//                    request_stop() through a self-pipe.
//
// Each thread that talks to the queue gets its own Backend from the factory
// (N + 2 backends), because a Valkey connection must not be shared between
// threads. The segment backend is thread-safe: shared_backend() makes a
// factory that hands every thread the same one.
//
// Delivery stays at-least-once. A handler that outlives its lease (timed
// out, handed back at shutdown, or its heartbeat came too late) may run
// while another consumer runs the same job; its result is then discarded.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include "fairlane/backend.hpp"
#include "fairlane/queue.hpp"
#include "fairlane/retry.hpp"

namespace fairlane {

// Makes one backend per calling thread. Called by start() on the thread that
// calls start(), N + 2 times; an exception it throws leaves start().
using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// A factory that hands out the one thread-safe backend to every thread (the
// segment's: Queue is safe to call from any thread). Do not use it for Valkey.
BackendFactory shared_backend(std::shared_ptr<Backend> backend);

// The worker's sense of time, in milliseconds: heartbeats, handler timeouts
// and the shutdown deadline are measured on it. Lease deadlines themselves
// are on the backend's clock. now_ms must be thread-safe and monotonic.
class WorkerClock {
 public:
  virtual ~WorkerClock() = default;
  virtual std::uint64_t now_ms() noexcept = 0;
};

// std::chrono::steady_clock. The default.
std::shared_ptr<WorkerClock> steady_worker_clock();

// A clock that moves only when told to: for tests (thread-safe, lock-free).
class ManualClock final : public WorkerClock {
 public:
  explicit ManualClock(std::uint64_t start_ms = 0) noexcept : ms_(start_ms) {}
  std::uint64_t now_ms() noexcept override { return ms_.load(std::memory_order_relaxed); }
  void advance(std::chrono::milliseconds d) noexcept {
    ms_.fetch_add(static_cast<std::uint64_t>(d.count()), std::memory_order_relaxed);
  }

 private:
  // Relaxed: the value carries no other data; a reader that sees it late
  // sees time a moment earlier, which the worker tolerates by design.
  std::atomic<std::uint64_t> ms_;
};

// Backoff (the delay before a retry) is declared in retry.hpp.

// What the handler says happened. A handler that throws is treated as
// retry(what()).
class Outcome {
 public:
  enum class Kind { ok, retry, retry_after, dead };

  static Outcome ok() { return Outcome(Kind::ok, {}, {}); }
  // Retry after the worker's backoff (dead-letter once max_attempts is reached).
  static Outcome retry(std::string error = {}) { return Outcome(Kind::retry, {}, std::move(error)); }
  // Retry after exactly `delay` (overrides the policy for this job; still
  // dead-letters once max_attempts is reached).
  static Outcome retry_after(std::chrono::milliseconds delay, std::string error = {}) {
    return Outcome(Kind::retry_after, delay, std::move(error));
  }
  // Do not retry: dead-letter now, whatever attempt this is.
  static Outcome dead(std::string error = {}) { return Outcome(Kind::dead, {}, std::move(error)); }

  Kind kind() const noexcept { return kind_; }
  std::chrono::milliseconds delay() const noexcept { return delay_; }
  const std::string& error() const noexcept { return error_; }

 private:
  Outcome(Kind k, std::chrono::milliseconds d, std::string e) : kind_(k), delay_(d), error_(std::move(e)) {}
  Kind kind_;
  std::chrono::milliseconds delay_;
  std::string error_;
};

// The job a handler runs. Valid for the duration of the handler call only.
class Job {
 public:
  Job(const Lease& lease, std::stop_token stop) noexcept : lease_(lease), stop_(std::move(stop)) {}
  const BrandedId& id() const noexcept { return lease_.id; }
  const BrandedId& group() const noexcept { return lease_.group; }
  std::uint32_t attempt() const noexcept { return lease_.attempt; }  // 1 on the first delivery
  Token token() const noexcept { return lease_.token; }
  std::string_view payload() const noexcept { return lease_.payload; }
  const Lease& lease() const noexcept { return lease_; }

  // Requested when the worker has given this job up: its timeout passed, its
  // lease was lost, or shutdown handed it back. The handler should return
  // soon; whatever it returns is then ignored (the lease is no longer ours).
  // C++ cannot stop a thread from outside: this is the only lever.
  const std::stop_token& stop_token() const noexcept { return stop_; }
  bool stop_requested() const noexcept { return stop_.stop_requested(); }

 private:
  const Lease& lease_;
  std::stop_token stop_;
};

// Called on one of the worker's handler threads, concurrently with itself.
using Handler = std::function<Outcome(Job&)>;

// What the worker did with a job, for logs and metrics (WorkerOptions::on_event).
struct JobEvent {
  enum class Kind {
    claimed,      // leased; waits for a handler thread
    completed,    // handler said ok; complete() succeeded
    retrying,     // failed (or timed out); scheduled again after delay_ms
    dead,         // failed on its last attempt (or Outcome::dead): dead-lettered
    handed_back,  // shutdown: returned to its lane at once, not run (further)
    lost,         // the lease was no longer ours (expired and reclaimed): nothing acknowledged
  };
  Kind kind = Kind::claimed;
  BrandedId id;
  BrandedId group;
  std::uint32_t attempt = 0;
  std::uint64_t delay_ms = 0;     // retrying: the backoff chosen
  bool timed_out = false;         // retrying/dead because the handler ran past handler_timeout
  std::string_view error;         // retrying/dead: the error given to fail(), whole; the job keeps
                                  // its first 48 bytes on a segment, 1,024 on Valkey
};
std::string_view to_string(JobEvent::Kind k) noexcept;

struct WorkerOptions {
  std::uint32_t threads = 1;                // handler threads
  std::uint32_t max_in_flight = 0;          // leases held at once (queued + running); 0: = threads
  std::uint32_t lease_ms = 30000;           // lease length of a claim and of each heartbeat
  std::uint32_t heartbeat_ms = 0;           // extend a lease this long after the last; 0: lease_ms / 3
  std::uint32_t max_attempts = 5;           // dead-letter when an attempt numbered this fails (1..65535)
  Backoff backoff{};                        // exponential 1 s .. 5 min, no jitter; must be valid()
  std::chrono::milliseconds handler_timeout{0};   // 0: none
  std::chrono::milliseconds shutdown_grace{10000};  // in-flight handlers may finish within this
  std::chrono::milliseconds idle_poll{250};       // claim_wait timeout: how soon an idle claimer sees a stop
  // Supervisor period; 0: min(heartbeat/4, handler_timeout/4, shutdown_grace/4, 1 s), at least 1 ms
  // (a timeout or grace of 0 takes no part), so a timeout or the grace's end is acted on within a
  // quarter of it.
  std::chrono::milliseconds supervise_every{0};
  bool supervisor_thread = true;            // false: call tick() yourself
  bool stop_on_signals = false;             // SIGTERM/SIGINT -> request_stop(); a second one kills
  std::shared_ptr<WorkerClock> clock;       // null: steady_worker_clock()
  std::uint64_t seed = 0;                   // jitter RNG seed; 0: from std::random_device
  // Called from worker threads, concurrently; must be thread-safe. Exceptions
  // it throws are swallowed. It may call request_stop(); it must not call
  // tick(), wait() or wait_for() (they would wait for the calling thread).
  std::function<void(const JobEvent&)> on_event;
};

struct WorkerStats {
  std::uint64_t claimed = 0, completed = 0, retried = 0, dead = 0;
  std::uint64_t timed_out = 0;           // included in retried/dead
  std::uint64_t handed_back = 0, lost = 0;
  std::uint64_t extended = 0;            // successful heartbeats
  std::uint64_t handler_exceptions = 0;  // handlers that threw; included in retried/dead when the lease
                                         // was still the worker's (a given-up handler's throw is not)
  std::uint64_t backend_errors = 0;      // BackendError thrown by a backend call, caught, and read_only
                                         // answers to acknowledgements (a keyspace that became a mirror's),
                                         // and the calls a supervisor pass did not send after one threw
  std::uint32_t in_flight = 0;           // leases held right now (queued + running)
  std::uint32_t busy_threads = 0;        // handler threads inside the handler right now (given-up ones included)
};

class Worker {
 public:
  // Does not start anything. Throws std::invalid_argument for options out of
  // range (threads 0, lease_ms 0, max_attempts outside 1..65535, a backoff
  // that is not valid(): an exponential one with base > cap, jitter outside
  // [0, 1], factor outside 1..1000, delays over 2^32-1 ms; ...).
  Worker(BackendFactory backends, WorkerOptions options, Handler handler);
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // request_stop(), then wait(): blocks until every handler has returned.
  ~Worker();

  // Makes the backends (on this thread) and starts the threads. Call once.
  // Throws what the factory throws; BackendError when a backend the factory
  // made takes no claims (Backend::writable() is false: an observer's or an
  // unattached copy's segment handle, a mirror's Valkey keyspace; one that
  // becomes a mirror's later makes its claims backend errors);
  // std::system_error when a thread or pipe cannot be made;
  // std::logic_error when called twice or when another live Worker of this
  // process already holds the signal hook. On a throw nothing keeps running.
  void start();

  // Stop claiming; leases not yet started are handed back at once; running
  // handlers may finish within shutdown_grace, after which their leases are
  // handed back too (their stop_token is requested, every one before the
  // first hand-back is sent). Every hand-back waits until the claimer has
  // left its current claim_wait (at most idle_poll; on a Valkey server that
  // does not answer, until that call gives up), so this worker never claims
  // back a job it has just handed back. When a hand-back throws (the server
  // is down or does not answer), the supervisor sends no more in that pass:
  // those leases expire, and each counts as a backend error.
  // Thread-safe, non-blocking, idempotent, callable from a handler or
  // on_event. Not async-signal-safe: use stop_on_signals for signals.
  void request_stop() noexcept;
  bool stop_requested() const noexcept;

  // Blocks until every worker thread has exited: after request_stop() (or a
  // signal) and the drain. A handler that never returns keeps this blocked;
  // its lease was handed back at the end of the grace, so a process that
  // must exit anyway can call std::_Exit() without losing a job. Not from a
  // handler or on_event (it would wait for itself).
  void wait();
  // As wait(), for at most `timeout` of real time. True when every thread
  // has exited (and been joined).
  bool wait_for(std::chrono::milliseconds timeout);
  // start(), then wait(): the body of a consumer service's main().
  void run();

  // One supervisor pass now: heartbeats that are due, handler timeouts,
  // shutdown hand-backs. The stop tokens of the handlers it gives up are
  // requested before it calls the backend; after a call that throws it
  // makes no more (counted as backend errors; a heartbeat is tried again
  // next pass). Thread-safe (serialised with the supervisor
  // thread); blocking for the backend calls it makes and, once a stop was
  // requested, until the claimer has stopped (at most idle_poll plus one
  // claim). Returns how many leases it acted on. Meant for
  // supervisor_thread = false (tests); a no-op before start().
  std::size_t tick();

  // Thread-safe, lock-free reads of relaxed counters: a consistent picture
  // only when the worker is quiescent.
  WorkerStats stats() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace fairlane
