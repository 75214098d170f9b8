// Creating, opening and removing segments, and refusing bad ones.
//
// POSIX shared memory objects are files under /dev/shm, so bad segments are
// crafted there directly, or a real one is corrupted with pwrite/ftruncate.
#include "raw_segment.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace fairlane {
namespace {

using test::describe;
using test::SegmentGuard;
using test::shm_path;
using test::unique_segment_name;

QueueOptions small() {
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 8;
  o.payload_bytes = 32;
  return o;
}

// Writes bytes at an offset of the segment's backing file.
void pwrite_at(const std::string& name, off_t offset, const void* data, std::size_t n) {
  const int fd = ::open(shm_path(name).c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << "open " << shm_path(name) << ": " << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, data, n, offset), static_cast<ssize_t>(n)) << std::strerror(errno);
  ::close(fd);
}

std::vector<unsigned char> read_all(const std::string& name) {
  std::vector<unsigned char> bytes;
  const int fd = ::open(shm_path(name).c_str(), O_RDONLY);
  if (fd < 0) return bytes;
  struct stat st{};
  ::fstat(fd, &st);
  bytes.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  ::close(fd);
  return bytes;
}

// Makes /dev/shm/<name> with exactly these bytes.
void craft_file(const std::string& name, const std::vector<unsigned char>& bytes) {
  const int fd = ::open(shm_path(name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  if (!bytes.empty()) { ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size())); }
  ::close(fd);
}

