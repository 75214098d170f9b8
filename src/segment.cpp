// Creating, opening, validating and removing a segment; process attachment.
#include "segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "clock.hpp"
#include "gate.hpp"
#include "hash.hpp"

namespace fairlane::detail {
namespace bip = boost::interprocess;

namespace {

std::uint64_t next_pow2(std::uint64_t v) noexcept {
  std::uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}
std::uint64_t round_up(std::uint64_t v, std::uint64_t a) noexcept { return (v + a - 1) / a * a; }

Error make_error(Errc code, std::string message, int err = 0) {
  if (err) message += std::string(": ") + std::strerror(err);
  return Error{code, err, std::move(message)};
}

Error from_boost(const bip::interprocess_exception& e, std::string_view what, std::string_view name) {
  int err = e.get_native_error();
  std::string seg = "segment '" + std::string(name) + "'";
  switch (e.get_error_code()) {
    case bip::not_found_error:
      return make_error(Errc::not_found, seg + " does not exist");
    case bip::already_exists_error:
      return make_error(Errc::already_exists, seg + " already exists");
    case bip::security_error:
      return make_error(Errc::permission_denied, "cannot " + std::string(what) + " " + seg, err ? err : EACCES);
    default:
      if (err == ENOENT) return make_error(Errc::not_found, seg + " does not exist");
      if (err == EEXIST) return make_error(Errc::already_exists, seg + " already exists");
      if (err == EACCES || err == EPERM)
        return make_error(Errc::permission_denied, "cannot " + std::string(what) + " " + seg, err);
      return make_error(Errc::system, "cannot " + std::string(what) + " " + seg + " (" + e.what() + ")", err);
  }
}

Status check_name(std::string_view name) {
  if (name.empty() || name.size() > 200 || name.find('/') != std::string_view::npos || name == "." || name == "..")
    return make_error(Errc::invalid_argument,
                      "invalid segment name '" + std::string(name) + "': 1 to 200 characters, no '/'");
  return ok_status();
}

// Fold a record's counters into the header's retired block and zero them.
void retire_counters(Header* h, CounterBlock& c) noexcept {
  auto fold = [](std::atomic<std::uint64_t>& from, std::atomic<std::uint64_t>& to) {
    to.fetch_add(from.exchange(0, std::memory_order_relaxed), std::memory_order_relaxed);
  };
  fold(c.enqueued, h->retired.enqueued);
  fold(c.duplicates, h->retired.duplicates);
  fold(c.claimed, h->retired.claimed);
  fold(c.completed, h->retired.completed);
  fold(c.retried, h->retired.retried);
  fold(c.dead, h->retired.dead);
  fold(c.expired, h->retired.expired);
  fold(c.promoted, h->retired.promoted);
  fold(c.drained, h->retired.drained);
}

// owner: pid (bits 0..31) | kAttached; kStamped once start_time is written.
// A record without kStamped is being attached and is never judged dead.
constexpr std::uint64_t kAttached = 1ULL << 32;
constexpr std::uint64_t kStamped = 1ULL << 33;
constexpr std::uint64_t kObserver = 1ULL << 34;  // a tool that only looks: not listed as a process

// Take a process record: a free one, else one whose owner is dead.
ProcRecord* attach(Segment& s, bool observer) {
  const int pid = getpid();
  const std::uint64_t owner = kAttached | std::uint32_t(pid) | (observer ? kObserver : 0);
  const std::uint64_t start = process_start_time(pid);
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t i = 0; i < kMaxProcs; ++i) {
      ProcRecord& p = s.procs[i];
      std::uint64_t cur = p.owner.load(std::memory_order_acquire);
      bool take = cur == 0;
      // A dead owner that died inside an operation (in_op not 0) keeps its
      // record until the gate's repair has run after it (gate.hpp), and so
      // does a dead repairer that holds the gate: its successor judges it
      // by this record. Both are read after the owner is judged dead, when
      // they can no longer change but by a repair (which only clears them).
      if (!take && pass == 1 && (cur & kStamped) && !process_alive(int(cur & 0xFFFFFFFF), p.start_time))
        take = p.in_op.load(std::memory_order_acquire) == 0 &&
               gate_holder(s.h->gate.load(std::memory_order_acquire)) != i + 1;
      if (!take) continue;
      // [A1] acq_rel: claims the record; pairs with [R1] of a detaching owner.
      if (!p.owner.compare_exchange_strong(cur, owner, std::memory_order_acq_rel)) continue;
      if (cur != 0) retire_counters(s.h, p.counters);  // a dead owner's counts stay counted
      p.in_op.store(0, std::memory_order_relaxed);     // a count left by a handle closed mid-operation
      p.start_time = start;
      p.attached_unix_ms = unix_ms();
      p.owner.store(owner | kStamped, std::memory_order_release);
      return &p;
    }
  }
  return nullptr;
}

}  // namespace

