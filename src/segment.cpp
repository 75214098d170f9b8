// Creating, opening, validating and removing a segment; process and thread
// attachment; liveness of attached processes.
#include "segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fairlane/valkey.hpp"

#include "atomic128.hpp"
#include "clock.hpp"
#include "failpoint.hpp"
#include "hash.hpp"
#include "retry_codec.hpp"
#include "util.hpp"

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
      // make_error appends strerror(err); boost's text is the same reason
      // for a system error, so it is added only when it says more.
      if (err == 0 || std::string_view(e.what()) != std::strerror(err))
        return make_error(Errc::system, "cannot " + std::string(what) + " " + seg + " (" + e.what() + ")", err);
      return make_error(Errc::system, "cannot " + std::string(what) + " " + seg, err);
  }
}

Status check_name(std::string_view name) {
  if (name.empty() || name.size() > 200 || name.find('/') != std::string_view::npos || name == "." || name == "..")
    return make_error(Errc::invalid_argument,
                      "invalid segment name '" + std::string(name) + "': 1 to 200 characters, no '/'");
  return ok_status();
}

// Adds `from` into `to` and zeroes `from`. The writers of `from` are gone
// (a released thread record, a detached process): relaxed is enough; the
// exchange keeps a concurrent fold from counting anything twice.
void fold_counters(CounterBlock& to, CounterBlock& from) noexcept {
  auto fold = [](std::atomic<std::uint64_t>& f, std::atomic<std::uint64_t>& t) {
    const std::uint64_t v = f.exchange(0, std::memory_order_relaxed);
    if (v) t.fetch_add(v, std::memory_order_relaxed);
  };
  fold(from.enqueued, to.enqueued);
  fold(from.duplicates, to.duplicates);
  fold(from.claimed, to.claimed);
  fold(from.completed, to.completed);
  fold(from.retried, to.retried);
  fold(from.dead, to.dead);
  fold(from.expired, to.expired);
  fold(from.promoted, to.promoted);
  fold(from.drained, to.drained);
  fold(from.released, to.released);
}

std::uint32_t ceil_log2(std::uint64_t v) noexcept {
  std::uint32_t b = 0;
  while ((1ULL << b) < v) ++b;
  return b;
}

}  // namespace

namespace {
// Fields 3 (state) and 22 (starttime) of a /proc/.../stat file; false if it
// cannot be read (no such process, or /proc is not ours to read).
bool read_proc_stat_at(const char* path, char& state, std::uint64_t& start_time) noexcept {
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
  // After ") " come fields 3.. ; starttime is field 22. Each space begins
  // the next field: p stops on the first character of field 22. (Until
  // 2026-12-05 it stopped on field 21, itrealvalue, which is always 0: every
  // start time was 0, which reads as "not written yet", so a pid reused by
  // another process was taken for the attached one.)
  int field = 2;
  for (++p; *p && field < 22; ++p)
    if (*p == ' ') ++field;
  if (field != 22) return false;
  start_time = std::strtoull(p, nullptr, 10);
  return true;
}

bool read_proc_stat(int pid, char& state, std::uint64_t& start_time) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  return read_proc_stat_at(path, state, start_time);
}

}  // namespace

std::uint64_t process_start_time(int pid) noexcept {
  char state = 0;
  std::uint64_t start = 0;
  return read_proc_stat(pid, state, start) ? start : 0;
}

namespace {

// This process's start time, from /proc/self: in a PID namespace whose
// /proc is not its own, /proc/<getpid()> names another process.
std::uint64_t own_start_time() noexcept {
  char state = 0;
  std::uint64_t start = 0;
  return read_proc_stat_at("/proc/self/stat", state, start) ? start : 0;
}

}  // namespace

OwnedFd::~OwnedFd() {
  if (fd >= 0) ::close(fd);
}

namespace {

// The liveness lock's byte range of process record i.
struct flock liveness_range(std::uint32_t i, short type) noexcept {
  struct flock f {};
  f.l_type = type;
  f.l_whence = SEEK_SET;
  f.l_start = off_t(kLivenessLockBase + i);
  f.l_len = 1;
  return f;
}

// Takes the liveness lock of record i, without waiting: taken, held by
// another (a detacher between clearing its word and giving the lock up), or
// not to be had here (no file, or no OFD locks on it).
enum class LockTake { taken, busy, unsupported };
LockTake take_liveness_lock(const Segment& s, std::uint32_t i) noexcept {
  if (s.file.fd < 0) return LockTake::unsupported;
  struct flock f = liveness_range(i, F_WRLCK);
  if (::fcntl(s.file.fd, F_OFD_SETLK, &f) == 0) return LockTake::taken;
  return errno == EAGAIN || errno == EACCES ? LockTake::busy : LockTake::unsupported;
}

void drop_liveness_lock(const Segment& s, std::uint32_t i) noexcept {
  if (s.file.fd < 0) return;
  struct flock f = liveness_range(i, F_UNLCK);
  (void)::fcntl(s.file.fd, F_OFD_SETLK, &f);
}

// Record i's liveness lock as another open of the file sees it: held (by
// anyone but this open), free, or unknown (no file, or the look failed).
enum class LockLook { held, free, unknown };
LockLook look_at_liveness_lock(const Segment& s, std::uint32_t i) noexcept {
  if (s.file.fd < 0) return LockLook::unknown;
  struct flock f = liveness_range(i, F_WRLCK);
  if (::fcntl(s.file.fd, F_OFD_GETLK, &f) != 0) return LockLook::unknown;
  return f.l_type != F_UNLCK ? LockLook::held : LockLook::free;
}

}  // namespace

// A held lock is asked first and believed whatever the word says: the word
// is shared bytes that a stray write can change, and a word whose
// kOwnerLocked or pid was scribbled over must not get a live locked owner
// judged by a pid that means nothing (another PID namespace) or names
// somebody else. The byte is held only by an owner, by a detacher after it
// cleared its word, or by an attacher before its CAS, and the kernel drops
// it when its holder dies.
bool owner_alive(const Segment& s, std::uint32_t i, std::uint64_t owner, std::uint64_t start_time) noexcept {
  // Our own lock does not show to our own look. (A copy's record is its
  // parent's, whose lock does show: a copy taking a record of its own
  // judges its dead parent's as any other.) The flag first, acquire: a look
  // that makes no adoption (processes(), mirror_status()) may run while
  // another thread adopts the copy, and me and me_index are read only once
  // the flag is down, after the adoption's release (or there was none);
  // nothing writes them after that.
  if (s.copy_state.load(std::memory_order_acquire) == Segment::kCopyOwn && s.me && i == s.me_index) return true;
  if (i < s.proc_count) {
    const LockLook look = look_at_liveness_lock(s, i);
    if (look == LockLook::held) return true;
    if (owner & kOwnerLocked) return look == LockLook::unknown;  // every doubt counts as alive
  }
  return process_alive(int(owner & 0xFFFFFFFF), start_time);
}