std::uint64_t file_size(const std::string& name) {
  struct stat st{};
  if (::stat(shm_path(name).c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_size);
}

// Creates a real segment and closes it; returns its size in bytes.
std::uint64_t make_real(const std::string& name) {
  auto r = Queue::create(name, small());
  EXPECT_TRUE(r.ok()) << describe(r.error());
  if (!r.ok()) return 0;
  const std::uint64_t bytes = r->config().segment_bytes;
  EXPECT_EQ(file_size(name), bytes) << "segment_bytes should be the size of the backing file";
  return bytes;
}

void expect_open_fails(const std::string& name, Errc want) {
  auto r = Queue::open(name);
  ASSERT_FALSE(r.ok()) << "open succeeded on a bad segment";
  EXPECT_EQ(r.error().code, want) << describe(r.error());
  EXPECT_FALSE(r.error().message.empty());
  EXPECT_NE(r.error().message.find(name), std::string::npos)
      << "the message should name the segment: " << r.error().message;
  // open_or_create must not paper over a bad segment by recreating it either.
  auto r2 = Queue::open_or_create(name, small());
  ASSERT_FALSE(r2.ok()) << "open_or_create accepted a bad segment";
  EXPECT_EQ(r2.error().code, want) << describe(r2.error());
}

// ---------------------------------------------------------------- happy paths

TEST(Setup, CreateOpenConfigRoundTrip) {
  SegmentGuard guard(unique_segment_name());
  QueueOptions o;
  o.jobs = 100;
  o.lanes = 10;
  o.payload_bytes = 48;
  o.job_kind = "TSK";
  o.node = 7;
  auto created = Queue::create(guard.name(), o);
  ASSERT_TRUE(created.ok()) << describe(created.error());
  EXPECT_EQ(created->name(), guard.name());
  auto opened = Queue::open(guard.name());
  ASSERT_TRUE(opened.ok()) << describe(opened.error());
  for (const QueueConfig& c : {created->config(), opened->config()}) {
    EXPECT_EQ(c.jobs, 100U);
    EXPECT_EQ(c.lanes, 10U);
    EXPECT_EQ(c.payload_bytes, 48U);
    EXPECT_EQ(c.job_kind, "TSK");
    EXPECT_EQ(c.node, 7U);
    EXPECT_GT(c.layout_version, 0U);
    EXPECT_GT(c.segment_bytes, 0U);
  }
  EXPECT_EQ(file_size(guard.name()), created->config().segment_bytes);
  // Both attachments see one queue.
  const BrandedId id = created->mint();
  ASSERT_EQ(created->enqueue(BrandedId{}, id, "hi"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(opened->claim(l, 1000));
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(created->complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(created->snapshot().jobs_capacity, 100U);
}

// The default segment's size, as README.md (Limits) and docs/design.md
// (section 2, "The default segment") give it, region by region. They said
// 39,010,304 bytes, the total before the free hints region (4,160 bytes here)
// was added: a change of layout must change the table with it.
TEST(Setup, TheDefaultSegmentIsTheSizeTheDocsGive) {
  SegmentGuard guard(unique_segment_name());
  auto r = Queue::create(guard.name());
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(r->config().segment_bytes, 39'014'400U);
  EXPECT_EQ(file_size(guard.name()), 39'014'400U);
}

TEST(Setup, SegmentFileMode) {
  SegmentGuard guard(unique_segment_name());
  QueueOptions o = small();
  o.mode = 0640;
  auto q = Queue::create(guard.name(), o);
  ASSERT_TRUE(q.ok()) << describe(q.error());
  struct stat st{};
  ASSERT_EQ(::stat(shm_path(guard.name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640U);
}

TEST(Setup, QueueIsMovable) {
  SegmentGuard guard(unique_segment_name());
  auto r = Queue::create(guard.name(), small());
  ASSERT_TRUE(r.ok()) << describe(r.error());
  Queue a = std::move(r.value());
  Queue b = std::move(a);
  const BrandedId id = b.mint();
  EXPECT_EQ(b.enqueue(BrandedId{}, id, "x"), EnqueueStatus::enqueued);
  EXPECT_EQ(b.name(), guard.name());
  EXPECT_FALSE(a.attached()) << "moved from";
  EXPECT_TRUE(b.attached());
}

// Move assignment detaches the handle assigned to (its process record is
// given back) and leaves the one moved from holding nothing.
TEST(Setup, MoveAssignmentDetachesTheHandleAssignedTo) {
  SegmentGuard guard(unique_segment_name());
  auto r = Queue::create(guard.name(), small());
  ASSERT_TRUE(r.ok()) << describe(r.error());
  auto second = Queue::open(guard.name());
  ASSERT_TRUE(second.ok()) << describe(second.error());
  Queue& a = r.value();
  EXPECT_EQ(a.snapshot().processes_attached, 2u);
  auto third = Queue::open(guard.name());
  ASSERT_TRUE(third.ok()) << describe(third.error());
  EXPECT_EQ(a.snapshot().processes_attached, 3u);
  second.value() = std::move(third.value());
  EXPECT_FALSE(third.value().attached());
  EXPECT_TRUE(second.value().attached());
  EXPECT_EQ(a.snapshot().processes_attached, 2u) << "the handle assigned to is detached";
  EXPECT_EQ(second.value().enqueue(BrandedId{}, second.value().mint(), "x"), EnqueueStatus::enqueued);
}

TEST(Setup, OpenOrCreate) {
  SegmentGuard guard(unique_segment_name());
  QueueOptions o = small();
  o.jobs = 32;
  auto first = Queue::open_or_create(guard.name(), o);
  ASSERT_TRUE(first.ok()) << describe(first.error());
  EXPECT_EQ(first->config().jobs, 32U);
  auto second = Queue::open_or_create(guard.name(), o);
  ASSERT_TRUE(second.ok()) << describe(second.error());
  EXPECT_EQ(second->config().jobs, 32U) << "open_or_create must attach to the existing segment";
  EXPECT_TRUE(second->writable()) << "open_or_create attaches as a member";
  // The file mode is not compared: the segment's file has what it has.
  QueueOptions mode = o;
  mode.mode = 0644;
  auto third = Queue::open_or_create(guard.name(), mode);
  EXPECT_TRUE(third.ok()) << describe(third.error());
}

// open_or_create of the segment `name` with `o` changed by `change` (one
// setting, named `what`) is refused as already_exists, naming it; returns
// the message.
template <class Change>
std::string expect_refused(const std::string& name, const QueueOptions& o, const char* what, Change&& change) {
  QueueOptions x = o;
  change(x);
  auto q = Queue::open_or_create(name, x);
  EXPECT_FALSE(q.ok()) << what << " differs, and open_or_create opened the segment";
  if (q.ok()) return {};
  EXPECT_EQ(q.error().code, Errc::already_exists) << what << ": " << describe(q.error());
  EXPECT_NE(q.error().message.find(what), std::string::npos) << q.error().message;
  return q.error().message;
}

// A segment created with other settings is not handed back as if it were
// the one asked for (its enqueues answered payload_too_large and
// kind_mismatch later): already_exists, naming each setting that differs,
// defaults included, and nothing changed.
TEST(Setup, OpenOrCreateRefusesASegmentCreatedWithOtherSettings) {
  SegmentGuard guard(unique_segment_name());
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 8;
  o.payload_bytes = 16;
  auto first = Queue::create(guard.name(), o);
  ASSERT_TRUE(first.ok()) << describe(first.error());

  QueueOptions asked;
  asked.jobs = 65536;
  asked.payload_bytes = 512;
  asked.job_kind = "ORD";
  asked.default_retry.max_attempts = 5;
  auto r = Queue::open_or_create(guard.name(), asked);
  ASSERT_FALSE(r.ok()) << "open_or_create handed back a segment of 64 jobs of 16 bytes, kind JOB";
  EXPECT_EQ(r.error().code, Errc::already_exists) << describe(r.error());
  EXPECT_EQ(r.error().sys_errno, 0);
  const std::string& m = r.error().message;
  for (const char* part : {"jobs 64 (asked 65536)", "lanes 8 (asked 4096)", "payload_bytes 16 (asked 512)",
                           "job_kind JOB (asked ORD)", "default_retry"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  EXPECT_EQ(m.find("node"), std::string::npos) << m;
  EXPECT_EQ(m.find("processes"), std::string::npos) << m;
  EXPECT_EQ(first->config().jobs, 64U);
  EXPECT_EQ(first->processes().size(), 1U) << "the refused open stayed attached";

  // One setting at a time, each of them.
  const auto refused = [&](const char* what, auto&& change) { expect_refused(guard.name(), o, what, change); };
  refused("jobs", [](QueueOptions& x) { x.jobs = 65; });
  refused("lanes", [](QueueOptions& x) { x.lanes = 9; });
  refused("payload_bytes", [](QueueOptions& x) { x.payload_bytes = 17; });
  refused("processes", [](QueueOptions& x) { x.processes = 2; });
  refused("job_kind", [](QueueOptions& x) { x.job_kind = "ORD"; });
  refused("node", [](QueueOptions& x) { x.node = 7; });
  refused("recovery_ms", [](QueueOptions& x) { x.recovery_ms = 1000; });
  refused("default_retry", [](QueueOptions& x) { x.default_retry.max_attempts = 3; });
  refused("default_retry", [](QueueOptions& x) { x.default_retry.backoff = Backoff::fixed(std::chrono::seconds(1)); });
  refused("mirror none (asked valkey://127.0.0.1:6379/q)",
          [](QueueOptions& x) { x.mirror = "valkey://127.0.0.1:6379/q"; });
  auto same = Queue::open_or_create(guard.name(), o);
  EXPECT_TRUE(same.ok()) << describe(same.error());
}

// A mirrored segment: the URL as stored (no password) and the mirror's own
// settings count; asking for no mirror differs too.
TEST(Setup, OpenOrCreateComparesTheMirrorSettings) {
  SegmentGuard guard(unique_segment_name());
  QueueOptions o = small();
  o.mirror = "valkey://127.0.0.1:6379/orders";
  o.durability = Durability::sync;
  o.mirror_log = 128;
  auto first = Queue::create(guard.name(), o);
  ASSERT_TRUE(first.ok()) << describe(first.error());
  QueueOptions with_password = o;
  with_password.mirror = "valkey://:secret@127.0.0.1:6379/orders";
  auto same = Queue::open_or_create(guard.name(), with_password);
  EXPECT_TRUE(same.ok()) << describe(same.error());
  const auto refused = [&](const char* what, auto&& change) {
    const std::string m = expect_refused(guard.name(), o, what, change);
    EXPECT_EQ(m.find("secret"), std::string::npos) << m;
  };
  refused("mirror valkey://127.0.0.1:6379/orders (asked none)", [](QueueOptions& x) { x.mirror.clear(); });
  refused("mirror", [](QueueOptions& x) { x.mirror = "valkey://:secret@127.0.0.1:6379/other"; });
  refused("durability sync (asked async)", [](QueueOptions& x) { x.durability = Durability::async; });
  refused("on_full", [](QueueOptions& x) { x.on_full = MirrorFull::drop; });
  refused("mirror_log 128 (asked 256)", [](QueueOptions& x) { x.mirror_log = 256; });
  refused("sync_timeout_ms", [](QueueOptions& x) { x.sync_timeout_ms = 10; });
}

// Every process record held: busy, with no errno (it was Errc::system,
// "any other OS error; see sys_errno", with sys_errno 0) and a message
// that says what to do.
TEST(Setup, AnOpenThatFindsEveryProcessRecordHeldIsBusy) {
  SegmentGuard guard(unique_segment_name());
  QueueOptions o = small();
  o.processes = 1;
  auto first = Queue::create(guard.name(), o);
  ASSERT_TRUE(first.ok()) << describe(first.error());
  auto second = Queue::open(guard.name());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Errc::busy) << describe(second.error());
  EXPECT_EQ(second.error().sys_errno, 0);
  EXPECT_NE(second.error().message.find("no free process record (1 process attached"), std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find("larger --processes"), std::string::npos) << second.error().message;
  // An observer takes no record; once the member detaches, a record is free.
  EXPECT_TRUE(Queue::open(guard.name(), Queue::Attach::observer).ok());
  first = Error{};
  auto third = Queue::open(guard.name());
  EXPECT_TRUE(third.ok()) << describe(third.error());
}

TEST(Setup, RemoveThenOpenIsNotFound) {
  SegmentGuard guard(unique_segment_name());
  { auto q = Queue::create(guard.name(), small()); ASSERT_TRUE(q.ok()) << describe(q.error()); }
  auto st = Queue::remove(guard.name());
  ASSERT_TRUE(st.ok()) << describe(st.error());
  EXPECT_FALSE(std::filesystem::exists(shm_path(guard.name())));
  auto r = Queue::open(guard.name());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::not_found);
  auto again = Queue::remove(guard.name());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Errc::not_found) << describe(again.error());
}

TEST(Setup, RemoveWhileAttachedKeepsMapping) {
  SegmentGuard guard(unique_segment_name());
  auto r = Queue::create(guard.name(), small());
  ASSERT_TRUE(r.ok()) << describe(r.error());
  ASSERT_TRUE(Queue::remove(guard.name()).ok());
  // The name is gone but the attached queue keeps working.
  const BrandedId id = r->mint();
  EXPECT_EQ(r->enqueue(BrandedId{}, id, "x"), EnqueueStatus::enqueued);
  Lease l;
  EXPECT_TRUE(r->claim(l, 1000));
  // And the name can be reused by a fresh segment.
  auto fresh = Queue::create(guard.name(), small());
  ASSERT_TRUE(fresh.ok()) << describe(fresh.error());
  EXPECT_EQ(fresh->snapshot().pending, 0U);
}

// A handle kept open across a remove and a create of its name says it is
// no longer the segment at that name (the tools that watch one reopen then).
TEST(Setup, StillNamedUntilTheNameIsRemovedOrReused) {
  SegmentGuard guard(unique_segment_name());
  auto member = Queue::create(guard.name(), small());
  ASSERT_TRUE(member.ok()) << describe(member.error());
  auto observer = Queue::open(guard.name(), Queue::Attach::observer);
  ASSERT_TRUE(observer.ok()) << describe(observer.error());
  EXPECT_TRUE(member->still_named());
  EXPECT_TRUE(observer->still_named());

  ASSERT_TRUE(Queue::remove(guard.name()).ok());
  EXPECT_FALSE(member->still_named());
  EXPECT_FALSE(observer->still_named());

  // Created again: another file at the name, not the old mapping's.
  auto fresh = Queue::create(guard.name(), small());
  ASSERT_TRUE(fresh.ok()) << describe(fresh.error());
  EXPECT_TRUE(fresh->still_named());
  EXPECT_FALSE(member->still_named());
  EXPECT_FALSE(observer->still_named());
  auto reopened = Queue::open(guard.name(), Queue::Attach::observer);
  ASSERT_TRUE(reopened.ok()) << describe(reopened.error());
  EXPECT_TRUE(reopened->still_named());
}

// ---------------------------------------------------------------- setup errors

TEST(Setup, OpenMissingIsNotFound) {
  SegmentGuard guard(unique_segment_name());
  auto r = Queue::open(guard.name());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::not_found) << describe(r.error());
  EXPECT_FALSE(r.error().message.empty());
  EXPECT_NE(r.error().message.find(guard.name()), std::string::npos) << r.error().message;
}

TEST(Setup, CreateTwiceIsAlreadyExists) {
  SegmentGuard guard(unique_segment_name());
  auto first = Queue::create(guard.name(), small());
  ASSERT_TRUE(first.ok()) << describe(first.error());
  const BrandedId id = first->mint();
  ASSERT_EQ(first->enqueue(BrandedId{}, id, "keep"), EnqueueStatus::enqueued);
  auto second = Queue::create(guard.name(), small());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Errc::already_exists) << describe(second.error());
  EXPECT_FALSE(second.error().message.empty());
  // The failed create did not touch the existing segment.
  EXPECT_EQ(first->snapshot().pending, 1U);
  EXPECT_EQ(file_size(guard.name()), first->config().segment_bytes);
}

TEST(Setup, InvalidOptions) {
  SegmentGuard guard(unique_segment_name());
  auto expect_invalid = [&](QueueOptions o, const char* what) {
    auto r = Queue::create(guard.name(), o);
    ASSERT_FALSE(r.ok()) << what << " was accepted";
    EXPECT_EQ(r.error().code, Errc::invalid_argument) << what << ": " << describe(r.error());
    EXPECT_FALSE(r.error().message.empty()) << what;
    EXPECT_FALSE(std::filesystem::exists(shm_path(guard.name()))) << what << " left a segment file behind";
  };
  QueueOptions o = small();
  o.jobs = 0;
  expect_invalid(o, "jobs=0");
  o = small();
  o.lanes = 0;
  expect_invalid(o, "lanes=0");
  for (const char* kind : {"", "JO", "JOBS", "job", "J0B", "J-B"}) {
    o = small();
    o.job_kind = kind;
    expect_invalid(o, kind);
  }
  o = small();
  o.node = 1024;
  expect_invalid(o, "node=1024");
  for (std::uint32_t ms : {0U, kMinRecoveryMs - 1, kMaxRecoveryMs + 1}) {
    o = small();
    o.recovery_ms = ms;
    expect_invalid(o, "recovery_ms out of range");
  }
  for (std::uint32_t n : {0U, kMaxProcesses + 1}) {
    o = small();
    o.processes = n;
    expect_invalid(o, "processes out of range");
  }
  // The limits themselves are fine.
  o = small();
  o.node = 1023;
  o.job_kind = "ZZZ";
  auto ok = Queue::create(guard.name(), o);
  EXPECT_TRUE(ok.ok()) << describe(ok.error());
}

TEST(Setup, TheLastProcessRecordHoldsItsLeases) {
  // A lease names its holder by record index + 1 in the slot word; the last
  // record of the largest table must not read as "no holder" (which a sweep
  // takes for a holder that is gone, and returns the lease).
  SegmentGuard guard(unique_segment_name());
  QueueOptions o = small();
  o.processes = kMaxProcesses;
  auto created = Queue::create(guard.name(), o);
  ASSERT_TRUE(created.ok()) << describe(created.error());
  std::vector<Queue> handles;
  for (;;) {
    auto q = Queue::open(guard.name());
    if (!q) break;
    handles.push_back(std::move(q).value());
    ASSERT_LT(handles.size(), std::size_t(kMaxProcesses)) << "the table never filled";
  }
  Queue& last = handles.back();  // the creator has a record too: this one is the table's last
  const BrandedId id = last.mint();
  ASSERT_EQ(last.enqueue(BrandedId::make("GRP", 1), id, "x"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(last.claim(l, 3'600'000));
  bool mine = false;
  for (const auto& p : created->processes())
    if (p.pid == ::getpid() && p.leases == 1) mine = true;
  EXPECT_TRUE(mine) << "the lease shows no holder";
  // Sweeps that judge holders leave a live holder's lease alone.
  for (int i = 0; i < 3; ++i) {
    created->advance_clock(o.recovery_ms);
    created->tick();
  }
  EXPECT_EQ(created->job(id)->state, JobState::leased);
  EXPECT_EQ(last.complete(l.id, l.token), AckStatus::ok);
}

// A thread takes a thread record (intent, counters) when it first does
// work on the segment, not when it only looks: a poller of an empty queue
// holds none. Counted while the thread is alive (a thread's record goes back
// when it exits).
TEST(Setup, AThreadThatFindsNothingToClaimTakesNoThreadRecord) {
  SegmentGuard guard(unique_segment_name());
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 4;
  auto q = Queue::create(guard.name(), o);
  ASSERT_TRUE(q.ok()) << describe(q.error());
  test::RawSegment raw(guard.name());
  const auto records_taken = [&] {
    int n = 0;
    for (std::uint32_t i = 0; i < raw.header().thread_capacity; ++i)
      n += raw.thread(i).owner.load(std::memory_order_acquire) != 0;
    return n;
  };
  const int before = records_taken();
  // A thread that polls (claim, claim_batch) and leaves its counts, then waits
  // until it is counted.
  const auto run_thread = [&](bool with_work) {
    std::mutex mu;
    std::condition_variable cv;
    bool polled = false, counted = false;
    std::thread t([&] {
      if (with_work) {
        EXPECT_EQ(q->enqueue(test::group("GRP"), q->mint(), "x"), EnqueueStatus::enqueued);
      }
      Lease l;
      std::vector<Lease> batch(4);
      for (int i = 0; i < 5; ++i) {
        (void)q->claim(l, 1000);
        (void)q->claim_batch(batch, 1000);
      }
      std::unique_lock lk(mu);
      polled = true;
      cv.notify_all();
      cv.wait(lk, [&] { return counted; });
    });
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return polled; });
    const int n = records_taken();
    counted = true;
    cv.notify_all();
    lk.unlock();
    t.join();
    return n;
  };
  EXPECT_EQ(run_thread(false), before) << "a thread that found nothing took a thread record";
  EXPECT_EQ(run_thread(true), before + 1) << "a thread that enqueued and claimed holds one record";
}

// Closing a handle gives back the thread records its threads took, those of
// threads still running too, and nobody else's: another handle's record in
// the same process, and one its own thread gave back (at exit) and another
// handle's thread took since. (Close reads only the records its threads
// took: BM_open_use_close.)
TEST(Setup, ClosingAHandleGivesBackItsThreadsRecordsAndNoOthers) {
  SegmentGuard guard(unique_segment_name());
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 4;
  auto created = Queue::create(guard.name(), o);
  ASSERT_TRUE(created.ok()) << describe(created.error());
  test::RawSegment raw(guard.name());
  const auto owned = [&] {
    std::vector<std::uint32_t> v;
    for (std::uint32_t i = 0; i < raw.header().thread_capacity; ++i)
      if (raw.thread(i).owner.load(std::memory_order_acquire) != 0) v.push_back(i);
    return v;
  };
  auto a = Queue::open(guard.name());
  auto b = Queue::open(guard.name());
  ASSERT_TRUE(a.ok() && b.ok());
  // A thread of a takes a record and exits (giving it back); b's thread
  // then takes the lowest free record: that same one.
  std::thread([&] { EXPECT_EQ(a->enqueue(test::group("GRP"), a->mint(), "x"), EnqueueStatus::enqueued); }).join();
  const auto before = owned();
  EXPECT_EQ(b->enqueue(test::group("GRP"), b->mint(), "x"), EnqueueStatus::enqueued);
  const auto with_b = owned();
  ASSERT_EQ(with_b.size(), before.size() + 1);
  // Two threads of a that stay alive while it closes, and this thread.
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  bool closed = false;
  std::vector<std::thread> held;
  for (int i = 0; i < 2; ++i)
    held.emplace_back([&] {
      EXPECT_EQ(a->enqueue(test::group("GRP"), a->mint(), "x"), EnqueueStatus::enqueued);
      std::unique_lock lk(mu);
      ++ready;
      cv.notify_all();
      cv.wait(lk, [&] { return closed; });
    });
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return ready == 2; });
  }
  EXPECT_EQ(a->enqueue(test::group("GRP"), a->mint(), "x"), EnqueueStatus::enqueued);
  EXPECT_EQ(owned().size(), with_b.size() + 3);
  {
    Queue gone = std::move(a).value();  // closed at the end of this scope
  }
  EXPECT_EQ(owned(), with_b) << "closing a gave back other than its threads' records";
  {
    std::lock_guard lk(mu);
    closed = true;
  }
  cv.notify_all();
  for (auto& t : held) t.join();
  EXPECT_EQ(owned(), with_b) << "a's threads, exiting after it closed, gave back a record";
}

