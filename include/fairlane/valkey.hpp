// fairlane::ValkeyBackend: the queue on a Valkey (or Redis 6.2+) server, in
// EchoMQ's keyspace, behind the same Backend interface as the segment.
//
//   auto b = fairlane::open_valkey("valkey://127.0.0.1:6379/orders");
//   if (!b) { fprintf(stderr, "%s\n", b.error().message.c_str()); return 2; }
//   (*b)->enqueue(tenant, (*b)->mint(), "payload");
//
// Every transition is one Lua script run with EVALSHA: one round trip, atomic
// on the server, so the rota, limits and leases hold across every client of
// the queue on every host. Leases and due times are on the server clock
// (TIME inside the scripts) plus the queue's clock offset (advance_clock),
// kept in the queue's meta hash so every client sees the same clock.
//
// Keys (all `emq:{Q}:<name>`, `{Q}` the Cluster hash tag, so every key of a
// queue lives in one slot): EchoMQ's ring, g:<group>:pending, pending (flat
// jobs), job:<id> (+ :logs), active, gactive / glimit / gweight, paused,
// meta, schedule, dead (score 0), metrics:completed / metrics:failed, wake;
// and fairlane's groups, gjobs, served, counters, fl:guard (never exists:
// the reshard guard) plus fl_* fields in rows and meta (docs/valkey.md has
// the table and what each side's fencing guarantees).
//
// What the tools call, on Valkey (docs/valkey.md):
//   job/jobs        one script; jobs() in id order, filtered by group and
//                   state, at most `limit`; EchoMQ's flat jobs have no group
//   requeue_dead    back to the lane at its mint position, attempt 1, fresh token
//   purge_dead      rows and logs deleted
//   processes       empty: Valkey keeps no record of its clients
//   capabilities    no process records, no wait histograms, no fixed capacity, no fsck
//   snapshot        one atomic script; jobs_capacity, lanes_capacity 0;
//                   completed / dead from EchoMQ's metrics (every client's)
//   remove_queue    every key of the queue and only those
// On a mirror's keyspace (meta `owner`) every write is refused unless
// ValkeyOptions::force: read_only statuses, or ReadOnlyError naming the owner.
//
// Thread safety: NOT thread-safe. One ValkeyBackend is one client (one
// connection to the node serving the queue, plus one per node it was sent
// to by ASK); use one per thread (they may all open the same queue). Every call blocks on a
// network round trip; claim_wait blocks on BLPOP. Nothing here is on a
// lock-free fast path: for that, use the segment.
//
// Errors: the queue's expected outcomes (empty, duplicate, stale, ...) are
// the same values as on the segment. When the server cannot be reached the
// backend reconnects with backoff (ValkeyOptions::reconnect_attempts) and
// resends the command once; if the server stays away, or answers with an
// error, the call throws BackendError ("valkey 127.0.0.1:6390 unreachable:
// Connection refused"). A server that takes the connection and says nothing
// (stopped, or not a Valkey server) costs a call about twice
// command_timeout: "valkey 127.0.0.1:6390 unreachable: no reply within
// 5000 ms".
//
// A crash mid-call: a script runs whole or not at all on the server. A client
// that dies (or loses its connection) after sending a command does not know
// whether it ran; a lease it never heard of expires and the job is served
// again (at-least-once). A command resent after a reconnect may report the
// outcome of its own first run: enqueue -> duplicate, complete -> gone,
// fail/extend -> stale.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fairlane/backend.hpp"
#include "fairlane/result.hpp"