ProcessState owner_state(const Segment& s, std::uint32_t i, std::uint64_t owner, std::uint64_t start_time) noexcept {
  if (!owner_alive(s, i, owner, start_time)) return ProcessState::dead;
  char state = 0;
  std::uint64_t now = 0;
  if (read_proc_stat(int(owner & 0xFFFFFFFF), state, now) && (start_time == 0 || now == start_time) &&
      (state == 'T' || state == 't'))
    return ProcessState::stopped;
  return ProcessState::alive;
}

int dead_owner_pid(const Segment& s, std::uint32_t i) noexcept {
  if (i >= s.proc_count) return 0;
  const ProcRecord& p = s.procs[i];
  const std::uint64_t owner = p.owner.load(std::memory_order_acquire);
  if (!(owner & kOwnerStamped)) return 0;
  const std::uint64_t inc = p.incarnation.load(std::memory_order_relaxed);
  const std::uint64_t start = p.start_time.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (p.owner.load(std::memory_order_relaxed) != owner) return 0;  // changed hands meanwhile
  if (owner_alive(s, i, owner, start)) return 0;
  // The lock is the record's, not the owner's: the verdict holds only if
  // the record did not change hands while it was looked at (an owner clears
  // its word before it gives the lock up, and every attach moves the
  // incarnation on).
  if (p.owner.load(std::memory_order_acquire) != owner || p.incarnation.load(std::memory_order_relaxed) != inc) return 0;
  return int(owner & 0xFFFFFFFF);
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

// A wrong "dead" would let a survivor finish or undo what that process is
// still doing, so every doubt counts as alive.
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

Geometry geometry_for(std::uint32_t jobs, std::uint32_t lanes, std::uint32_t payload_bytes, std::uint32_t procs,
                      std::uint32_t log_cells) noexcept {
  Geometry g{};
  g.log_cells = log_cells;
  g.jobs = jobs;
  g.lanes = lanes + 1;  // + the default lane (record 0)
  // Eight directory entries per lane: a group's two buckets are full only
  // with a vanishing probability (docs/design.md, "The lane directory").
  g.dir_buckets = std::uint32_t(next_pow2(std::max<std::uint64_t>(2, (std::uint64_t(g.lanes) * 8 + kDirWays - 1) / kDirWays)));
  g.payload_bytes = payload_bytes;
  g.slot_bytes = std::uint32_t(sizeof(SlotRecord) + round_up(payload_bytes, kCacheLine));
  // At most one valid cell per live lane; stale cells left by rotations
  // that lost their race are passed within one lap. Four cells per lane
  // plus room for every thread's in-flight push keeps the tail off the head.
  g.procs = procs;
  g.threads = std::max<std::uint32_t>(64, procs * 16);
  g.ring_cells = std::uint32_t(next_pow2(std::uint64_t(g.lanes) * 4 + g.threads + 64));
  // Eight id index entries per job slot (first-fit two-choice: id_index.cpp,
  // docs/design.md "The id index's size"): a pair of buckets full of live
  // jobs while slots are free is then about a 1-in-10^9 event an insert.
  // Exactly that many buckets, not a power of two (ids map to buckets by a
  // multiply, id_index.hpp): every queue has the same 7/8 of a job per
  // bucket at most, and no queue pays for up to twice the index it needs.
  g.index_buckets = std::uint32_t(std::max<std::uint64_t>(2, (std::uint64_t(jobs) * kIndexEntriesPerSlot + kIndexWays - 1) / kIndexWays));
  g.slot_bits = std::max<std::uint32_t>(1, ceil_log2(jobs));
  std::uint64_t off = round_up(sizeof(Header), 4096);
  g.words_off = off;
  off = round_up(off + std::uint64_t(jobs) * sizeof(Word128), kCacheLine);
  g.tags_off = off;
  off = round_up(off + jobs, kCacheLine);
  g.hints_off = off;
  off = round_up(off + (std::uint64_t(hint_blocks(jobs)) + hint_groups(jobs)) * 4, kCacheLine);
  g.slots_off = off;
  off = round_up(off + std::uint64_t(jobs) * g.slot_bytes, kCacheLine);
  g.lanes_off = off;
  off = round_up(off + std::uint64_t(g.lanes) * sizeof(LaneRecord), kCacheLine);
  g.dir_off = off;
  off = round_up(off + std::uint64_t(g.dir_buckets) * sizeof(DirBucket), kCacheLine);
  g.ring_off = off;
  off = round_up(off + std::uint64_t(g.ring_cells) * 8, kCacheLine);
  g.index_off = off;
  off = round_up(off + std::uint64_t(g.index_buckets) * sizeof(IndexBucket), kCacheLine);
  g.procs_off = off;
  off = round_up(off + std::uint64_t(procs) * sizeof(ProcRecord), kCacheLine);
  g.threads_off = off;
  off = round_up(off + std::uint64_t(g.threads) * sizeof(ThreadRecord), kCacheLine);
  g.waits_off = off;
  off = round_up(off + std::uint64_t(g.lanes) * sizeof(WaitBuckets), kCacheLine);
  g.log_off = off;
  off = round_up(off + std::uint64_t(log_cells) * sizeof(LogCell), 4096);
  g.total = off;
  return g;
}

namespace {

std::atomic<std::uint64_t> next_handle_id{1};

// One real read of a header field that another process could be rewriting
// (a plain read may be repeated by the compiler, and see two values).
template <class T>
T read_once(const T& field) noexcept {
  return *static_cast<const volatile T*>(&field);
}

// Binds a handle to its tables from a checked geometry (not from the
// header's own fields, which another process may rewrite after they were
// checked), with the header's seed, recovery bound and kind as checked.
void bind_tables(Segment& s, const Geometry& g, std::uint64_t seed, std::uint32_t recovery_ms, const char* kind) {
  auto* base = static_cast<unsigned char*>(s.region.get_address());
  Header* h = reinterpret_cast<Header*>(base);
  s.h = h;
  s.words = reinterpret_cast<Word128*>(base + g.words_off);
  s.tags = reinterpret_cast<std::atomic<std::uint8_t>*>(base + g.tags_off);
  s.hints = reinterpret_cast<std::atomic<std::uint32_t>*>(base + g.hints_off);
  s.group_hints = s.hints + hint_blocks(g.jobs);
  s.slots = base + g.slots_off;
  s.lanes = reinterpret_cast<LaneRecord*>(base + g.lanes_off);
  s.dir = reinterpret_cast<DirBucket*>(base + g.dir_off);
  s.ring = reinterpret_cast<std::atomic<std::uint64_t>*>(base + g.ring_off);
  s.index = reinterpret_cast<IndexBucket*>(base + g.index_off);
  s.procs = reinterpret_cast<ProcRecord*>(base + g.procs_off);
  s.threads = reinterpret_cast<ThreadRecord*>(base + g.threads_off);
  s.waits = reinterpret_cast<WaitBuckets*>(base + g.waits_off);
  s.log = g.log_cells ? reinterpret_cast<LogCell*>(base + g.log_off) : nullptr;
  s.log_mask = g.log_cells ? g.log_cells - 1 : 0;
  s.jobs = g.jobs;
  s.lane_count = g.lanes;
  s.slot_bytes = g.slot_bytes;
  s.payload_bytes = g.payload_bytes;
  s.slot_bits = g.slot_bits;  // 1..26 (ceil_log2 of at most 2^26 - 2 jobs)
  s.slot_mask = (1ULL << s.slot_bits) - 1;
  s.token_ctr_mask = ~0ULL >> s.slot_bits;
  s.proc_count = g.procs;
  s.sweep_end = g.procs + g.jobs;
  s.thread_count = g.threads;
  s.dir_mask = g.dir_buckets - 1;
  s.ring_mask = g.ring_cells - 1;
  s.index_buckets = g.index_buckets;
  s.seed = seed;
  s.recovery_ms = recovery_ms;
  std::memcpy(s.kind, kind, 3);
  s.kind_code = kind_code(std::string_view(s.kind, 3));
  std::memcpy(&s.kind_word, s.kind, 3);
  s.handle_id = next_handle_id.fetch_add(1, std::memory_order_relaxed);
}

// Handles alive in this process (a thread that exits releases its records
// only in handles that still exist).
std::mutex live_handles_mu;
std::vector<std::uint64_t> live_handles;

// The process records this process's handles hold, by the segment's file
// (device and inode: two handles of one segment map it apart) and index.
struct HeldRecord {
  dev_t dev;
  ino_t ino;
  std::uint32_t index;
  pid_t pid;  // getpid() at attach: a child forked without exec inherits the list, not the records
};
std::vector<HeldRecord> held_records;  // under live_handles_mu

// Handles alive in this process, for the fork handler (under live_handles_mu).
std::vector<Segment*> live_segments;

// Opens the segment's file by name for the liveness locks if it is still the
// mapped file (device and inode as read at open); -1 if not. Only
// async-signal-safe calls: the fork handler's child runs it.
int open_lock_file_by_name(const Segment& s) noexcept {
  if (!s.file_known) return -1;
  const int fd = ::shm_open(s.shm_name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_dev == s.file_dev && st.st_ino == s.file_ino) return fd;
  ::close(fd);
  return -1;
}

void forget_thread_records_in_child() noexcept;  // below, with the thread records

// pthread_atfork handlers: the list, and each handle's list of the thread
// records it took (under the same mutex), are held across the fork so the
// child finds them whole. (One mutex: locking each handle's own as well,
// a process with more than 64 handles open overflowed TSan's deadlock
// detector at every fork.)
// The child lets go of its parent's lock descriptions (the parent's liveness
// locks stay with the parent alone) and opens its own; every handle it
// inherited is a copy and no record is its own, whatever getpid() says (a
// child forked into a new PID namespace by a process that is pid 1 of its
// own is pid 1 too). None of the parent's thread records is the child's
// either, nor its cached thread id: the forking thread's came across in
// its thread-local cache, and the child's calls through a copy wrote their
// intents into the record the parent's thread went on writing (a take of
// the child's, overwritten, was never undone). A copy takes a process
// record of its own at its first call that writes (adopt_copy), and thread
// records in its own name after that. Only async-signal-safe calls, and
// no memory freed.
void lock_live_list() noexcept { live_handles_mu.lock(); }
void unlock_live_list() noexcept { live_handles_mu.unlock(); }
void reopen_lock_files_in_child() noexcept {
  held_records.clear();
  forget_thread_records_in_child();
  for (Segment* s : live_segments) {
    s->attach_pid = -1;
    if (s->me) s->copy_state.store(Segment::kCopyPending, std::memory_order_relaxed);
    s->taken.clear();
    if (s->file.fd < 0) continue;
    ::close(s->file.fd);
    s->file.fd = open_lock_file_by_name(*s);
  }
  live_handles_mu.unlock();
}
void install_fork_handlers() {
  static const bool installed = [] {
    ::pthread_atfork(lock_live_list, unlock_live_list, reopen_lock_files_in_child);
    return true;
  }();
  (void)installed;
}

// The liveness locks' open of the segment's file, from shm_fd (the open the
// mapping was made from). An OFD lock belongs to its open file description
// and lasts while any descriptor or mapping refers to it; a child forked
// without exec refers to all of its parent's. Taken on the mapping's own
// description, a lock could not be let go of by such a child (its mapping
// cannot be closed), so a parent that died before it was judged alive for
// as long as the child lived. So the locks get a description of their own,
// which the fork handler closes in the child (reopen_lock_files_in_child).
// By name, checked to be the mapped file; where that fails (the name was
// removed or reused since), a duplicate of shm_fd, with the old limit.
//
// Opened and listed for the fork handler in one step, under the lock the
// handler holds across a fork: opened first and listed after, a fork by
// another thread in between gave its child the description unlisted, which
// the child kept open, and the lock taken on it lived on in that child
// (found in review of ebd209c).
void open_lock_file(Segment& s, int shm_fd) {
  install_fork_handlers();
  s.shm_name = "/" + s.name;
  struct stat mapped {};
  if (::fstat(shm_fd, &mapped) == 0) {
    s.file_dev = mapped.st_dev;
    s.file_ino = mapped.st_ino;
    s.file_known = true;
  }
  std::lock_guard l(live_handles_mu);
  live_segments.reserve(live_segments.size() + 1);  // the push below cannot throw after the open
  s.file.fd = open_lock_file_by_name(s);
  if (s.file.fd < 0) s.file.fd = ::fcntl(shm_fd, F_DUPFD_CLOEXEC, 0);
  live_segments.push_back(&s);
}

// Lists a handle as alive in this process (once its tables are bound).
void register_live(Segment& s) {
  std::lock_guard l(live_handles_mu);
  live_handles.push_back(s.handle_id);
}

// Take a process record: a free one (looking from a rotating start, so a
// record is not reused at once by the next short-lived process), else one
// whose owner is dead. Its incarnation moves on, so leases of an earlier
// owner are not taken for ours (Holder), and goes into the owner word, so
// that no two owners of a record ever write the same word (an attacher that
// judged the record's last owner dead and was overtaken by another attacher
// with the same pid, pid 1 of another container say, would otherwise take
// that live owner's record with its CAS).
//
// Only a record whose liveness lock it takes: an owner without the lock is
// judged by pid, which means nothing across PID namespaces. A free record's
// lock byte is held by a detacher between clearing its word and giving the
// lock up, for a moment, or for as long as it is stopped there: the attach
// waits for it up to kLockWaitMs in all, then tries another record.
// Without OFD locks (an unsupported file) it attaches unlocked, judged by
// pid and start time. `busy` counts the free records it gave up on because
// their lock stayed busy.
ProcRecord* attach(Segment& s, std::uint32_t& busy, std::uint64_t lock_wait_ms = 1000) {
  const int pid = getpid();
  const std::uint64_t owner = kOwnerAttached | std::uint32_t(pid);
  const std::uint64_t start = own_start_time();
  const std::uint32_t n = s.proc_count;
  const std::uint32_t from = std::uint32_t(s.h->recovery.finished.load(std::memory_order_relaxed) +
                                           std::uint64_t(unix_ms()) + std::uint64_t(pid)) % n;
  const std::uint64_t wait_until = monotonic_us() / 1000 + lock_wait_ms;
  busy = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t k = 0; k < n; ++k) {
      const std::uint32_t i = (from + k) % n;
      ProcRecord& p = s.procs[i];
      std::uint64_t cur = p.owner.load(std::memory_order_acquire);
      bool take = cur == 0;
      // A dead owner's record, once the sweep has settled what its fallback
      // intent says it was in the middle of.
      if (!take && pass == 1 && (cur & kOwnerStamped) && p.intent.load(std::memory_order_acquire) == 0 &&
          dead_owner_pid(s, i) != 0)
        take = true;
      if (!take) continue;
      // The lock first, then the word: an attacher stopped or killed while it
      // waits for the lock holds no word (an unstamped word is never judged,
      // and would be held for good), and a stamped word that says locked is
      // judged by its lock. Held before the word is ours, the lock only
      // makes a judge of the record's dead owner wait a moment. The wait
      // ends as soon as the record is somebody else's.
      LockTake lock = take_liveness_lock(s, i);
      while (lock == LockTake::busy && monotonic_us() / 1000 < wait_until &&
             p.owner.load(std::memory_order_acquire) == cur) {
        FAIRLANE_FAILPOINT("attach.lock_busy");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        lock = take_liveness_lock(s, i);
      }
      if (lock == LockTake::busy) {
        // Still free after the wait: a detacher holds its lock. (Taken
        // meanwhile, it went to another attacher, which held its lock
        // before its CAS: the segment may just be full.)
        if (pass == 0 && p.owner.load(std::memory_order_acquire) == cur) ++busy;
        continue;
      }
      const bool locked = lock == LockTake::taken;
      // [A1] acq_rel: claims the record; pairs with [R1] of a detaching owner.
      if (!p.owner.compare_exchange_strong(cur, owner, std::memory_order_acq_rel)) {
        if (locked) drop_liveness_lock(s, i);
        continue;
      }
      const std::uint64_t inc = p.incarnation.fetch_add(1, std::memory_order_relaxed) + 1;
      // A dead owner's threads parked in claim_wait or enqueue_wait are not
      // waiting any more (unless a sweep took them out already: then the
      // counts here are 0); the counts are ours from here.
      take_parked(s, p, inc);
      p.start_time.store(start, std::memory_order_relaxed);
      p.attached_unix_ms.store(unix_ms(), std::memory_order_relaxed);
      p.seen.store(0, std::memory_order_relaxed);
      p.intent_tid.store(0, std::memory_order_relaxed);
      p.intent.store(0, std::memory_order_relaxed);
      // A dead owner's counts stay counted.
      fold_counters(s.h->retired, p.retired);
      p.owner.store(owner | kOwnerStamped | (locked ? kOwnerLocked : 0) | ((inc & kOwnerIncMask) << kOwnerIncShift),
                    std::memory_order_release);
      return &p;
    }
  }
  return nullptr;
}