namespace {

// Fields 3 (state) and 22 (starttime) of /proc/<pid>/stat; false if it
// cannot be read (no such process, or /proc is not ours to read).
bool read_proc_stat(int pid, char& state, std::uint64_t& start_time) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  // Field 2 (comm) may hold spaces and parentheses: parse after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return false;
  state = p[2];
  // After ") " come fields 3.. ; starttime is field 22, i.e. the 20th from here.
  int field = 2;
  for (++p; *p && field < 21; ++p)
    if (*p == ' ') ++field;
  start_time = std::strtoull(p, nullptr, 10);
  return true;
}

}  // namespace

std::uint64_t process_start_time(int pid) noexcept {
  char state = 0;
  std::uint64_t start = 0;
  return read_proc_stat(pid, state, start) ? start : 0;
}

int dead_owner_pid(const ProcRecord& p) noexcept {
  const std::uint64_t owner = p.owner.load(std::memory_order_acquire);
  if (!(owner & kStamped)) return 0;
  const std::uint64_t start = __atomic_load_n(&p.start_time, __ATOMIC_RELAXED);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (p.owner.load(std::memory_order_relaxed) != owner) return 0;  // changed hands meanwhile
  const int pid = int(owner & 0xFFFFFFFF);
  return process_alive(pid, start) ? 0 : pid;
}

// Threads of process pid (entries of /proc/PID/task), 0 if unreadable.
int thread_count(int pid) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/task", pid);
  DIR* d = ::opendir(path);
  if (!d) return 0;
  int n = 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

// A wrong "dead" lets a repair rebuild what that process is changing (the
// gate skips dead processes), so every doubt counts as alive.
bool process_alive(int pid, std::uint64_t start_time) noexcept {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state = 0;
  std::uint64_t now = 0;
  // It exists (kill succeeded or said EPERM) but /proc does not show it
  // (hidepid, another PID namespace): we cannot tell, so alive.
  if (!read_proc_stat(pid, state, now)) return true;
  // A process killed but not yet reaped by its parent (a zombie) holds
  // nothing any more: it is dead for us. Its leader alone can be a zombie
  // while other threads run (pthread_exit in main): then it is alive.
  if (state == 'X') return false;
  if (state == 'Z') return thread_count(pid) > 1;
  if (start_time == 0) return true;  // still attaching: its start time is not written yet
  return now == start_time;
}

ProcessState process_state(int pid, std::uint64_t start_time) noexcept {
  if (!process_alive(pid, start_time)) return ProcessState::dead;
  char state = 0;
  std::uint64_t now = 0;
  if (read_proc_stat(pid, state, now) && (state == 'T' || state == 't')) return ProcessState::stopped;
  return ProcessState::alive;
}

std::string process_name(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/comm", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[64];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return {};
  std::string name(buf, std::size_t(n));
  while (!name.empty() && (name.back() == '\n' || name.back() == 0)) name.pop_back();
  return name;
}

Geometry geometry_for(std::uint32_t jobs, std::uint32_t lanes, std::uint32_t payload_bytes, std::uint32_t log_cells) noexcept {
  Geometry g{};
  g.log_cells = log_cells;
  g.jobs = jobs;
  g.lanes = lanes + 1;  // + the default lane
  g.lane_buckets = std::uint32_t(next_pow2(std::uint64_t(g.lanes) * 2));
  g.payload_bytes = payload_bytes;
  g.slot_bytes = std::uint32_t(sizeof(SlotRecord) + round_up(payload_bytes, kCacheLine));
  g.ring_cells = std::uint32_t(next_pow2(std::uint64_t(g.lanes) + 1));
  g.index_buckets = std::uint32_t(next_pow2(std::max<std::uint64_t>(2, (std::uint64_t(jobs) * 2 + kIndexWays - 1) / kIndexWays)));
  std::uint64_t off = round_up(sizeof(Header), 4096);
  g.words_off = off;
  off = round_up(off + std::uint64_t(jobs) * 8, kCacheLine);
  g.slots_off = off;
  off = round_up(off + std::uint64_t(jobs) * g.slot_bytes, kCacheLine);
  g.lanes_off = off;
  off = round_up(off + std::uint64_t(g.lane_buckets) * sizeof(LaneRecord), kCacheLine);
  g.ring_off = off;
  off = round_up(off + std::uint64_t(g.ring_cells) * 8, kCacheLine);
  g.index_off = off;
  off = round_up(off + std::uint64_t(g.index_buckets) * sizeof(IndexBucket), kCacheLine);
  g.procs_off = off;
  off = round_up(off + std::uint64_t(kMaxProcs) * sizeof(ProcRecord), kCacheLine);
  g.waits_off = off;
  off = round_up(off + std::uint64_t(g.lane_buckets) * sizeof(WaitBuckets), kCacheLine);
  g.log_off = off;
  off = round_up(off + std::uint64_t(log_cells) * sizeof(LogCell), 4096);
  g.total = off;
  return g;
}