TEST(Setup, InvalidName) {
  for (const char* bad : {"", "a/b"}) {
    auto r = Queue::create(bad, small());
    ASSERT_FALSE(r.ok()) << "name '" << bad << "' accepted";
    EXPECT_EQ(r.error().code, Errc::invalid_argument) << "'" << bad << "': " << describe(r.error());
  }
}

TEST(Setup, WrongMagicIsWrongLayout) {
  SegmentGuard guard(unique_segment_name());
  const std::uint64_t bytes = make_real(guard.name());
  ASSERT_GT(bytes, 16U);
  const char junk[8] = {'N', 'O', 'T', 'F', 'A', 'I', 'R', '!'};
  pwrite_at(guard.name(), 0, junk, sizeof junk);
  expect_open_fails(guard.name(), Errc::wrong_layout);
}

TEST(Setup, ForeignFileIsWrongLayout) {
  SegmentGuard guard(unique_segment_name());
  std::vector<unsigned char> junk(64 * 1024);
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<unsigned char>((i * 131 + 7) | 1);
  craft_file(guard.name(), junk);
  expect_open_fails(guard.name(), Errc::wrong_layout);
}

TEST(Setup, OtherLayoutVersionIsWrongLayout) {
  // Find the layout version in the header: the first 4-byte field after the
  // magic that holds config().layout_version and changes nothing else when
  // bumped... we cannot know the header offsets from the public API, so look
  // for the value in the first 64 bytes and bump each candidate in turn.
  SegmentGuard guard(unique_segment_name());
  std::uint32_t version = 0;
  {
    auto q = Queue::create(guard.name(), small());
    ASSERT_TRUE(q.ok()) << describe(q.error());
    version = q->config().layout_version;
  }
  const auto original = read_all(guard.name());
  ASSERT_GE(original.size(), 64U);
  int candidates = 0;
  for (std::size_t off = 4; off + 4 <= 64; off += 4) {
    std::uint32_t v = 0;
    std::memcpy(&v, original.data() + off, 4);
    if (v != version) continue;
    ++candidates;
    const std::uint32_t bumped = version + 1;
    pwrite_at(guard.name(), static_cast<off_t>(off), &bumped, 4);
    auto r = Queue::open(guard.name());
    pwrite_at(guard.name(), static_cast<off_t>(off), &version, 4);  // restore
    if (!r.ok() && r.error().code == Errc::wrong_layout) {
      const std::string& msg = r.error().message;
      EXPECT_NE(msg.find(std::to_string(bumped)), std::string::npos)
          << "the message should say which layout made the segment: " << msg;
      EXPECT_NE(msg.find(std::to_string(version)), std::string::npos)
          << "the message should say which layout this build reads: " << msg;
      auto back = Queue::open(guard.name());
      EXPECT_TRUE(back.ok()) << "restored header should open again";
      return;
    }
  }
  FAIL() << "bumping every header word equal to layout_version " << version << " (" << candidates
         << " candidates in the first 64 bytes) never produced wrong_layout";
}