// Handle s of this process has just attached (record me_index, its lock on
// s's own open of the file): its pid, and the record in held_records.
// Under live_handles_mu.
void note_held_record(Segment& s) noexcept {
  s.attach_pid = ::getpid();
  if (!s.file_known) return;
  try {
    held_records.push_back({s.file_dev, s.file_ino, s.me_index, s.attach_pid});
  } catch (...) {
  }
}

Result<std::unique_ptr<Segment>> finish_attach(std::unique_ptr<Segment> s, bool observer) {
  s->observer = observer;
  if (observer) return s;  // a tool that only looks takes no record
  std::uint32_t busy = 0;
  s->me = attach(*s, busy);
  // Not an OS error (Errc::system with no errno said nothing to act on):
  // every record is held by a live process, or its lock by one detaching.
  if (!s->me && busy > 0)
    return make_error(Errc::busy, "segment '" + s->name + "' has no free process record: " +
                                      std::to_string(busy) +
                                      " free ones are still locked by a process that detached from them "
                                      "and has not let go of its liveness lock (stopped there?); try again");
  if (!s->me)
    return make_error(Errc::busy, "segment '" + s->name + "' has no free process record (" +
                                      std::to_string(s->proc_count) +
                                      (s->proc_count == 1 ? " process" : " processes") +
                                      " attached: try again once one detaches, or create it with a larger "
                                      "--processes, QueueOptions::processes)");
  s->me_index = std::uint32_t(s->me - s->procs);
  std::lock_guard l(live_handles_mu);
  note_held_record(*s);
  return s;
}

}  // namespace