namespace {

void bind_tables(Segment& s) {
  auto* base = static_cast<unsigned char*>(s.region.get_address());
  Header* h = reinterpret_cast<Header*>(base);
  s.h = h;
  s.words = reinterpret_cast<std::atomic<std::uint64_t>*>(base + h->words_off);
  s.slots = base + h->slots_off;
  s.lanes = reinterpret_cast<LaneRecord*>(base + h->lanes_off);
  s.ring = reinterpret_cast<std::atomic<std::uint64_t>*>(base + h->ring_off);
  s.index = reinterpret_cast<IndexBucket*>(base + h->index_off);
  s.procs = reinterpret_cast<ProcRecord*>(base + h->procs_off);
  s.waits = reinterpret_cast<WaitBuckets*>(base + h->waits_off);
  s.log = h->log_cells ? reinterpret_cast<LogCell*>(base + h->log_off) : nullptr;
  s.log_mask = h->log_cells ? h->log_cells - 1 : 0;
  s.jobs = h->job_capacity;
  s.slot_bytes = h->slot_bytes;
  s.payload_bytes = h->payload_bytes;
  s.lane_mask = h->lane_buckets - 1;
  s.ring_mask = h->ring_cells - 1;
  s.index_mask = h->index_buckets - 1;
  s.seed = h->hash_seed;
  s.recovery_ms = h->recovery_ms;
}

Result<std::unique_ptr<Segment>> finish_attach(std::unique_ptr<Segment> s, bool observer = false) {
  s->me = attach(*s, observer);
  if (s->me) s->me_index = std::uint32_t(s->me - s->procs);
  if (!s->me)
    return make_error(Errc::system, "segment '" + s->name + "' has no free process record (" +
                                        std::to_string(kMaxProcs) + " processes attached)");
  return s;
}

}  // namespace

Segment::~Segment() {
  if (me && h) {
    retire_counters(h, me->counters);
    me->start_time = 0;
    // [R1] release: hands the record back; pairs with [A1].
    me->owner.store(0, std::memory_order_release);
  }
}