namespace fairlane {

struct ValkeyOptions {
  // Job namespace. Empty: the kind the queue recorded when it was first
  // opened, or "JOB" for a new queue. Set: recorded if the queue has none;
  // opening fails (invalid_argument) if the queue recorded another one.
  std::string job_kind;
  // Largest payload; 0: as recorded by the queue, or 256 for a new queue
  // (the segment's default). Set: must match the recorded one, as job_kind.
  std::uint32_t max_payload = 0;
  std::uint16_t node = 0;  // snowflake node bits (0..1023) of minted ids
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds command_timeout{5000};  // a reply later than this is a dropped connection
  int reconnect_attempts = 4;                        // connects tried before BackendError
  std::chrono::milliseconds reconnect_backoff{50};   // first pause between them; doubles each time
  // On a Cluster: how long one call keeps following MOVED/ASK and waiting
  // out TRYAGAIN / CLUSTERDOWN (a reshard or a failover) before it throws.
  std::chrono::milliseconds cluster_retry_budget{15000};
  // Write to a queue whose keyspace is a segment's mirror (meta `owner`).
  // Without it every write is refused (read_only statuses, or a
  // ReadOnlyError naming the owner); the tools' --force.
  bool force = false;
  // EchoMQ's opt-in stalled sweep for this queue (recorded in meta
  // `max_stalled`, so every fairlane client of the queue sweeps alike):
  // unset leaves the queue as it is; 0 turns it off; n > 0 counts `stalled`
  // on each expired lease and dead-letters it (last_error "stalled") once
  // the count reaches n. Off, expired leases go back without counting.
  std::optional<std::uint32_t> max_stalled;
  // Open-or-create, as EchoMQ clients do: a queue none of whose keys exists
  // gets its meta (job kind, payload limit) here. false: such a queue is an
  // error (Errc::not_found) and nothing is written, so that a mistyped
  // name creates no key (the tools' commands other than enqueue). A queue
  // exists while any of its fixed keys (ring, meta, groups, ...) does.
  bool create = true;
};

// One node of a URL: HOST:PORT.
struct ValkeyEndpoint {
  std::string host;
  int port = 6379;
  std::string address() const;  // "host:port", "[v6]:port"
};

// valkey://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]/QUEUE (also redis://).
// HOST may be a name, an IPv4 address or [IPv6]; PORT defaults to 6379.
// Several nodes: seeds of a Cluster (any one that answers is enough; a
// single node of a Cluster is enough too). USER and PASSWORD may carry
// %XX escapes; ":PASSWORD@" alone is the default user. Without a password
// in the URL, FAIRLANE_VALKEY_PASSWORD applies (the URL wins). QUEUE:
// 1..200 printable ASCII characters, none of '{', '}', '/', '*', '?', '[',
// ']', '\' or a space.
struct ValkeyUrl {
  std::string host;   // the first node
  int port = 6379;
  std::vector<ValkeyEndpoint> nodes;  // every node named, the first one first
  std::string user;      // empty: the default user
  std::string password;  // empty: none in the URL
  std::string queue;

  static Result<ValkeyUrl> parse(std::string_view url);
  std::string str() const;       // "valkey://[user@]h1:p1[,h2:p2]/queue": never the password
  std::string address() const;   // first "host:port", as in messages
  std::string prefix() const;    // "emq:{queue}:"
  std::string auth_password() const;  // the URL's password, else FAIRLANE_VALKEY_PASSWORD, else ""
};

// The URL with its password (if any) replaced by "***", for messages.
std::string redact_url(std::string_view url);

// Does the target name a Valkey queue (valkey:// or redis://) rather than a segment?
bool is_valkey_url(std::string_view target) noexcept;

// A write refused because the keyspace is a segment's mirror (meta
// `owner`), thrown by the calls whose status has no read_only value.
class ReadOnlyError : public BackendError {
 public:
  ReadOnlyError(const std::string& message, std::string owner) : BackendError(message), owner_(std::move(owner)) {}
  const std::string& owner() const noexcept { return owner_; }  // "host:segment"

 private:
  std::string owner_;
};

class ValkeyBackend final : public Backend {
 public:
  // Connects, records (or checks) the queue's job kind and payload limit.
  // Never throws; every failure is an Error with a message for a person.
  static Result<std::unique_ptr<ValkeyBackend>> open(std::string_view url, const ValkeyOptions& options = {});

  ~ValkeyBackend() override;
  ValkeyBackend(const ValkeyBackend&) = delete;
  ValkeyBackend& operator=(const ValkeyBackend&) = delete;