bool writer_cold(Segment& s) noexcept { return writer(s); }

bool adopt_copy(Segment& s) noexcept {
  // An unattached copy looks again once its retry time has passed, no sooner
  // (a clock read a call while it is unattached: each look scans every
  // process record, asking each one's liveness lock). On the segment clock,
  // so that a test moves it on with advance_clock rather than waiting.
  const auto too_soon = [&s] { return segment_now_ms(s) < s.copy_retry_ms.load(std::memory_order_relaxed); };
  if (s.copy_state.load(std::memory_order_acquire) == Segment::kCopyUnattached && too_soon()) return false;
  // The handle list's mutex: one adoption at a time in this process (other
  // threads of the child wait for it, as for an open), and none across a
  // fork (the fork handlers hold it).
  std::lock_guard l(live_handles_mu);
  const std::uint8_t state = s.copy_state.load(std::memory_order_relaxed);
  if (state == Segment::kCopyOwn) return true;  // another thread did it
  if (state == Segment::kCopyUnattached && too_soon()) return false;  // another thread looked just now
  std::uint32_t busy = 0;
  ProcRecord* r = nullptr;
  try {
    // A look again does not wait on busy locks: it is inside a call that
    // writes, and the next look is a second away.
    r = attach(s, busy, state == Segment::kCopyPending ? 1000 : 0);
  } catch (...) {
    r = nullptr;
  }
  if (!r) {
    // No record to be had: it stays unattached, me its parent's (for the
    // acks of the leases it was handed), and takes no thread record.
    s.copy_retry_ms.store(segment_now_ms(s) + Segment::kCopyRetryMs, std::memory_order_relaxed);
    s.copy_state.store(Segment::kCopyUnattached, std::memory_order_release);
    return false;
  }
  // (Atomic stores: a complete, which makes no adoption, may read me
  // meanwhile in another thread; it acts for either record.)
  std::atomic_ref<std::uint32_t>(s.me_index).store(std::uint32_t(r - s.procs), std::memory_order_relaxed);
  std::atomic_ref<ProcRecord*>(s.me).store(r, std::memory_order_relaxed);
  note_held_record(s);
  // Release: a thread that sees kCopyOwn sees me as set here.
  s.copy_state.store(Segment::kCopyOwn, std::memory_order_release);
  return true;
}