TEST(Setup, HeaderCapacityThatDoesNotFitIsCorrupt) {
  // A header whose job capacity disagrees with its table offsets must be
  // refused before any offset is followed. jobs = 4099 is a value no other
  // header field is likely to hold; bump each 4-byte word holding it.
  SegmentGuard guard(unique_segment_name());
  QueueOptions o = small();
  o.jobs = 4099;
  { auto q = Queue::create(guard.name(), o); ASSERT_TRUE(q.ok()) << describe(q.error()); }
  const auto original = read_all(guard.name());
  ASSERT_GE(original.size(), 512U);
  for (std::size_t off = 8; off + 4 <= 512; off += 4) {
    std::uint32_t v = 0;
    std::memcpy(&v, original.data() + off, 4);
    if (v != o.jobs) continue;
    const std::uint32_t bumped = v + 1;
    pwrite_at(guard.name(), static_cast<off_t>(off), &bumped, 4);
    auto r = Queue::open(guard.name());
    pwrite_at(guard.name(), static_cast<off_t>(off), &v, 4);
    if (!r.ok() && r.error().code == Errc::corrupt) {
      EXPECT_NE(r.error().message.find(guard.name()), std::string::npos) << r.error().message;
      // Zero jobs is out of range outright.
      const std::uint32_t zero = 0;
      pwrite_at(guard.name(), static_cast<off_t>(off), &zero, 4);
      expect_open_fails(guard.name(), Errc::corrupt);
      pwrite_at(guard.name(), static_cast<off_t>(off), &v, 4);
      auto back = Queue::open(guard.name());
      EXPECT_TRUE(back.ok()) << "restored header should open again";
      return;
    }
    EXPECT_TRUE(r.ok() || r.error().code == Errc::corrupt) << describe(r.error());
  }
  FAIL() << "no header word holding the job capacity produced `corrupt` when changed";
}