  std::string describe() const override;          // "valkey://host:port/queue"
  std::string job_kind() const override;
  std::uint64_t now_ms() override;                  // server TIME (Unix ms) + the queue's clock offset
  BrandedId mint() override;                        // strictly increasing per queue, minted on the server

  using Backend::enqueue;
  EnqueueStatus enqueue(const BrandedId& group, const BrandedId& job, std::string_view payload,
                        const EnqueueOptions& options) override;
  bool claim(Lease& out, std::uint32_t lease_ms) override;
  // claim, then BLPOP on the wake list (cut to the next due time, at most a
  // second), then claim again, until the timeout. No busy polling.
  bool claim_wait(Lease& out, std::uint32_t lease_ms, std::chrono::milliseconds timeout) override;
  std::size_t claim_batch(std::span<Lease> out, std::uint32_t lease_ms) override;
  std::size_t enqueue_batch(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses) override;
  std::size_t claim_lane_batch(std::span<Lease> out, std::uint32_t lease_ms) override;
  AckStatus complete(const BrandedId& job, Token token) override;
  std::size_t complete_batch(std::span<const Lease> leases, std::span<AckStatus> statuses) override;
  FailStatus fail(const BrandedId& job, Token token, const FailOptions& options = {}) override;
  AckStatus extend(const BrandedId& job, Token token, std::uint32_t lease_ms) override;
  AckStatus release(const BrandedId& job, Token token) override;
  MoveStatus reassign(const BrandedId& job, const BrandedId& group) override;
  std::optional<JobInfo> job(const BrandedId& id, bool with_payload = false) override;
  std::vector<JobInfo> jobs(const JobFilter& filter = {}) override;
  AckStatus requeue_dead(const BrandedId& id) override;
  std::uint64_t requeue_all_dead() override;
  std::uint64_t purge_dead() override;
  std::vector<ProcessInfo> processes() override;
  BackendCapabilities capabilities() const override;
  // ValkeyOptions::force, or no owner (one round trip).
  bool writable() override;

  LaneStatus pause(const BrandedId& group) override;
  LaneStatus resume(const BrandedId& group) override;
  LaneStatus pause_all() override;
  LaneStatus resume_all() override;
  LaneStatus set_limit(const BrandedId& group, std::uint32_t limit) override;
  LaneStatus clear_limit(const BrandedId& group) override;
  LaneStatus set_weight(const BrandedId& group, std::uint32_t weight) override;
  std::uint64_t depth(const BrandedId& group) override;
  std::uint64_t drain(const BrandedId& group) override;
  std::uint64_t tick() override;
  // One script: a consistent picture of the whole queue (unlike the
  // segment's). jobs_capacity is 0: a Valkey queue has no fixed capacity.
  Snapshot snapshot() override;
  void advance_clock(std::uint64_t ms) override;

  // Valkey-only.
  const ValkeyUrl& url() const noexcept;
  std::uint32_t max_payload() const noexcept;
  std::uint16_t node() const noexcept;
  bool cluster() const noexcept;     // the queue lives on a Valkey Cluster
  std::string serving_node() const;  // "host:port" of the node serving the queue's slot now
  // The segment that mirrors into this keyspace ("host:segment", meta
  // `owner`), or nullopt. While it is set, writes are refused unless
  // ValkeyOptions::force.
  std::optional<std::string> owner();
  // Deletes every key of the queue, and only those ("emq:{Q}:*", SCAN +
  // UNLINK on the node that serves the queue, several round trips; not
  // atomic). For tests and tools; other clients must be stopped first.
  // Refused (ReadOnlyError) on a mirror's keyspace unless forced.
  std::uint64_t remove_queue();

 private:
  struct Impl;
  explicit ValkeyBackend(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

// ValkeyBackend::open behind the Backend interface.
Result<std::unique_ptr<Backend>> open_valkey(std::string_view url, ValkeyOptions options = {});

// A segment by name (Queue::open + segment_backend) or a Valkey queue by
// URL (open_valkey with default options: a Valkey queue none of whose keys
// exists is made).
Result<std::unique_ptr<Backend>> open_backend(std::string_view target);

}  // namespace fairlane