namespace {

// This process's thread records, per handle: a thread takes one on its
// first call and keeps it until it exits or the handle closes.
// (Taken in this process: a child forked without exec starts with none,
// forget_thread_records_in_child.)
struct ThreadSlots {
  struct Entry {
    std::uint64_t handle = 0;
    Segment* seg = nullptr;
    ThreadRecord* rec = nullptr;
    std::uint64_t owner = 0;  // the owner value it was taken with
  };
  std::vector<Entry> entries;
  ~ThreadSlots();
};

// Gives back a record a thread of handle s took with owner value `owner`,
// if the record still has that value: a thread that exited gave its record
// back already, and another thread may hold it since. Claimed by a CAS
// (ThreadOwner::kReleasing: still the owner's, so nobody takes it or
// judges it otherwise) before anything of it is written.
void release_thread_record(Segment& s, ThreadRecord& r, std::uint64_t owner) noexcept {
  if (!r.owner.compare_exchange_strong(owner, owner | ThreadOwner::kReleasing, std::memory_order_acquire,
                                       std::memory_order_relaxed))
    return;
  fold_counters(s.me ? s.me->retired : s.h->retired, r.counters);
  r.intent.store(0, std::memory_order_relaxed);
  // [R13] release: the counters are folded before the record is reused.
  r.owner.store(0, std::memory_order_release);
}

ThreadSlots::~ThreadSlots() {
  std::lock_guard l(live_handles_mu);
  for (const Entry& e : entries)
    if (std::find(live_handles.begin(), live_handles.end(), e.handle) != live_handles.end())
      release_thread_record(*e.seg, *e.rec, e.owner);
}

thread_local ThreadSlots tls_slots;
// Has this thread touched tls_slots (constructed it)? Trivially destructible:
// the fork handler reads it without constructing anything.
thread_local bool t_has_slots = false;

void forget_thread_records_in_child() noexcept {
  if (t_has_slots) tls_slots.entries.clear();  // the forking thread's, the only thread of the child
  t_thread_cache = {};
  t_tid = 0;  // its id too (read again at the next use)
}

}  // namespace

void raise_threads_used(Header& h, std::uint32_t to) noexcept {
  std::uint32_t cur = h.threads_used.load(std::memory_order_relaxed);
  while (cur < to && !h.threads_used.compare_exchange_weak(cur, to, std::memory_order_seq_cst)) {
  }
}

ThreadRecord* Segment::thread_slow() noexcept {
  // (A copy not yet adopted takes none: it would be in its parent's name.
  // The flag first: me is written by the adoption, which clears it after.)
  if (copy_state.load(std::memory_order_acquire) != kCopyOwn || !me) return nullptr;
  t_has_slots = true;
  ThreadCache& last = t_thread_cache;
  for (const auto& e : tls_slots.entries)
    if (e.handle == handle_id) {
      last = {handle_id, e.rec};
      return e.rec;
    }
  // First call of this thread on this handle: take the lowest free thread
  // record, so that the records in use stay below a mark that only rises
  // (threads_used) and a scan of them reads no more records than have ever
  // been used at once.
  const std::uint64_t owner = ThreadOwner::make(me_index, me->incarnation.load(std::memory_order_relaxed));
  for (std::uint32_t i = 0; i < thread_count; ++i) {
    ThreadRecord& r = threads[i];
    std::uint64_t cur = r.owner.load(std::memory_order_acquire);
    if (cur != 0) {
      // A record of a process that is gone (it died without detaching) is
      // free too, once the sweep has settled what it was in the middle of.
      const std::uint32_t p1 = ThreadOwner::proc1(cur);
      const bool gone = p1 == 0 || p1 > proc_count ||
                        (procs[p1 - 1].incarnation.load(std::memory_order_relaxed) & 0xFF) != ThreadOwner::inc(cur) ||
                        !(procs[p1 - 1].owner.load(std::memory_order_acquire) & kOwnerAttached) ||
                        dead_owner_pid(*this, p1 - 1) != 0;
      if (!gone || r.intent.load(std::memory_order_acquire) != 0) continue;
    }
    // The mark first: a scanner that sees anything this thread writes into
    // the record (its owner, its intents, all released after this RMW) sees
    // the mark cover it. Raised even if the CAS below fails: one record more.
    raise_threads_used(*h, i + 1);
    // [A13] acquire: pairs with [R13].
    if (!r.owner.compare_exchange_strong(cur, owner, std::memory_order_acq_rel)) continue;
    if (cur != 0) fold_counters(h->retired, r.counters);
    r.intent.store(0, std::memory_order_relaxed);
    try {
      tls_slots.entries.push_back({handle_id, this, &r, owner});
      std::lock_guard l(live_handles_mu);
      const auto it = std::find_if(taken.begin(), taken.end(), [&](const Taken& t) { return t.rec == &r; });
      if (it == taken.end()) taken.push_back({&r, owner});
      else it->owner = owner;
    } catch (...) {
      std::erase_if(tls_slots.entries, [&](const ThreadSlots::Entry& e) { return e.rec == &r && e.handle == handle_id; });
      r.owner.store(0, std::memory_order_release);
      return nullptr;
    }
    last = {handle_id, &r};
    return &r;
  }
  return nullptr;
}

CounterBlock& Segment::counters() noexcept {
  if (ThreadRecord* t = thread()) return t->counters;
  static CounterBlock sink{};  // an observer counts nothing
  return me ? me->retired : sink;
}

Segment::~Segment() {
  {
    std::lock_guard l(live_handles_mu);
    // Listed at its file's open, before any check of the segment.
    live_segments.erase(std::remove(live_segments.begin(), live_segments.end(), this), live_segments.end());
    live_handles.erase(std::remove(live_handles.begin(), live_handles.end(), handle_id), live_handles.end());
  }
  if (!h) return;
  auto& mine = tls_slots.entries;
  mine.erase(std::remove_if(mine.begin(), mine.end(), [&](const ThreadSlots::Entry& e) { return e.handle == handle_id; }),
             mine.end());
  if (!me) return;
  if (file_known) {
    std::lock_guard l(live_handles_mu);
    const auto it = std::find_if(held_records.begin(), held_records.end(), [&](const HeldRecord& r) {
      return r.dev == file_dev && r.ino == file_ino && r.index == me_index && r.pid == attach_pid;
    });
    if (it != held_records.end()) held_records.erase(it);
  }
  // Every thread record this handle's threads took in this process (other
  // threads' too: a handle closes when no thread uses it any more). Still
  // the handle's unless its thread exited (then another may hold it).
  for (const Taken& t : taken) release_thread_record(*this, *t.rec, t.owner);
  // A child forked without exec closing the copy of its parent's handle:
  // the record and its lock are the parent's.
  if (attach_pid != ::getpid()) return;
  fold_counters(h->retired, me->retired);
  me->start_time.store(0, std::memory_order_relaxed);
  // [R1] release: hands the record back; pairs with [A1].
  me->owner.store(0, std::memory_order_release);
  // The lock after the word: a judge that finds the lock free while the
  // word still names us would take a clean detach for a death. Given up
  // explicitly, not by the close: a child made by a bare clone (no fork
  // handler) shares this open of the file. Whatever the word said of it
  // (shared bytes; giving up a lock not held is nothing).
  drop_liveness_lock(*this, me_index);
}

int holder_gone(Segment& s, std::uint32_t holder, std::uint64_t now_ms) noexcept {
  const std::uint32_t i1 = Holder::index1(holder);
  if (i1 == 0 || i1 > s.proc_count) return 1;
  if (s.me && i1 - 1 == s.me_index && (s.me->incarnation.load(std::memory_order_relaxed) & 0xFF) == Holder::inc(holder))
    return 0;
  const ProcRecord& p = s.procs[i1 - 1];
  if ((p.incarnation.load(std::memory_order_relaxed) & 0xFF) != Holder::inc(holder) ||
      !(p.owner.load(std::memory_order_acquire) & kOwnerAttached))
    return 1;
  return holder_dead(s, holder, now_ms);
}