TEST(Setup, TruncatedSegment) {
  SegmentGuard guard(unique_segment_name());
  const std::uint64_t bytes = make_real(guard.name());
  ASSERT_GT(bytes, 8192U);
  ASSERT_EQ(::truncate(shm_path(guard.name()).c_str(), static_cast<off_t>(bytes / 2)), 0);
  expect_open_fails(guard.name(), Errc::truncated);
  // Shorter than any header.
  ASSERT_EQ(::truncate(shm_path(guard.name()).c_str(), 12), 0);
  auto r = Queue::open(guard.name());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().code == Errc::truncated || r.error().code == Errc::not_initialized)
      << describe(r.error());
}

// What a creator that died after marking its file leaves behind, sized or
// not yet: not_initialized (what open_or_create waits out), not truncated.
TEST(Setup, AMarkedUnfinishedSegmentIsNotInitialized) {
  SegmentGuard guard(unique_segment_name());
  const std::uint64_t bytes = make_real(guard.name());
  ASSERT_GT(bytes, 0U);
  std::vector<unsigned char> file(static_cast<std::size_t>(bytes), 0);
  std::memcpy(file.data(), &detail::kMagicMaking, sizeof detail::kMagicMaking);
  craft_file(guard.name(), file);
  expect_open_fails(guard.name(), Errc::not_initialized);
  file.resize(sizeof detail::kMagicMaking);
  craft_file(guard.name(), file);
  expect_open_fails(guard.name(), Errc::not_initialized);
}

