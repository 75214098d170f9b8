// One queue interface over every backend: the shared-memory segment and
// Valkey. Tools, the worker runtime and the conformance tests use this;
// code that lives on the segment's fast path should hold a Queue directly
// (no virtual call, nothing thrown).
//
// The segment backend never throws. The Valkey backend throws BackendError
// when the server cannot be reached (after its reconnect attempts) or
// answers with an error; the queue's expected outcomes (empty, duplicate,
// stale, full, ...) are the same values on both.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fairlane/queue.hpp"

namespace fairlane {

class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a backend can show. Fields a backend lacks are marked absent in the
// tools' output rather than shown as zero.
struct BackendCapabilities {
  bool process_records = false;   // processes(): attached processes and their leases
  bool wait_histograms = false;   // per-lane enqueue-to-claim wait histograms
  bool fixed_capacity = false;    // a job capacity (Snapshot::jobs_capacity)
  bool fsck = false;              // fsck()/repair() apply
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "segment NAME" or "valkey://HOST:PORT/QUEUE": for messages.
  virtual std::string describe() const = 0;
  virtual std::string job_kind() const = 0;
  virtual BackendCapabilities capabilities() const = 0;
  virtual std::uint64_t now_ms() = 0;
  virtual BrandedId mint() = 0;

  // Without options: as EnqueueOptions{} (no delay, no policy of its own),
  // without building one at each call. Derived classes that override the
  // virtual one name this one too (using Backend::enqueue).
  EnqueueStatus enqueue(const BrandedId& group, const BrandedId& job, std::string_view payload) {
    static const EnqueueOptions none{};
    return enqueue(group, job, payload, none);
  }
  virtual EnqueueStatus enqueue(const BrandedId& group, const BrandedId& job, std::string_view payload,
                                const EnqueueOptions& options) = 0;
  // enqueue, waiting up to `timeout` while the queue is full, has no lane
  // for a new group, or its mirror's log is full (Queue::enqueue_wait). A
  // backend with no fixed number of job slots or lanes and no mirror log
  // never answers any of these, and this is enqueue.
  virtual EnqueueStatus enqueue_wait(const BrandedId& group, const BrandedId& job, std::string_view payload,
                                     const EnqueueOptions& options, std::chrono::milliseconds timeout) {
    (void)timeout;
    return enqueue(group, job, payload, options);
  }
  // One status per item; on Valkey one script per batch.
  virtual std::size_t enqueue_batch(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses) = 0;
  // enqueue_batch, each item waiting within the one `timeout` while the
  // queue is full or has no lane for its group (Queue::enqueue_batch_wait).
  // A backend that never answers either makes it enqueue_batch.
  virtual std::size_t enqueue_batch_wait(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses,
                                         std::chrono::milliseconds timeout) {
    (void)timeout;
    return enqueue_batch(items, statuses);
  }
  virtual bool claim(Lease& out, std::uint32_t lease_ms) = 0;
  virtual bool claim_wait(Lease& out, std::uint32_t lease_ms, std::chrono::milliseconds timeout) = 0;
  virtual std::size_t claim_batch(std::span<Lease> out, std::uint32_t lease_ms) = 0;
  virtual std::size_t claim_lane_batch(std::span<Lease> out, std::uint32_t lease_ms) = 0;
  virtual AckStatus complete(const BrandedId& job, Token token) = 0;
  virtual std::size_t complete_batch(std::span<const Lease> leases, std::span<AckStatus> statuses) = 0;
  virtual FailStatus fail(const BrandedId& job, Token token, const FailOptions& options = {}) = 0;
  virtual AckStatus extend(const BrandedId& job, Token token, std::uint32_t lease_ms) = 0;
  virtual AckStatus release(const BrandedId& job, Token token) = 0;

  virtual LaneStatus pause(const BrandedId& group) = 0;
  virtual LaneStatus resume(const BrandedId& group) = 0;
  virtual LaneStatus pause_all() = 0;
  virtual LaneStatus resume_all() = 0;
  virtual LaneStatus set_limit(const BrandedId& group, std::uint32_t limit) = 0;  // 1..kMaxLimit
  virtual LaneStatus clear_limit(const BrandedId& group) = 0;
  virtual LaneStatus set_weight(const BrandedId& group, std::uint32_t weight) = 0;
  virtual std::uint64_t depth(const BrandedId& group) = 0;
  virtual std::uint64_t drain(const BrandedId& group) = 0;
  virtual MoveStatus reassign(const BrandedId& job, const BrandedId& group) = 0;
  virtual std::uint64_t tick() = 0;
  virtual Snapshot snapshot() = 0;

  // Jobs and dead letters, for tools. job(): nullopt when there is none.
  virtual std::optional<JobInfo> job(const BrandedId& id, bool with_payload = false) = 0;
  virtual std::vector<JobInfo> jobs(const JobFilter& filter = {}) = 0;
  virtual AckStatus requeue_dead(const BrandedId& id) = 0;
  virtual std::uint64_t requeue_all_dead() = 0;
  virtual std::uint64_t purge_dead() = 0;
  // Attached processes (empty where capabilities().process_records is false).
  virtual std::vector<ProcessInfo> processes() = 0;

  // Moves the queue's clock forward for every client (tests and drills), by
  // at most kMaxDelayMs a call. A segment handle that makes no writes (an
  // observer) leaves it alone.
  virtual void advance_clock(std::uint64_t ms) = 0;

  // The segment's own handle, for what only a segment has (fsck, repair,
  // mirroring, its configuration): owned by the backend (do not move from
  // it), valid while the backend lives. nullptr on Valkey; a forwarder (the
  // worker's per-thread backends) answers for the backend it forwards to.
  virtual Queue* segment() noexcept { return nullptr; }

  // Whether claims and writes through this backend are taken (a backend
  // that cannot tell says true): false for a segment handle that makes no
  // claims (Queue::writable) and for a mirror's Valkey keyspace opened
  // without ValkeyOptions::force (one round trip; the keyspace may become a
  // mirror's later). Worker::start asks it of every backend it makes.
  virtual bool writable() { return true; }
};

// The segment behind the Backend interface.
std::unique_ptr<Backend> segment_backend(Queue queue);

}  // namespace fairlane