int thread_owner_dead(Segment& s, std::uint64_t owner, std::uint64_t now_ms) noexcept {
  const std::uint32_t p1 = ThreadOwner::proc1(owner);
  if (p1 == 0 || p1 > s.proc_count) return 1;
  const ProcRecord& p = s.procs[p1 - 1];
  if ((p.incarnation.load(std::memory_order_relaxed) & 0xFF) != ThreadOwner::inc(owner) ||
      !(p.owner.load(std::memory_order_acquire) & kOwnerAttached))
    return 1;
  return holder_dead(s, Holder::make(p1 - 1, ThreadOwner::inc(owner)), now_ms);
}

bool verdict_stale(const Segment& s, std::uint32_t i, std::uint64_t now_ms) noexcept {
  if (i >= s.proc_count || (s.me && i == s.me_index)) return false;
  const ProcRecord& p = s.procs[i];
  if (!(p.owner.load(std::memory_order_relaxed) & kOwnerAttached)) return false;
  return !Verdict::fresh(p.seen.load(std::memory_order_relaxed), p.incarnation.load(std::memory_order_relaxed), now_ms,
                         s.recovery_ms / 2);
}

void uncount_parked(std::atomic<std::uint32_t>& count, std::uint64_t n) noexcept {
  if (n == 0) return;
  std::uint32_t w = count.load(std::memory_order_relaxed);
  while (w != 0 && !count.compare_exchange_weak(w, std::uint32_t(w - std::min<std::uint64_t>(n, w)),
                                                std::memory_order_relaxed)) {
  }
}

namespace {
// One record count of parked threads (low 32 bits, under the owner's
// incarnation in the high 32) and the header count it is part of.
struct ParkedCount {
  std::atomic<std::uint64_t> ProcRecord::*record;
  std::atomic<std::uint32_t>& (*header)(Header&);
};
constexpr ParkedCount kParkedCounts[] = {
    {&ProcRecord::parked, [](Header& h) -> std::atomic<std::uint32_t>& { return h.waiters; }},
    {&ProcRecord::room_parked, [](Header& h) -> std::atomic<std::uint32_t>& { return h.room_waiters; }},
    {&ProcRecord::lane_parked, [](Header& h) -> std::atomic<std::uint32_t>& { return h.lane_waiters; }},
    {&ProcRecord::ack_parked, [](Header& h) -> std::atomic<std::uint32_t>& { return h.mirror.ack_waiters; }}};
}  // namespace

void drop_parked(Segment& s, ProcRecord& p, std::uint64_t inc) noexcept {
  for (const ParkedCount& c : kParkedCounts) {
    std::atomic<std::uint64_t>& rec = p.*c.record;
    std::uint64_t v = rec.load(std::memory_order_relaxed);
    while ((v & 0xFFFFFFFF) != 0 && (v >> 32) == (inc & 0xFFFFFFFF)) {
      if (rec.compare_exchange_weak(v, v & ~0xFFFFFFFFULL, std::memory_order_relaxed)) {
        uncount_parked(c.header(*s.h), v & 0xFFFFFFFF);
        break;
      }
    }
  }
}

void take_parked(Segment& s, ProcRecord& p, std::uint64_t inc) noexcept {
  for (const ParkedCount& c : kParkedCounts)
    uncount_parked(c.header(*s.h),
                   (p.*c.record).exchange((inc & 0xFFFFFFFF) << 32, std::memory_order_relaxed) & 0xFFFFFFFF);
}

int holder_dead(Segment& s, std::uint32_t holder, std::uint64_t now_ms) noexcept {
  const std::uint32_t i1 = Holder::index1(holder);
  if (i1 == 0 || i1 > s.proc_count) return 0;
  if (s.me && i1 - 1 == s.me_index) return 0;
  ProcRecord& p = s.procs[i1 - 1];
  const std::uint64_t owner = p.owner.load(std::memory_order_acquire);
  // Detached cleanly, or the record now belongs to another incarnation: the
  // lease keeps its deadline (a process that exits normally keeps its leases).
  const std::uint64_t inc = p.incarnation.load(std::memory_order_relaxed);
  if (!(owner & kOwnerAttached) || (inc & 0xFF) != Holder::inc(holder)) return 0;
  const std::uint64_t seen = p.seen.load(std::memory_order_relaxed);
  if (Verdict::fresh(seen, inc, now_ms, s.recovery_ms / 2)) return Verdict::dead(seen) ? int(owner & 0xFFFFFFFF) : 0;
  if (t_judge_budget == 0) return 0;  // no judging left: alive until judged
  if (t_judge_budget > 0) --t_judge_budget;
  const int dead = dead_owner_pid(s, i1 - 1);
  FAIRLANE_FAILPOINT("liveness.judged");
  // Judged another owner than `inc`'s (the record changed hands since it was
  // read): no verdict about either.
  if (p.incarnation.load(std::memory_order_acquire) != inc) return 0;
  // Relaxed: a cache of a judgement anyone may repeat; a lost race costs one
  // more system call. About the incarnation judged (the record may have
  // another owner by the time it is read: fresh() compares 20 bits of it).
  p.seen.store(Verdict::make(now_ms, inc, dead != 0), std::memory_order_relaxed);
  return dead;
}