// A creator marks its file before it sizes it, so a sized file of zeros is
// no creator's (another program's, say): not a fairlane segment. It was
// not_initialized before 2026-12-08, and open_or_create waited a second on it.
TEST(Setup, AZeroFilledFileIsNotAFairlaneSegment) {
  SegmentGuard guard(unique_segment_name());
  const std::uint64_t bytes = make_real(guard.name());
  ASSERT_GT(bytes, 0U);
  craft_file(guard.name(), std::vector<unsigned char>(static_cast<std::size_t>(bytes), 0));
  expect_open_fails(guard.name(), Errc::wrong_layout);
  QueueOptions o;
  o.jobs = 64;
  auto r = Queue::open_or_create(guard.name(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::wrong_layout) << describe(r.error()) << " (not_initialized: waited on, a second)";
}

TEST(Setup, EmptyFileIsNotInitialized) {
  // What a creator that died between shm_open and ftruncate leaves behind.
  SegmentGuard guard(unique_segment_name());
  craft_file(guard.name(), {});
  auto r = Queue::open(guard.name());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().code == Errc::not_initialized || r.error().code == Errc::truncated)
      << describe(r.error());
  EXPECT_FALSE(r.error().message.empty());
}

TEST(Setup, ErrcNamesAreDistinct) {
  std::set<std::string_view> names;
  for (Errc e : {Errc::not_found, Errc::already_exists, Errc::wrong_layout, Errc::truncated, Errc::not_initialized,
                 Errc::corrupt, Errc::invalid_argument, Errc::permission_denied, Errc::system}) {
    EXPECT_FALSE(to_string(e).empty());
    names.insert(to_string(e));
  }
  EXPECT_EQ(names.size(), 9U);
}

}  // namespace
}  // namespace fairlane
