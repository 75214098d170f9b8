// One interface for every system the harness measures (after moodycamel's
// benchmarks, which wrap each competitor the same way).
//
// Lifecycle of one run of one peer:
//
//   orchestrator:  setup() ---------------------------------------- teardown()
//   each worker process:      attach()  producer_loop() | consumer_loop()  detach()
//
// setup() creates the queue (or starts the server) and may leave a line of
// text in `info` for the workers (a port, a segment name). A worker process
// constructs the peer by name, calls attach() once (threads of one worker
// process share what it opened), then runs one loop per producer or consumer
// it hosts. The loops hand the harness three small callables through
// WorkerCtx::produce / WorkerCtx::consume, which own the pacing, the stamps,
// the timing and the records, so every peer is measured by the same code.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "control.hpp"
#include "options.hpp"
#include "proc.hpp"
#include "workload.hpp"

namespace fairlane::bench {

class WorkerCtx {
 public:
  WorkerCtx(Control& ctl, Role role, std::uint32_t index)
      : ctl_(ctl), h_(ctl.header()), p_(ctl.params()), role_(role), index_(index),
        slot_(ctl.slot(ctl.slot_index(role, index))) {}

  const Params& params() const noexcept { return p_; }
  Role role() const noexcept { return role_; }
  std::uint32_t index() const noexcept { return index_; }
  std::string_view info() const noexcept { return h_.info; }
  // "key=value" pairs in info, separated by spaces.
  std::string info_value(std::string_view key) const;

  // Report a failure: the worker's slot says why, and the run stops.
  void fail(std::string_view why) noexcept;
  bool failed() const noexcept { return h_.abort.load(std::memory_order_relaxed) != 0; }

  // The producer side. enq(lane, data, len) -> bool: true when admitted,
  // false when the queue is full (the harness backs off and offers the same
  // job again). flush() -> void: make sure every job enq accepted is in the
  // queue (a pipelining peer sends what it buffered). Returns after the
  // fill and, for producer 0, after the wake-up rounds.
  template <class Enq, class Flush>
  void produce(Enq&& enq, Flush&& flush);

  // The consumer side.
  //   claim()          -> const char*: the claimed job's payload, nullptr if none
  //   complete()       -> void: acknowledge the job claim() just returned
  //   wait(timeout_ms) -> const char*: as claim, but parks until a job comes
  //                       or the timeout passes (the peer's blocking path)
  template <class Claim, class Complete, class Wait>
  void consume(Claim&& claim, Complete&& complete, Wait&& wait);

  // Batch mode (Mode::batch), for peers with a batch API (Peer::supports_batch).
  //   enq_many(const std::uint32_t* lanes, n, data, len) -> bool: admit n jobs,
  //       job k into lane lanes[k], all of them (false: a hard error, reported)
  //   claim_many() -> std::size_t: claim up to params().batch jobs, how many
  //   complete_many(n) -> void: acknowledge the n jobs claim_many just returned
  // Round 0 and 1 use enq / claim / complete, round 2 the batch calls.
  template <class Enq, class EnqMany, class Flush>
  void produce_batch(Enq&& enq, EnqMany&& enq_many, Flush&& flush);
  template <class Claim, class Complete, class ClaimMany, class CompleteMany>
  void consume_batch(Claim&& claim, Complete&& complete, ClaimMany&& claim_many, CompleteMany&& complete_many);

  std::uint32_t phase() const noexcept { return h_.phase.load(std::memory_order_relaxed); }

 private:
  std::uint64_t backlog() const noexcept;
  // The bare flow (Mode::bare): produce() and consume() hand over to these.
  template <class Enq, class Flush>
  void produce_bare(Enq&& enq, Flush&& flush);
  template <class Claim, class Complete>
  void consume_bare(Claim&& claim, Complete&& complete);
  void wait_round(std::uint32_t state) const noexcept {
    while (h_.round_state.load(std::memory_order_acquire) < state && !failed()) sleep_ns(20'000);
  }
  static void backoff(std::uint32_t& spins) noexcept {
    if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
  }

  Control& ctl_;
  ControlHeader& h_;
  const Params& p_;
  Role role_;
  std::uint32_t index_;
  WorkerSlot& slot_;
};

class Peer {
 public:
  virtual ~Peer() = default;