Result<std::unique_ptr<Segment>> create_segment(std::string_view name, const QueueOptions& o) {
  if (auto st = check_name(name); !st) return st.error();
  if (o.jobs < 1 || o.jobs > kMaxJobs)
    return make_error(Errc::invalid_argument, "jobs must be 1.." + std::to_string(kMaxJobs) + ", got " + std::to_string(o.jobs));
  if (o.lanes < 1 || o.lanes > kMaxLanes)
    return make_error(Errc::invalid_argument, "lanes must be 1.." + std::to_string(kMaxLanes) + ", got " + std::to_string(o.lanes));
  if (o.payload_bytes > kMaxPayload)
    return make_error(Errc::invalid_argument, "payload-bytes must be 0.." + std::to_string(kMaxPayload) + ", got " + std::to_string(o.payload_bytes));
  if (o.processes < 1 || o.processes > kMaxProcs)
    return make_error(Errc::invalid_argument, "processes must be 1.." + std::to_string(kMaxProcs) + ", got " +
                                                  std::to_string(o.processes));
  if (!valid_kind(o.job_kind))
    return make_error(Errc::invalid_argument, "job kind must be three letters A-Z, got '" + o.job_kind + "'");
  if (o.node > 1023) return make_error(Errc::invalid_argument, "node must be 0..1023, got " + std::to_string(o.node));
  if (o.mode > 0777) return make_error(Errc::invalid_argument, "mode must be an octal file mode up to 0777");
  if (o.recovery_ms < kMinRecoveryMs || o.recovery_ms > kMaxRecoveryMs)
    return make_error(Errc::invalid_argument, "recovery bound must be " + std::to_string(kMinRecoveryMs) + ".." +
                                                  std::to_string(kMaxRecoveryMs) + " ms, got " + std::to_string(o.recovery_ms));
  if (!retry_valid(o.default_retry))
    return make_error(Errc::invalid_argument, "the default retry policy is out of range (max attempts 1..65535, "
                                              "backoff base and cap up to 2^32-1 ms, factor 1..1000, jitter 0..1)");
  std::uint32_t log_cells = 0;
  std::string mirror_url;
  if (!o.mirror.empty()) {
    if (o.mirror.size() >= kMirrorUrlBytes)
      return make_error(Errc::invalid_argument, "mirror URL is longer than " + std::to_string(kMirrorUrlBytes - 1) + " bytes");
    if (o.mirror.rfind("valkey://", 0) != 0 && o.mirror.rfind("redis://", 0) != 0)
      return make_error(Errc::invalid_argument, "mirror must be a valkey://HOST:PORT/QUEUE URL, got '" + redact_url(o.mirror) + "'");
    auto parsed = ValkeyUrl::parse(o.mirror);
    if (!parsed) return make_error(Errc::invalid_argument, "mirror URL: " + parsed.error().message);
    // A password is a secret and every attached process can read the
    // header: the segment keeps the URL without it (the mirror takes it
    // from FAIRLANE_VALKEY_PASSWORD, or from the URL it is started with).
    mirror_url = parsed->str();
    if (mirror_url.size() >= kMirrorUrlBytes)
      return make_error(Errc::invalid_argument, "mirror URL is longer than " + std::to_string(kMirrorUrlBytes - 1) + " bytes");
    if (o.mirror_log < 64 || o.mirror_log > (1U << 26) || (o.mirror_log & (o.mirror_log - 1)))
      return make_error(Errc::invalid_argument, "mirror log must be a power of two from 64 to 2^26 records, got " +
                                                    std::to_string(o.mirror_log));
    if (o.sync_timeout_ms < 1)
      return make_error(Errc::invalid_argument, "sync timeout must be at least 1 ms");
    log_cells = o.mirror_log;
  }

  const Geometry g = geometry_for(o.jobs, o.lanes, o.payload_bytes, o.processes, log_cells);
  auto s = std::make_unique<Segment>();
  s->name = std::string(name);
  try {
    bip::permissions perm(o.mode);
    bip::shared_memory_object shm(bip::create_only, s->name.c_str(), bip::read_write, perm);
    try {
      // The mark of a segment being made, before the file has a size: a
      // creator that dies from here on leaves a file that says it is
      // fairlane's and unfinished (open: not_initialized, which
      // open_or_create waits out; `fairlane destroy` removes it). Only one
      // that dies before this write leaves an empty file.
      if (const ssize_t n = ::pwrite(shm.get_mapping_handle().handle, &kMagicMaking, sizeof kMagicMaking, 0);
          n != ssize_t(sizeof kMagicMaking)) {
        const int err = n < 0 ? errno : ENOSPC;  // a short write of 8 bytes to tmpfs: no room
        bip::shared_memory_object::remove(s->name.c_str());
        return make_error(Errc::system, "cannot write segment '" + s->name + "'", err);
      }
      shm.truncate(bip::offset_t(g.total));
      s->region = bip::mapped_region(shm, bip::read_write);
      open_lock_file(*s, shm.get_mapping_handle().handle);
    } catch (const bip::interprocess_exception& e) {
      bip::shared_memory_object::remove(s->name.c_str());
      return from_boost(e, "size", name);
    }
  } catch (const bip::interprocess_exception& e) {
    return from_boost(e, "create", name);
  }

  // ftruncate gave us zeroed memory: every table's zero state is valid
  // (free slots with ctr 0, free lanes, empty directory and index, free
  // process and thread records, zero counters) except the ones set below.
  auto* h = reinterpret_cast<Header*>(s->region.get_address());
  h->layout_version = kLayoutVersion;
  h->header_bytes = sizeof(Header);
  h->segment_bytes = g.total;
  h->job_capacity = g.jobs;
  h->lane_capacity = g.lanes;
  h->dir_buckets = g.dir_buckets;
  h->payload_bytes = g.payload_bytes;
  h->slot_bytes = g.slot_bytes;
  h->ring_cells = g.ring_cells;
  h->index_buckets = g.index_buckets;
  h->proc_capacity = g.procs;
  h->thread_capacity = g.threads;
  h->slot_bits = g.slot_bits;
  h->words_off = g.words_off;
  h->tags_off = g.tags_off;
  h->hints_off = g.hints_off;
  h->slots_off = g.slots_off;
  h->lanes_off = g.lanes_off;
  h->dir_off = g.dir_off;
  h->ring_off = g.ring_off;
  h->index_off = g.index_off;
  h->procs_off = g.procs_off;
  h->threads_off = g.threads_off;
  h->waits_off = g.waits_off;
  h->log_off = g.log_off;
  h->log_cells = g.log_cells;
  h->recovery_ms = o.recovery_ms;
  retry_encode(o.default_retry, h->default_retry_a, h->default_retry_b);
  if (log_cells) {
    std::memcpy(h->mirror_url, mirror_url.data(), mirror_url.size());
    h->durability = o.durability == Durability::sync ? 2 : 1;
    h->on_full = o.on_full == MirrorFull::drop ? 1 : 0;
    h->sync_timeout_ms = o.sync_timeout_ms;
  }
  std::random_device rd;
  const std::uint64_t seed = (std::uint64_t(rd()) << 32) ^ rd() ^ unix_ms();
  h->hash_seed = seed;
  h->created_unix_ms = unix_ms();
  std::memcpy(h->job_kind, o.job_kind.data(), 3);
  h->node = o.node;
  h->creator_pid = std::uint32_t(getpid());
  bind_tables(*s, g, seed, o.recovery_ms, o.job_kind.data());
  // Every sweep pass reads each slot word (and tag), lane record and process
  // record: their pages are faulted in here, by the creator, once. (Left to
  // the first pass, a claim paid for them: 5.0-6.4 ms at the default 65,536
  // jobs and 256 processes, docs/perf/sweep-2026-12-04.txt.) Zeros over
  // zeros: the tables' state is unchanged.
  {
    auto* base = static_cast<unsigned char*>(s->region.get_address());
    std::memset(base + g.words_off, 0, g.slots_off - g.words_off);
    std::memset(base + g.lanes_off, 0, g.dir_off - g.lanes_off);
    std::memset(base + g.procs_off, 0, g.threads_off - g.procs_off);
  }

  // Ring: no position written yet. A cell is written for position p when
  // its pos field says p; cell i starts as written for the lap before.
  for (std::uint32_t i = 0; i < g.ring_cells; ++i)
    s->ring[i].store(RingCell::make(std::uint64_t(i) - g.ring_cells, 0), std::memory_order_relaxed);
  h->sweep.next_due.store(~0ULL, std::memory_order_relaxed);
  h->sweep.pass_min.store(~0ULL, std::memory_order_relaxed);
  // Log: cell i is free for sequence i.
  for (std::uint32_t i = 0; i < log_cells; ++i) s->log[i].stamp.store(i, std::memory_order_relaxed);
  // The default lane, record 0: live for ever, its group DEF00000000000.
  {
    auto def = BrandedId::parse(kDefaultGroup);
    LaneRecord& l = s->lanes[kDefaultLane];
    l.key_sf.store(def->snowflake(), std::memory_order_relaxed);
    l.key_kind.store(kind_code(def->kind()) | (1ULL << 16), std::memory_order_relaxed);
    l.husks.store(HuskCount::make(1), std::memory_order_relaxed);
    for (auto& head : l.strays) head.store(UpLink::make(0, 0, 1, 0), std::memory_order_relaxed);
    store128_init(l.word, LaneWord::with_state(Word128{}, LaneState::live));
  }
  // [R0] release: publishes every field above; pairs with [A0] in open.
  h->magic.store(kMagic, std::memory_order_release);
  register_live(*s);
  return finish_attach(std::move(s), false);
}

