// Mirroring a segment to Valkey, and restoring a segment from it
// (docs/mirror.md).
//
// A segment created with QueueOptions::mirror logs every transition in a
// bounded log inside the segment; the fast path only appends there and
// never waits on the network. A Mirror (the `fairlane mirror SEG` process,
// or a Mirror object inside any process) reads the log and writes each
// changed job and lane into EchoMQ's keyspace on Valkey, pipelined, in the
// order the records were logged. Records name what changed, not how: the
// mirror reads the current state, so a record read late, or twice, writes
// the right thing, and a batch may be sent again after a lost connection.
//
// One mirror per segment at a time. It starts with a full resynchronisation
// (every live job and lane written, jobs Valkey holds that the segment does
// not are deleted), and does another whenever a record was lost: a writer
// that died mid-append, a full log, or a Valkey that restarted without the
// transitions it had acknowledged.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fairlane/queue.hpp"
#include "fairlane/result.hpp"
#include "fairlane/valkey.hpp"

namespace fairlane {

struct MirrorOptions {
  // Valkey URL; empty: the one the segment was created with.
  std::string url;
  // Records shipped in one pipeline at most.
  std::size_t batch = 4096;
  // A record reserved but not written for this long is given up as a hole
  // (its writer died mid-append) and everything is resynchronised.
  std::chrono::milliseconds hole_timeout{1000};
  // Longest sleep while the log is empty (appends wake the mirror sooner).
  std::chrono::milliseconds idle_wait{100};
  // Pause between reconnect attempts while Valkey is away; doubles up to max.
  std::chrono::milliseconds reconnect_backoff{50};
  std::chrono::milliseconds reconnect_backoff_max{2000};
  ValkeyOptions valkey;
  // Things a person should hear about: connects, reconnects, resyncs, a
  // dropped mirror. Called from the mirror's threads.
  std::function<void(std::string_view)> on_event;
};

struct MirrorCounters {
  std::uint64_t records = 0;       // log records read
  std::uint64_t batches = 0;       // pipelines Valkey acknowledged
  std::uint64_t jobs_written = 0;  // job upserts sent
  std::uint64_t jobs_deleted = 0;
  std::uint64_t lanes_written = 0;
  std::uint64_t resyncs = 0;
  std::uint64_t reconnects = 0;
};

class Mirror {
 public:
  // Opens the segment, takes its mirror role (fails, busy, if a live mirror
  // holds it), connects to Valkey and starts the reader and shipper threads.
  // A Valkey that cannot be reached at start is an error; later outages are
  // ridden out with reconnects.
  static Result<std::unique_ptr<Mirror>> start(std::string_view segment, MirrorOptions options = {});
  ~Mirror();  // stop()
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;

  // Ships what has been read (unless Valkey is away), then stops the
  // threads and gives up the role.
  void stop();
  MirrorCounters counters() const;

 private:
  struct Impl;
  explicit Mirror(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

struct RestoreReport {
  std::uint64_t pending = 0;    // jobs back in their lanes (leased ones included)
  std::uint64_t leased = 0;     // of those, jobs that were leased when the host went down
  std::uint64_t scheduled = 0;
  std::uint64_t dead = 0;
  std::uint64_t flat = 0;       // of all those, EchoMQ's ungrouped jobs, now in the default lane
  std::uint64_t lanes = 0;      // lanes whose limit, weight or pause was restored
  // Not restored: job keys that were no whole job (no state, an id or group
  // that is not a branded id, a state a segment has not, such as EchoMQ's
  // awaiting_children), groups of glimit, gweight or paused that are not ids.
  std::uint64_t skipped = 0;
  std::vector<std::string> skipped_names;  // the first 100 of those, each "what: why"
  bool paused = false;          // the whole queue was paused
  std::string owner;            // set when the segment took the keyspace over ("host:segment" in meta)
};

// Builds the segment `segment` from the Valkey queue at `url`: every job in
// its lane in mint order (leased jobs come back pending: their holders died
// with the host), scheduled and dead jobs kept with their times, limits,
// weights and pauses kept. EchoMQ's ungrouped ("flat") jobs, rows without a
// group, go to the default lane, as the segment keeps its jobs without a
// group; a mirror of the new segment writes them back as the default
// lane's. What is not restored is counted and named (RestoreReport). A queue that was never created (none of its
// fixed keys exists, as ValkeyOptions::create = false judges it) is an error
// (Errc::not_found) and creates nothing; a queue with meta and no jobs
// restores to an empty segment. The segment must not exist; it is
// created with `options`, where every field left at its default takes what
// the mirror kept in meta (the segment's geometry, default retry policy and
// mirror settings), then the queue's job kind and payload size; its capacity
// must hold every job. When the new segment mirrors into the same queue it
// takes the keyspace over (meta `owner` names it). On any error the new
// segment is removed again.
Result<RestoreReport> restore_from_valkey(std::string_view segment, std::string_view url, QueueOptions options);

}  // namespace fairlane