Result<std::unique_ptr<Segment>> create_segment(std::string_view name, const QueueOptions& o) {
  if (auto st = check_name(name); !st) return st.error();
  if (o.jobs < 1 || o.jobs > kMaxJobs)
    return make_error(Errc::invalid_argument, "jobs must be 1.." + std::to_string(kMaxJobs) + ", got " + std::to_string(o.jobs));
  if (o.lanes < 1 || o.lanes > kMaxLanes - 2)
    return make_error(Errc::invalid_argument, "lanes must be 1.." + std::to_string(kMaxLanes - 2) + ", got " + std::to_string(o.lanes));
  if (o.payload_bytes > kMaxPayload)
    return make_error(Errc::invalid_argument, "payload-bytes must be 0.." + std::to_string(kMaxPayload) + ", got " + std::to_string(o.payload_bytes));
  if (!valid_kind(o.job_kind))
    return make_error(Errc::invalid_argument, "job kind must be three letters A-Z, got '" + o.job_kind + "'");
  if (o.node > 1023) return make_error(Errc::invalid_argument, "node must be 0..1023, got " + std::to_string(o.node));
  if (o.mode > 0777) return make_error(Errc::invalid_argument, "mode must be an octal file mode up to 0777");
  if (o.recovery_ms < kMinRecoveryMs || o.recovery_ms > kMaxRecoveryMs)
    return make_error(Errc::invalid_argument, "recovery bound must be " + std::to_string(kMinRecoveryMs) + ".." +
                                                  std::to_string(kMaxRecoveryMs) + " ms, got " + std::to_string(o.recovery_ms));
  std::uint32_t log_cells = 0;
  if (!o.mirror.empty()) {
    if (o.mirror.size() >= kMirrorUrlBytes)
      return make_error(Errc::invalid_argument, "mirror URL is longer than " + std::to_string(kMirrorUrlBytes - 1) + " bytes");
    if (o.mirror.rfind("valkey://", 0) != 0 && o.mirror.rfind("redis://", 0) != 0)
      return make_error(Errc::invalid_argument, "mirror must be a valkey://HOST:PORT/QUEUE URL, got '" + o.mirror + "'");
    if (o.mirror_log < 64 || o.mirror_log > (1U << 26) || (o.mirror_log & (o.mirror_log - 1)))
      return make_error(Errc::invalid_argument, "mirror log must be a power of two from 64 to 2^26 records, got " +
                                                    std::to_string(o.mirror_log));
    if (o.sync_timeout_ms < 1)
      return make_error(Errc::invalid_argument, "sync timeout must be at least 1 ms");
    log_cells = o.mirror_log;
  }

  const Geometry g = geometry_for(o.jobs, o.lanes, o.payload_bytes, log_cells);
  auto s = std::make_unique<Segment>();
  s->name = std::string(name);
  try {
    bip::permissions perm(o.mode);
    bip::shared_memory_object shm(bip::create_only, s->name.c_str(), bip::read_write, perm);
    try {
      shm.truncate(bip::offset_t(g.total));
      s->region = bip::mapped_region(shm, bip::read_write);
    } catch (const bip::interprocess_exception& e) {
      bip::shared_memory_object::remove(s->name.c_str());
      return from_boost(e, "size", name);
    }
  } catch (const bip::interprocess_exception& e) {
    return from_boost(e, "create", name);
  }

  // ftruncate gave us zeroed memory: every table's zero state is valid
  // (free index entries, free lane buckets, zero counters) except the ones
  // set below.
  auto* h = reinterpret_cast<Header*>(s->region.get_address());
  h->layout_version = kLayoutVersion;
  h->header_bytes = sizeof(Header);
  h->segment_bytes = g.total;
  h->job_capacity = g.jobs;
  h->lane_capacity = g.lanes;
  h->lane_buckets = g.lane_buckets;
  h->payload_bytes = g.payload_bytes;
  h->slot_bytes = g.slot_bytes;
  h->ring_cells = g.ring_cells;
  h->index_buckets = g.index_buckets;
  h->words_off = g.words_off;
  h->slots_off = g.slots_off;
  h->lanes_off = g.lanes_off;
  h->ring_off = g.ring_off;
  h->index_off = g.index_off;
  h->procs_off = g.procs_off;
  h->waits_off = g.waits_off;
  h->log_off = g.log_off;
  h->log_cells = g.log_cells;
  h->recovery_ms = o.recovery_ms;
  if (log_cells) {
    std::memcpy(h->mirror_url, o.mirror.data(), o.mirror.size());
    h->durability = o.durability == Durability::sync ? 2 : 1;
    h->on_full = o.on_full == MirrorFull::drop ? 1 : 0;
    h->sync_timeout_ms = o.sync_timeout_ms;
  }
  std::random_device rd;
  h->hash_seed = (std::uint64_t(rd()) << 32) ^ rd() ^ unix_ms();
  h->created_unix_ms = unix_ms();
  std::memcpy(h->job_kind, o.job_kind.data(), 3);
  h->node = o.node;
  h->creator_pid = std::uint32_t(getpid());
  bind_tables(*s);

  // Free list: every slot, in index order.
  for (std::uint32_t i = 0; i < g.jobs; ++i)
    s->slot(i).next.store(i + 1 < g.jobs ? i + 2 : 0, std::memory_order_relaxed);
  h->free_head.store(1, std::memory_order_relaxed);  // tag 0, slot 0
  // Ring: cell i is first usable at position i.
  for (std::uint32_t i = 0; i < g.ring_cells; ++i) s->ring[i].store(RingCell::pack(i, 0), std::memory_order_relaxed);
  h->next_due.store(~0ULL, std::memory_order_relaxed);
  // Log: cell i is free for sequence i.
  for (std::uint32_t i = 0; i < log_cells; ++i) s->log[i].stamp.store(i, std::memory_order_relaxed);
  // The default lane, so that its index is fixed.
  {
    auto def = BrandedId::parse(kDefaultGroup);
    std::uint64_t a = lane_key_a(*def), b = lane_key_b(*def);
    std::uint64_t i = lane_hash(a, b, s->seed) & s->lane_mask;
    s->lanes[i].key_a.store(a, std::memory_order_relaxed);
    s->lanes[i].key_b.store(b, std::memory_order_relaxed);
    h->default_lane = std::uint32_t(i);
    h->lanes_used.store(1, std::memory_order_relaxed);
  }
  // [R0] release: publishes every field above; pairs with [A0] in open.
  h->magic.store(kMagic, std::memory_order_release);
  return finish_attach(std::move(s));
}