  virtual std::string_view name() const noexcept = 0;
  // One line: what a claim+complete cycle costs in this peer.
  virtual std::string_view what() const noexcept = 0;
  virtual bool supports(Topology t) const noexcept { (void)t; return true; }
  // Batch calls (enqueue_batch, claim_batch, complete_batch): Mode::batch.
  virtual bool supports_batch() const noexcept { return false; }
  virtual Topology natural_topology() const noexcept { return Topology::processes; }
  // Empty when the peer can run here; else why not (the run is skipped).
  virtual std::string unavailable() const { return {}; }
  // Consumer counts to try; the best throughput is reported. Empty: just the
  // configured count.
  virtual std::vector<std::uint32_t> consumer_sweep() const { return {}; }

  // Orchestrator, before any worker starts.
  virtual bool setup(const Params& p, std::string& info, std::string& error) = 0;
  // Each worker process, once, before its loops.
  virtual bool attach(const Params& p, std::string_view info, std::string& error) {
    (void)p; (void)info; (void)error;
    return true;
  }
  virtual void producer_loop(WorkerCtx& ctx) = 0;
  virtual void consumer_loop(WorkerCtx& ctx) = 0;
  // Each worker process, after its loops.
  virtual void detach() {}
  // Orchestrator, after every worker has exited. Must be safe to call twice.
  virtual void teardown() = 0;