Result<std::unique_ptr<Segment>> open_segment(std::string_view name, bool observer) {
  if (auto st = check_name(name); !st) return st.error();
  auto s = std::make_unique<Segment>();
  s->name = std::string(name);
  const std::string seg = "segment '" + s->name + "'";
  // A file that holds the creator's mark (kMagicMaking), sized or not yet.
  const auto unfinished = [&] {
    return make_error(Errc::not_initialized, seg + " was never finished: its creator died while creating it "
                                             "(or is creating it now); remove it with 'fairlane destroy " + s->name + "'");
  };
  bip::offset_t size = 0;
  try {
    bip::shared_memory_object shm(bip::open_only, s->name.c_str(), bip::read_write);
    if (!shm.get_size(size)) return make_error(Errc::system, "cannot size " + seg, errno);
    if (size == 0)
      return make_error(Errc::not_initialized, seg + " is empty: its creator died before sizing it (or is creating it now); "
                                               "remove it with 'fairlane destroy " + s->name + "'");
    if (std::uint64_t(size) < sizeof(Header)) {
      // Marked but not yet sized: its creator is between the two, or died there.
      std::uint64_t first = 0;
      if (::pread(shm.get_mapping_handle().handle, &first, sizeof first, 0) == sizeof first && first == kMagicMaking)
        return unfinished();
      return make_error(Errc::truncated, seg + " is " + std::to_string(size) + " bytes, smaller than a header (" +
                                             std::to_string(sizeof(Header)) + ")");
    }
    s->region = bip::mapped_region(shm, bip::read_write);
    open_lock_file(*s, shm.get_mapping_handle().handle);
  } catch (const bip::interprocess_exception& e) {
    return from_boost(e, "open", name);
  }
  auto* h = reinterpret_cast<Header*>(s->region.get_address());
  // [A0] acquire: pairs with [R0]; after it every creation-time field is visible.
  const std::uint64_t magic = h->magic.load(std::memory_order_acquire);
  if (magic == kMagicMaking) return unfinished();
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
  // is a corrupt header and we must not follow its offsets. Every bound the
  // library checks its reads against comes from here. Each field is read
  // once (read_once), checked, and bound from that copy: another process
  // can rewrite the header while we look, and must not make us bind values
  // other than those checked.
  const std::uint32_t jobs = read_once(h->job_capacity), lane_capacity = read_once(h->lane_capacity),
                      payload_bytes = read_once(h->payload_bytes), procs = read_once(h->proc_capacity),
                      recovery_ms = read_once(h->recovery_ms), log_cells = read_once(h->log_cells),
                      durability = read_once(h->durability), on_full = read_once(h->on_full);
  const std::uint16_t node = read_once(h->node);
  const std::uint64_t seed = read_once(h->hash_seed);
  char kind[3];
  for (int i = 0; i < 3; ++i) kind[i] = read_once(h->job_kind[i]);
  if (jobs < 1 || jobs > kMaxJobs || lane_capacity < 2 || lane_capacity > kMaxLanes + 1 ||
      payload_bytes > kMaxPayload || procs < 1 || procs > kMaxProcs || !valid_kind(std::string_view(kind, 3)) ||
      node > 1023 || recovery_ms < kMinRecoveryMs || recovery_ms > kMaxRecoveryMs ||
      (log_cells & (log_cells - 1)) || log_cells > (1U << 26) ||
      (log_cells && (durability < 1 || durability > 2 || on_full > 1 ||
                     std::memchr(h->mirror_url, 0, kMirrorUrlBytes) == nullptr)))
    return make_error(Errc::corrupt, seg + " has a corrupt header (capacities out of range)");
  const Geometry g = geometry_for(jobs, lane_capacity - 1, payload_bytes, procs, log_cells);
  if (g.total != h->segment_bytes || g.words_off != h->words_off || g.tags_off != h->tags_off ||
      g.hints_off != h->hints_off ||
      g.slots_off != h->slots_off || g.lanes_off != h->lanes_off || g.dir_off != h->dir_off ||
      g.ring_off != h->ring_off || g.index_off != h->index_off || g.procs_off != h->procs_off ||
      g.threads_off != h->threads_off || g.waits_off != h->waits_off || g.log_off != h->log_off ||
      g.slot_bytes != h->slot_bytes || g.ring_cells != h->ring_cells || g.index_buckets != h->index_buckets ||
      g.dir_buckets != h->dir_buckets || g.threads != h->thread_capacity || g.slot_bits != h->slot_bits)
    return make_error(Errc::corrupt, seg + " has a corrupt header (table offsets do not match its capacities)");
  // Its size was checked above, but from a read of its own: the tables
  // bound must lie in the mapping (as mapped) whatever was written since.
  if (g.total > std::uint64_t(s->region.get_size()))
    return make_error(Errc::truncated, seg + " is " + std::to_string(s->region.get_size()) +
                                           " bytes mapped but its capacities need " + std::to_string(g.total));
  bind_tables(*s, g, seed, recovery_ms, kind);
  register_live(*s);
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

bool still_named(const Segment& s) noexcept {
  if (!s.file_known || s.shm_name.empty()) return true;
  // glibc's shm_open keeps the name at /dev/shm/NAME (destroy reads it
  // there too). A stat needs no permission on the file itself, so a segment
  // made again by another user with mode 0600 is still told apart.
  // A name is at most 200 bytes (check_name): the path fits, unallocated.
  char path[16 + 256];
  if (s.shm_name.size() > 256) return true;
  std::memcpy(path, "/dev/shm", 8);
  std::memcpy(path + 8, s.shm_name.c_str(), s.shm_name.size() + 1);
  struct stat st {};
  if (::stat(path, &st) != 0) return errno != ENOENT && errno != ENOTDIR;
  return st.st_dev == s.file_dev && st.st_ino == s.file_ino;
}

bool held_by_this_process(const Segment& s, std::uint32_t i) noexcept {
  if (!s.file_known) return false;
  std::lock_guard l(live_handles_mu);
  const pid_t me = ::getpid();
  return std::any_of(held_records.begin(), held_records.end(), [&](const HeldRecord& r) {
    return r.dev == s.file_dev && r.ino == s.file_ino && r.index == i && r.pid == me;
  });
}

}  // namespace fairlane::detail