Result<std::unique_ptr<Segment>> open_segment(std::string_view name, bool observer) {
  if (auto st = check_name(name); !st) return st.error();
  auto s = std::make_unique<Segment>();
  s->name = std::string(name);
  const std::string seg = "segment '" + s->name + "'";
  bip::offset_t size = 0;
  try {
    bip::shared_memory_object shm(bip::open_only, s->name.c_str(), bip::read_write);
    if (!shm.get_size(size)) return make_error(Errc::system, "cannot size " + seg, errno);
    if (size == 0)
      return make_error(Errc::not_initialized, seg + " is empty: its creator died before sizing it (or is creating it now); "
                                               "remove it with 'fairlane destroy " + s->name + "'");
    if (std::uint64_t(size) < sizeof(Header))
      return make_error(Errc::truncated, seg + " is " + std::to_string(size) + " bytes, smaller than a header (" +
                                             std::to_string(sizeof(Header)) + ")");
    s->region = bip::mapped_region(shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    return from_boost(e, "open", name);
  }
  auto* h = reinterpret_cast<Header*>(s->region.get_address());
  // [A0] acquire: pairs with [R0]; after it every creation-time field is visible.
  const std::uint64_t magic = h->magic.load(std::memory_order_acquire);
  if (magic == 0)
    return make_error(Errc::not_initialized, seg + " was never finished: its creator died while creating it "
                                             "(or is creating it now); remove it with 'fairlane destroy " + s->name + "'");
  if (magic != kMagic) return make_error(Errc::wrong_layout, seg + " is not a fairlane segment (bad magic)");
  if (h->layout_version != kLayoutVersion)
    return make_error(Errc::wrong_layout, seg + " was made by layout " + std::to_string(h->layout_version) +
                                              ", this is layout " + std::to_string(kLayoutVersion));
  if (h->header_bytes != sizeof(Header))
    return make_error(Errc::wrong_layout, seg + " has a header of " + std::to_string(h->header_bytes) +
                                              " bytes, this build expects " + std::to_string(sizeof(Header)));
  if (h->segment_bytes > std::uint64_t(size))
    return make_error(Errc::truncated, seg + " is " + std::to_string(size) + " bytes but its header says " +
                                           std::to_string(h->segment_bytes));
  // The geometry must be exactly what these capacities give; anything else
  // is a corrupt header and we must not follow its offsets.
  if (h->job_capacity < 1 || h->job_capacity > kMaxJobs || h->lane_capacity < 2 || h->lane_capacity > kMaxLanes - 1 ||
      h->payload_bytes > kMaxPayload || !valid_kind(std::string_view(h->job_kind, 3)) ||
      h->recovery_ms < kMinRecoveryMs || h->recovery_ms > kMaxRecoveryMs ||
      (h->log_cells & (h->log_cells - 1)) || h->log_cells > (1U << 26) ||
      (h->log_cells && (h->durability < 1 || h->durability > 2 || h->on_full > 1 ||
                        std::memchr(h->mirror_url, 0, kMirrorUrlBytes) == nullptr)))
    return make_error(Errc::corrupt, seg + " has a corrupt header (capacities out of range)");
  const Geometry g = geometry_for(h->job_capacity, h->lane_capacity - 1, h->payload_bytes, h->log_cells);
  if (g.total != h->segment_bytes || g.words_off != h->words_off || g.slots_off != h->slots_off ||
      g.lanes_off != h->lanes_off || g.ring_off != h->ring_off || g.index_off != h->index_off ||
      g.procs_off != h->procs_off || g.waits_off != h->waits_off || g.log_off != h->log_off || g.slot_bytes != h->slot_bytes || g.ring_cells != h->ring_cells ||
      g.index_buckets != h->index_buckets || g.lane_buckets != h->lane_buckets || h->default_lane >= h->lane_buckets)
    return make_error(Errc::corrupt, seg + " has a corrupt header (table offsets do not match its capacities)");
  bind_tables(*s);
  return finish_attach(std::move(s), observer);
}

Status remove_segment(std::string_view name) {
  if (auto st = check_name(name); !st) return st;
  std::string n(name);
  // shm_unlink gives a precise errno where Boost's remove() gives a bool.
  if (::shm_unlink(("/" + n).c_str()) != 0) {
    int err = errno;
    if (err == ENOENT) return make_error(Errc::not_found, "segment '" + n + "' does not exist");
    if (err == EACCES || err == EPERM) return make_error(Errc::permission_denied, "cannot remove segment '" + n + "'", err);
    return make_error(Errc::system, "cannot remove segment '" + n + "'", err);
  }
  return ok_status();
}

}  // namespace fairlane::detail