  // Processes the peer started itself (a server), for the memory report.
  virtual std::vector<pid_t> server_pids() const { return {}; }
  // Bytes of shared memory the peer maps (0 if none or unknown).
  virtual std::uint64_t shared_bytes() const { return 0; }
};

struct PeerEnv {
  std::string redis_server;
  std::vector<std::uint32_t> valkey_consumers;
};

// Peer factory by name; nullptr for an unknown name.
std::unique_ptr<Peer> make_peer(std::string_view name, const PeerEnv& env);
std::vector<std::string> peer_names();

// The individual peers (one .cpp each).
std::unique_ptr<Peer> make_fairlane_peer();
std::unique_ptr<Peer> make_mutex_shm_peer();
std::unique_ptr<Peer> make_boost_mq_peer();
std::unique_ptr<Peer> make_moodycamel_peer();
std::unique_ptr<Peer> make_valkey_peer(const PeerEnv& env);

// ---------------------------------------------------------------------------
// The loops every peer runs, inline so the peer's callables inline into them.

template <class Enq, class Flush>
void WorkerCtx::produce(Enq&& enq, Flush&& flush) {
  if (p_.mode == Mode::bare) return produce_bare(enq, flush);
  std::vector<char> buf(p_.payload, char('a' + index_ % 26));
  LanePicker pick(p_.lanes, p_.skew, p_.seed * 0x9e3779b97f4a7c15ULL + index_ + 1);
  std::uint64_t produced = 0, measured = 0, full = 0;
  std::uint32_t spins = 0;
  std::uint64_t* admitted = ctl_.admitted(index_);
  const std::uint64_t admit_cap = h_.admit_cap;
  std::uint64_t admit_first = ~std::uint64_t(0), admit_len = 0;

  // One job: pick its lane, stamp it, offer it until taken. False when
  // keep_going() says to stop first.
  auto offer = [&](std::uint32_t ph, auto&& keep_going) -> bool {
    const std::uint32_t lane = pick.next();
    const std::uint64_t t = now_ns();
    // The previous job was surely in the queue by now (see control.hpp).
    if (admit_len < admit_cap && produced > admit_first) admitted[admit_len++] = t;
    if (ph == kMeasure && admit_first == ~std::uint64_t(0)) admit_first = produced;
    write_stamp(buf.data(), Stamp{t, lane, make_tag(index_, produced)});
    while (!enq(lane, buf.data(), std::uint32_t(buf.size()))) {
      ++full;
      if (!keep_going()) return false;
      backoff(spins);
    }
    spins = 0;
    ++produced;
    if ((produced & 7) == 0) slot_.count.store(produced, std::memory_order_relaxed);
    return true;
  };
  // Hold enqueued-but-unclaimed under cap. Checked every 16 jobs: the cap is
  // approximate by (producers x 16), and reading every worker's counter line
  // each time would cost more than some enqueues.
  auto room = [&](std::uint64_t cap, auto&& keep_going) -> bool {
    if ((produced & 15) != 0) return true;
    while (backlog() >= cap) {
      if (!keep_going()) return false;
      backoff(spins);
    }
    spins = 0;
    return true;
  };

  // Flow (kWarmup, kMeasure).
  for (;;) {
    const std::uint32_t ph = phase();
    if (ph >= kRounds || failed()) break;
    auto same_phase = [&] { return phase() == ph && !failed(); };
    if (!room(p_.backlog, same_phase)) continue;
    if (!offer(ph, same_phase)) continue;
    if (ph == kMeasure) ++measured;
  }
  flush();
  slot_.measured = measured;

  // Fills: up to drain_jobs enqueued-but-unclaimed, until the drain starts.
  const std::uint32_t rounds = p_.drain_rounds + p_.fair_round;
  for (std::uint32_t r = 0; r < rounds && !failed(); ++r) {
    while (h_.round_state.load(std::memory_order_acquire) < 2 * r && !failed()) sleep_ns(20'000);
    auto filling = [&] { return h_.round_state.load(std::memory_order_relaxed) == 2 * r && !failed(); };
    while (filling()) {
      if (!room(p_.drain_jobs, filling)) break;
      if (!offer(kRounds, filling)) break;
    }
    flush();
    slot_.count.store(produced, std::memory_order_relaxed);
    h_.fill_done.fetch_add(1, std::memory_order_release);  // pairs with the consumers' acquire
  }
  if (admit_len < admit_cap && produced > admit_first) admitted[admit_len++] = now_ns();
  slot_.admit_first = admit_first;
  slot_.admit_len = admit_len;
  slot_.count.store(produced, std::memory_order_relaxed);
  slot_.full_retries = full;
  h_.producers_stopped.fetch_add(1, std::memory_order_release);  // pairs with the orchestrator's acquire

  // Wake-up rounds: wait until consumer 0 says it is about to park, give it
  // time to get there, then stamp and enqueue one job.
  if (index_ == 0 && p_.wake_rounds > 0 && !failed()) {
    while (phase() < kWake && !failed()) sleep_ns(100'000);
    for (std::uint32_t k = 1; k <= p_.wake_rounds; ++k) {
      std::uint64_t give_up = now_ns() + 5'000'000'000ULL;
      while (h_.wake_parked.load(std::memory_order_acquire) < k) {
        if (phase() >= kDone || failed() || now_ns() > give_up) goto out;
        sleep_ns(20'000);
      }
      sleep_ns(300'000);  // consumer 0 is in its futex / condvar / BLPOP by now
      const std::uint32_t lane = k % p_.lanes;
      write_stamp(buf.data(), Stamp{now_ns(), lane, make_tag(index_, produced + k)});
      while (!enq(lane, buf.data(), std::uint32_t(buf.size()))) {
        if (phase() >= kDone || failed()) goto out;
        sched_yield();
      }
      flush();
    }
  out:;
  }
}

template <class Claim, class Complete, class Wait>
void WorkerCtx::consume(Claim&& claim, Complete&& complete, Wait&& wait) {
  if (p_.mode == Mode::bare) return consume_bare(claim, complete);
  Histogram claim_h, e2c_h, wake_h;
  TraceRec* trace = ctl_.trace(index_);
  const std::uint64_t cap = p_.trace_cap;
  const std::uint32_t sample = p_.sample;
  std::uint64_t n = 0, measured = 0, empty = 0, tlen = 0, last_t = 0;
  std::uint32_t until_sample = 0, spins = 0;

  // Flow: claim what the producers send, timing one claim in `sample`.
  for (;;) {
    const std::uint32_t ph = phase();
    if (ph >= kRounds || failed()) break;
    const bool timed = until_sample == 0;
    const std::uint64_t t0 = timed ? now_ns() : last_t;
    const char* payload = claim();
    if (!payload) {
      ++empty;
      backoff(spins);
      continue;
    }
    spins = 0;
    ++n;
    if (ph == kMeasure) {
      const Stamp s = read_stamp(payload);
      if (timed) {
        const std::uint64_t t1 = now_ns();
        claim_h.record(t1 - t0);
        e2c_h.record(t1 > s.enq_ns ? t1 - s.enq_ns : 0);
        last_t = t0;
      }
      // The claim's start, not its return: a consumer preempted between the
      // two would otherwise stretch its lane's backlog past the claim.
      if (tlen < cap) trace[tlen++] = TraceRec{s.lane, s.tag, s.enq_ns, t0};
      ++measured;
    }
    until_sample = timed ? sample - 1 : until_sample - 1;
    complete();
    if ((n & 7) == 0) slot_.count.store(n, std::memory_order_relaxed);
  }
  slot_.count.store(n, std::memory_order_relaxed);
  slot_.measured = measured;
  slot_.empty_polls = empty;
  slot_.trace_len = tlen;
  slot_.claim_ns = claim_h;
  slot_.e2c_ns = e2c_h;

  // Drains: claim+complete alone until the queue is empty and stays empty
  // once every producer finished its fill. No clock in the loop: the end is
  // the start of the final run of empty claims.
  const std::uint32_t rounds = p_.drain_rounds + p_.fair_round;
  TraceRec* dtrace = ctl_.drain_trace(index_);
  std::uint64_t dlen = 0;
  for (std::uint32_t r = 0; r < rounds && !failed(); ++r) {
    const bool traced = r == p_.drain_rounds;
    while (h_.round_state.load(std::memory_order_acquire) < 2 * r + 1 && !failed()) sleep_ns(20'000);
    const std::uint64_t d0 = now_ns(), c0 = thread_cpu_ns(), f0 = thread_minor_faults();
    std::uint64_t d1 = d0, c1 = c0, f1 = f0, drained = 0;
    bool streak = false;
    for (int empties = 0; !failed();) {
      const std::uint64_t t0 = traced ? now_ns() : 0;  // before the claim, as in the flow
      if (const char* payload = claim()) {
        if (traced && dlen < cap) {
          const Stamp s = read_stamp(payload);
          dtrace[dlen++] = TraceRec{s.lane, s.tag, s.enq_ns, t0};
        }
        complete();
        if ((++drained & 63) == 0) slot_.count.store(n + drained, std::memory_order_relaxed);
        streak = false;
        continue;
      }
      if (!streak) {
        d1 = now_ns();
        c1 = thread_cpu_ns();
        f1 = thread_minor_faults();
        streak = true;
        empties = 0;
      }
      if (h_.fill_done.load(std::memory_order_acquire) >= p_.producers * (r + 1) && ++empties >= 3) break;
      sched_yield();
    }
    slot_.drain_trace_len = dlen;
    slot_.drained[r] = drained;
    slot_.drain_t0[r] = d0;
    slot_.drain_t1[r] = d1;
    slot_.drain_cpu[r] = c1 - c0;
    slot_.drain_faults[r] = f1 - f0;
    n += drained;
    slot_.count.store(n, std::memory_order_relaxed);
    h_.drain_done.fetch_add(1, std::memory_order_release);  // pairs with the orchestrator's acquire
  }

  if (index_ == 0 && p_.wake_rounds > 0 && !failed()) {
    while (phase() < kWake && !failed()) sleep_ns(50'000);
    // Whatever is left (the flow's backlog when there were no drains).
    for (int empties = 0; empties < 3 && !failed();) {
      if (claim()) { complete(); empties = 0; }
      else { ++empties; sched_yield(); }
    }
    for (std::uint32_t k = 1; k <= p_.wake_rounds && !failed(); ++k) {
      h_.wake_parked.store(k, std::memory_order_release);  // pairs with producer 0's acquire
      const char* payload = nullptr;
      int waits = 0;
      while (!(payload = wait(100))) {
        if (phase() >= kDone || failed() || ++waits > 50) break;
      }
      if (!payload) { ++slot_.wake_timeouts; break; }
      const std::uint64_t t = now_ns();
      const Stamp s = read_stamp(payload);
      wake_h.record(t > s.enq_ns ? t - s.enq_ns : 0);
      complete();
    }
  }
  slot_.wake_ns = wake_h;
}

// ---------------------------------------------------------------------------
// The bare flow: each producer sends bare_jobs jobs, lanes in turn, as fast
// as the queue takes them; the consumers claim and complete until every job
// is through. Nothing is timed per operation and nothing is stamped: a clock
// read at the start and at the end of each worker, a relaxed store of its
// count every 1,024 jobs (for the orchestrator's watch), and a relaxed load
// of the abort word only when the queue is full or empty.

template <class Enq, class Flush>
void WorkerCtx::produce_bare(Enq&& enq, Flush&& flush) {
  std::vector<char> buf(p_.payload, char('a' + index_ % 26));
  const std::uint64_t n = p_.bare_jobs;
  const std::uint32_t lanes = p_.lanes, len = std::uint32_t(buf.size());
  std::uint32_t lane = index_ % lanes, spins = 0;
  std::uint64_t full = 0, k = 0;
  const std::uint64_t c0 = thread_cpu_ns(), t0 = now_ns();
  for (; k < n; ++k) {
    while (!enq(lane, buf.data(), len)) {
      ++full;
      if (failed()) goto out;
      backoff(spins);
    }
    spins = 0;
    if (++lane == lanes) lane = 0;
    if ((k & 1023) == 1023) slot_.count.store(k + 1, std::memory_order_relaxed);
  }
  flush();
out:
  slot_.bare_t1 = now_ns();
  slot_.bare_cpu = thread_cpu_ns() - c0;
  slot_.bare_t0 = t0;
  slot_.bare_n = k;
  slot_.full_retries = full;
  slot_.count.store(k, std::memory_order_relaxed);
  h_.producers_stopped.fetch_add(1, std::memory_order_release);  // pairs with the consumers' acquire
}

template <class Claim, class Complete>
void WorkerCtx::consume_bare(Claim&& claim, Complete&& complete) {
  const std::uint64_t total = p_.bare_jobs * p_.producers;
  const bool alone = p_.consumers == 1;
  std::uint64_t n = 0, empty = 0, t1 = 0;
  std::uint32_t spins = 0;
  bool producers_done = false;
  int empties = 0;
  const std::uint64_t c0 = thread_cpu_ns(), t0 = now_ns();
  const std::uint64_t work_ns = p_.bare_work_ns;
  for (;;) {
    if (claim()) {
      if (work_ns != 0) {
        const std::uint64_t until = now_ns() + work_ns;
        while (now_ns() < until) {
        }
      }
      complete();
      ++n;
      spins = 0;
      empties = 0;
      if ((n & 1023) == 0) slot_.count.store(n, std::memory_order_relaxed);
      if (alone && n == total) { t1 = now_ns(); break; }
      continue;
    }
    ++empty;
    if (failed()) break;
    if (producers_done) {
      // Every job was admitted before the producers said they were done, so
      // an empty queue now is empty for good (three looks, for peers whose
      // claim can come back empty while a busy lane is skipped).
      if (empties == 0) t1 = now_ns();
      if (++empties >= 3) break;
      sched_yield();
      continue;
    }
    // acquire: pairs with the producers' release; their jobs are all in.
    if (h_.producers_stopped.load(std::memory_order_acquire) >= p_.producers) { producers_done = true; continue; }
    backoff(spins);
  }
  if (t1 == 0) t1 = now_ns();
  slot_.bare_t0 = t0;
  slot_.bare_t1 = t1;
  slot_.bare_cpu = thread_cpu_ns() - c0;
  slot_.bare_n = n;
  slot_.empty_polls = empty;
  slot_.count.store(n, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// Batch mode: kBatchRounds fills and drains of drain_jobs jobs (lanes in
// turn), producers alone then consumers alone, single calls then batch calls.

template <class Enq, class EnqMany, class Flush>
void WorkerCtx::produce_batch(Enq&& enq, EnqMany&& enq_many, Flush&& flush) {
  std::vector<char> buf(p_.payload, char('a' + index_ % 26));
  const std::uint32_t lanes = p_.lanes, len = std::uint32_t(buf.size()), b = p_.batch;
  const std::uint64_t jobs = (p_.drain_jobs + p_.producers - 1) / p_.producers;
  std::vector<std::uint32_t> lane_of(b);
  std::uint32_t lane = index_ % lanes, spins = 0;
  for (std::uint32_t r = 0; r < kBatchRounds && !failed(); ++r) {
    wait_round(2 * r + 1);
    const bool batched = r + 1 == kBatchRounds;
    const std::uint64_t t0 = now_ns();
    std::uint64_t k = 0;
    if (!batched) {
      for (; k < jobs && !failed(); ++k) {
        while (!enq(lane, buf.data(), len)) {
          if (failed()) break;
          backoff(spins);
        }
        if (++lane == lanes) lane = 0;
      }
    } else {
      while (k < jobs && !failed()) {
        const std::uint32_t m = std::uint32_t(std::min<std::uint64_t>(b, jobs - k));
        for (std::uint32_t i = 0; i < m; ++i) {
          lane_of[i] = lane;
          if (++lane == lanes) lane = 0;
        }
        if (!enq_many(lane_of.data(), m, buf.data(), len)) break;
        k += m;
      }
    }
    flush();
    slot_.fill_t0[r] = t0;
    slot_.fill_t1[r] = now_ns();
    slot_.fill_n[r] = k;
    slot_.count.fetch_add(k, std::memory_order_relaxed);
    h_.fill_done.fetch_add(1, std::memory_order_release);  // pairs with the orchestrator's acquire
  }
  h_.producers_stopped.fetch_add(1, std::memory_order_release);
}

template <class Claim, class Complete, class ClaimMany, class CompleteMany>
void WorkerCtx::consume_batch(Claim&& claim, Complete&& complete, ClaimMany&& claim_many,
                              CompleteMany&& complete_many) {
  for (std::uint32_t r = 0; r < kBatchRounds && !failed(); ++r) {
    wait_round(2 * r + 2);
    const bool batched = r + 1 == kBatchRounds;
    std::uint64_t drained = 0, in_claim = 0, in_complete = 0, d1 = 0;
    const std::uint64_t d0 = now_ns();
    for (int empties = 0; !failed();) {
      if (!batched) {
        if (claim()) {
          complete();
          ++drained;
          empties = 0;
          continue;
        }
      } else {
        const std::uint64_t a = now_ns();
        const std::size_t got = claim_many();
        const std::uint64_t b = now_ns();
        if (got > 0) {
          complete_many(got);
          const std::uint64_t c = now_ns();
          in_claim += b - a;
          in_complete += c - b;
          drained += got;
          empties = 0;
          continue;
        }
      }
      // The fill was over before the drain began: empty is the end (three
      // looks, as in the flow drains).
      if (empties == 0) d1 = now_ns();
      if (++empties >= 3) break;
      sched_yield();
    }
    slot_.drained[r] = drained;
    slot_.drain_t0[r] = d0;
    slot_.drain_t1[r] = d1 ? d1 : now_ns();
    slot_.claim_call_ns[r] = in_claim;
    slot_.complete_call_ns[r] = in_complete;
    slot_.count.fetch_add(drained, std::memory_order_relaxed);
    h_.drain_done.fetch_add(1, std::memory_order_release);  // pairs with the orchestrator's acquire
  }
}

}  // namespace fairlane::bench
