#include "mutex_queue.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <type_traits>
#include <vector>

namespace fairlane::bench {

namespace {

constexpr std::uint32_t kNil = 0xFFFFFFFFu;
constexpr std::uint64_t kMagic = 0x4d55545851000002ULL;  // "MUTXQ" v2
constexpr std::uint32_t kWaitBuckets = 32;
constexpr std::uint32_t kMaxExpirePerClaim = 64;  // bounds what one claim does under the lock
enum : std::uint32_t { kFree = 0, kPending = 1, kLeased = 2 };

std::uint64_t round_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }
std::uint64_t pow2_at_least(std::uint64_t v) {
  std::uint64_t p = 64;
  while (p < v) p <<= 1;
  return p;
}

// 14 id bytes -> 64 bits. Two overlapping 8-byte loads, multiplied and
// mixed: every byte reaches the high half, which the tables use.
std::uint64_t hash_id(const fairlane::BrandedId& id) noexcept {
  const std::string_view s = id.str();
  std::uint64_t a = 0, b = 0;
  if (s.size() == fairlane::kIdLength) {
    std::memcpy(&a, s.data(), 8);
    std::memcpy(&b, s.data() + 6, 8);
  }
  std::uint64_t h = a * 0x9E3779B97F4A7C15ULL;
  h ^= (b * 0xC2B2AE3D27D4EB4FULL) >> 7 | (b * 0xC2B2AE3D27D4EB4FULL) << 57;
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ULL;
  h ^= h >> 32;
  return h;
}
// A table entry: the hash's high half (its home slot too) and index + 1;
// 0 is empty.
std::uint32_t h32(std::uint64_t h) noexcept { return std::uint32_t(h >> 32); }
std::uint64_t entry(std::uint64_t h, std::uint32_t i) noexcept { return std::uint64_t(h32(h)) << 32 | (i + 1); }
std::uint32_t entry_index(std::uint64_t e) noexcept { return std::uint32_t(e) - 1; }
std::uint32_t entry_hash(std::uint64_t e) noexcept { return std::uint32_t(e >> 32); }

// Backward-shift deletion of a linear-probing table: no tombstones, so
// nothing degrades with use.
void table_erase(std::uint64_t* t, std::uint64_t mask, std::uint64_t pos) noexcept {
  std::uint64_t i = pos;
  for (;;) {
    t[i] = 0;
    std::uint64_t j = i;
    for (;;) {
      j = (j + 1) & mask;
      if (t[j] == 0) return;
      const std::uint64_t k = entry_hash(t[j]) & mask;  // its home
      const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (stays) continue;
      t[i] = t[j];
      i = j;
      break;
    }
  }
}

std::uint32_t wait_bucket(std::uint64_t us) noexcept {
  if (us < 2) return 0;
  return std::min<std::uint32_t>(kWaitBuckets - 1, std::uint32_t(63 - __builtin_clzll(us)));
}

std::uint64_t clock_us(clockid_t c) noexcept {
  timespec ts{};
  clock_gettime(c, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000ULL + std::uint64_t(ts.tv_nsec) / 1000;
}

const fairlane::BrandedId& default_group() {
  static const fairlane::BrandedId g = *fairlane::BrandedId::parse(fairlane::kDefaultGroup);
  return g;
}

// The job's retry policy as the slot keeps it.
struct RetryRecord {
  std::uint32_t max_attempts;
  std::uint8_t has_backoff, kind, pad[2];
  std::uint32_t base_ms, cap_ms;
  float factor, jitter;
};
static_assert(std::is_trivially_copyable_v<RetryRecord> && sizeof(RetryRecord) == 24);

RetryRecord pack(const fairlane::RetryPolicy& p) noexcept {
  RetryRecord r{};
  r.max_attempts = p.max_attempts;
  if (p.backoff) {
    r.has_backoff = 1;
    r.kind = p.backoff->kind == fairlane::Backoff::Kind::fixed ? 0 : 1;
    r.base_ms = std::uint32_t(p.backoff->base.count());
    r.cap_ms = std::uint32_t(p.backoff->cap.count());
    r.factor = float(p.backoff->factor);
    r.jitter = float(p.backoff->jitter);
  }
  return r;
}

void unpack(const RetryRecord& r, fairlane::RetryPolicy& out) noexcept {
  out.max_attempts = r.max_attempts;
  if (!r.has_backoff) {
    out.backoff.reset();
    return;
  }
  fairlane::Backoff b;
  b.kind = r.kind == 0 ? fairlane::Backoff::Kind::fixed : fairlane::Backoff::Kind::exponential;
  b.base = std::chrono::milliseconds(r.base_ms);
  b.cap = std::chrono::milliseconds(r.cap_ms);
  b.factor = r.factor;
  b.jitter = r.jitter;
  out.backoff = b;
}

}  // namespace

// Everything after `mu` is written only under it.
struct MutexQueue::Header {
  std::uint64_t magic, bytes;
  std::uint32_t jobs, lanes, payload, stride;
  std::uint64_t index_mask, groups_mask;
  std::uint64_t lanes_off, ring_off, groups_off, index_off, slots_off;
  char kind[4];
  std::uint32_t node;
  std::atomic<std::int64_t> clock_offset_ms;  // advance_clock (tests)
  alignas(64) pthread_mutex_t mu;
  pthread_cond_t cv;
  std::uint32_t waiters;
  std::uint64_t mint_last, next_token;
  std::uint32_t free_head;
  std::uint32_t ring_head, ring_count;   // ring of lane indexes, capacity `lanes` (each lane at most once)
  std::uint32_t lease_head, lease_tail;  // leased slots by deadline
  std::uint32_t lane_free_head, lanes_live;
  std::uint32_t pending, leased;
  std::uint64_t enqueued, duplicates, claimed, completed, expired, repairs;
};

struct MutexQueue::Lane {
  fairlane::BrandedId group;
  std::uint8_t live, ringed, paused, pad0;
  std::uint32_t ghash;                   // h32 of the group: its home in the group map
  std::uint32_t head, tail;              // pending slots, lowest id first (doubly linked)
  std::uint32_t depth, active, limit;    // limit 0: none
  std::uint32_t next_free;
  std::uint64_t served;
  std::uint64_t wait[kWaitBuckets];      // enqueue-to-claim waits, as fairlane keeps them
};

struct MutexQueue::Slot {
  std::uint32_t next, prev;              // the lane's pending list, or the lease list; next: the free list
  std::uint32_t lane, state, attempt, len;
  std::uint64_t token, deadline_ms, ready_us;
  fairlane::BrandedId id;                // the text id, as given
  std::uint16_t pad0;
  RetryRecord retry;
  // the payload follows
};
static_assert(std::is_trivially_copyable_v<fairlane::BrandedId> && sizeof(fairlane::BrandedId) == 16);

MutexQueue::~MutexQueue() {
  if (base_) munmap(base_, size_);
}

MutexQueue::Slot* MutexQueue::slot(std::uint32_t i) const noexcept {
  return reinterpret_cast<Slot*>(base_ + h_->slots_off + std::uint64_t(i) * h_->stride);
}
char* MutexQueue::payload_of(Slot* s) const noexcept { return reinterpret_cast<char*>(s + 1); }

bool MutexQueue::create(const std::string& name, std::uint32_t jobs, std::uint32_t lanes, std::uint32_t payload,
                        std::uint64_t& bytes_out, std::string& error) {
  const std::uint64_t stride = round_up(sizeof(Slot) + payload, 64);
  const std::uint64_t index_cap = pow2_at_least(std::uint64_t(jobs) * 2);
  const std::uint64_t groups_cap = pow2_at_least(std::uint64_t(lanes) * 2);
  const std::uint64_t lanes_off = round_up(sizeof(Header), 64);
  const std::uint64_t ring_off = round_up(lanes_off + std::uint64_t(lanes) * sizeof(Lane), 64);
  const std::uint64_t groups_off = round_up(ring_off + std::uint64_t(lanes) * 4, 64);
  const std::uint64_t index_off = round_up(groups_off + groups_cap * 8, 64);
  const std::uint64_t slots_off = round_up(index_off + index_cap * 8, 64);
  const std::uint64_t bytes = slots_off + std::uint64_t(jobs) * stride;
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) { error = "shm_open " + name + ": " + std::strerror(errno); return false; }
  if (ftruncate(fd, off_t(bytes)) != 0) {
    error = std::string("ftruncate: ") + std::strerror(errno);
    close(fd);
    shm_unlink(name.c_str());
    return false;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) { error = std::string("mmap: ") + std::strerror(errno); shm_unlink(name.c_str()); return false; }
  auto* base = static_cast<char*>(p);
  auto* h = new (p) Header{};
  h->bytes = bytes;
  h->jobs = jobs;
  h->lanes = lanes;
  h->payload = payload;
  h->stride = std::uint32_t(stride);
  h->index_mask = index_cap - 1;
  h->groups_mask = groups_cap - 1;
  h->lanes_off = lanes_off;
  h->ring_off = ring_off;
  h->groups_off = groups_off;
  h->index_off = index_off;
  h->slots_off = slots_off;
  std::memcpy(h->kind, "JOB", 4);
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&h->mu, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&h->cv, &ca);
  pthread_condattr_destroy(&ca);
  auto* ln = reinterpret_cast<Lane*>(base + lanes_off);
  for (std::uint32_t i = 0; i < lanes; ++i) {
    new (&ln[i]) Lane{};
    ln[i].head = ln[i].tail = kNil;
    ln[i].next_free = i + 1 < lanes ? i + 1 : kNil;
  }
  h->lane_free_head = lanes ? 0 : kNil;
  for (std::uint32_t i = 0; i < jobs; ++i) {
    auto* s = new (base + slots_off + std::uint64_t(i) * stride) Slot{};
    s->next = i + 1 < jobs ? i + 1 : kNil;
    s->prev = kNil;
  }
  h->free_head = jobs ? 0 : kNil;
  h->lease_head = h->lease_tail = kNil;
  h->magic = kMagic;
  munmap(p, bytes);
  bytes_out = bytes;
  return true;
}

bool MutexQueue::open(const std::string& name, std::string& error) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) { error = "shm_open " + name + ": " + std::strerror(errno); return false; }
  struct stat st {};
  fstat(fd, &st);
  void* p = mmap(nullptr, std::size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) { error = std::string("mmap: ") + std::strerror(errno); return false; }
  base_ = static_cast<char*>(p);
  size_ = std::size_t(st.st_size);
  h_ = reinterpret_cast<Header*>(base_);
  if (h_->magic != kMagic || h_->bytes != size_) { error = "mutex-shm segment " + name + " not initialised"; return false; }
  return true;
}

// ---- the lock ------------------------------------------------------------------

// The lease clock: CLOCK_MONOTONIC (one clock for the host) plus the test
// offset, in microseconds.
std::uint64_t MutexQueue::now_us() const noexcept {
  return clock_us(CLOCK_MONOTONIC) + std::uint64_t(h_->clock_offset_ms.load(std::memory_order_relaxed)) * 1000;
}

bool MutexQueue::lock() noexcept {
  const int rc = pthread_mutex_lock(&h_->mu);
  if (rc == 0) return true;
  if (rc == EOWNERDEAD) {
    rebuild();
    ++h_->repairs;
    pthread_mutex_consistent(&h_->mu);
    return true;
  }
  return false;  // ENOTRECOVERABLE
}

void MutexQueue::unlock() noexcept { pthread_mutex_unlock(&h_->mu); }

void MutexQueue::lock_and_abandon() noexcept { (void)lock(); }

// ---- tables --------------------------------------------------------------------

std::uint32_t MutexQueue::index_find(const fairlane::BrandedId& id, std::uint64_t hash,
                                     std::uint64_t* at) const noexcept {
  auto* t = reinterpret_cast<std::uint64_t*>(base_ + h_->index_off);
  const std::uint64_t mask = h_->index_mask;
  std::uint64_t pos = h32(hash) & mask;
  for (;; pos = (pos + 1) & mask) {
    const std::uint64_t e = t[pos];
    if (e == 0) break;
    if (entry_hash(e) == h32(hash) && slot(entry_index(e))->id == id) {
      if (at) *at = pos;
      return entry_index(e);
    }
  }
  if (at) *at = pos;  // where it would go
  return kNil;
}

void MutexQueue::index_erase(std::uint64_t pos) noexcept {
  table_erase(reinterpret_cast<std::uint64_t*>(base_ + h_->index_off), h_->index_mask, pos);
}

std::uint32_t MutexQueue::lane_of_group(const fairlane::BrandedId& g, std::uint64_t hash, bool make) noexcept {
  auto* t = reinterpret_cast<std::uint64_t*>(base_ + h_->groups_off);
  auto* lanes = reinterpret_cast<Lane*>(base_ + h_->lanes_off);
  const std::uint64_t mask = h_->groups_mask;
  std::uint64_t pos = h32(hash) & mask;
  for (;; pos = (pos + 1) & mask) {
    const std::uint64_t e = t[pos];
    if (e == 0) break;
    if (entry_hash(e) == h32(hash) && lanes[entry_index(e)].group == g) return entry_index(e);
  }
  if (!make || h_->lane_free_head == kNil) return kNil;
  const std::uint32_t i = h_->lane_free_head;
  Lane& l = lanes[i];
  h_->lane_free_head = l.next_free;
  l = Lane{};
  l.group = g;
  l.ghash = h32(hash);
  l.live = 1;
  l.head = l.tail = kNil;
  l.next_free = kNil;
  t[pos] = entry(hash, i);
  ++h_->lanes_live;
  return i;
}

// A lane with no job and no setting goes back to the free lanes.
void MutexQueue::retire_if_idle(std::uint32_t lane) noexcept {
  auto* lanes = reinterpret_cast<Lane*>(base_ + h_->lanes_off);
  Lane& l = lanes[lane];
  if (l.depth || l.active || l.limit || l.paused || l.ringed) return;
  auto* t = reinterpret_cast<std::uint64_t*>(base_ + h_->groups_off);
  const std::uint64_t mask = h_->groups_mask;
  for (std::uint64_t pos = l.ghash & mask; t[pos] != 0; pos = (pos + 1) & mask) {
    if (entry_index(t[pos]) == lane) {
      table_erase(t, mask, pos);
      break;
    }
  }
  l.live = 0;
  l.next_free = h_->lane_free_head;
  h_->lane_free_head = lane;
  --h_->lanes_live;
}

void MutexQueue::maybe_ring(std::uint32_t lane) noexcept {
  Lane& l = reinterpret_cast<Lane*>(base_ + h_->lanes_off)[lane];
  if (l.ringed || l.paused || l.depth == 0 || (l.limit != 0 && l.active >= l.limit)) return;
  auto* ring = reinterpret_cast<std::uint32_t*>(base_ + h_->ring_off);
  ring[(h_->ring_head + h_->ring_count) % h_->lanes] = lane;
  ++h_->ring_count;
  l.ringed = 1;
  if (h_->waiters) pthread_cond_signal(&h_->cv);
}

// Into the lane's pending list at its id position, walking back from the
// tail: O(1) for ids that come in mint order, the common case.
void MutexQueue::pending_insert(std::uint32_t lane, std::uint32_t i) noexcept {
  Lane& l = reinterpret_cast<Lane*>(base_ + h_->lanes_off)[lane];
  Slot* s = slot(i);
  std::uint32_t after = l.tail;
  while (after != kNil && s->id < slot(after)->id) after = slot(after)->prev;
  s->prev = after;
  s->next = after == kNil ? l.head : slot(after)->next;
  if (s->next != kNil) slot(s->next)->prev = i;
  else l.tail = i;
  if (after != kNil) slot(after)->next = i;
  else l.head = i;
}

// Into the lease list by deadline, walking back from the tail (deadlines
// mostly grow).
void MutexQueue::lease_insert(std::uint32_t i) noexcept {
  Slot* s = slot(i);
  std::uint32_t after = h_->lease_tail;
  while (after != kNil && s->deadline_ms < slot(after)->deadline_ms) after = slot(after)->prev;
  s->prev = after;
  s->next = after == kNil ? h_->lease_head : slot(after)->next;
  if (s->next != kNil) slot(s->next)->prev = i;
  else h_->lease_tail = i;
  if (after != kNil) slot(after)->next = i;
  else h_->lease_head = i;
}

void MutexQueue::lease_unlink(std::uint32_t i) noexcept {
  Slot* s = slot(i);
  if (s->prev != kNil) slot(s->prev)->next = s->next;
  else h_->lease_head = s->next;
  if (s->next != kNil) slot(s->next)->prev = s->prev;
  else h_->lease_tail = s->prev;
  s->next = s->prev = kNil;
}

// Leases past their deadline go back to their lane at their id position
// (attempt kept, token dead), at most kMaxExpirePerClaim per call.
void MutexQueue::expire(std::uint64_t now_ms) noexcept {
  auto* lanes = reinterpret_cast<Lane*>(base_ + h_->lanes_off);
  for (std::uint32_t n = 0; n < kMaxExpirePerClaim && h_->lease_head != kNil; ++n) {
    const std::uint32_t i = h_->lease_head;
    Slot* s = slot(i);
    if (s->deadline_ms > now_ms) break;
    lease_unlink(i);
    s->state = kPending;
    s->token = 0;
    s->ready_us = now_ms * 1000;  // pending again from now (ms resolution is enough for the histogram)
    Lane& l = lanes[s->lane];
    --l.active;
    ++l.depth;
    --h_->leased;
    ++h_->pending;
    ++h_->expired;
    pending_insert(s->lane, i);
    maybe_ring(s->lane);
  }
}

// After a holder died inside the lock: everything but the slots, the lanes'
// settings and the counters is derived, and is derived again here. A slot's
// state is written last in each transition, so each slot is in one state.
void MutexQueue::rebuild() noexcept {
  auto* lanes = reinterpret_cast<Lane*>(base_ + h_->lanes_off);
  auto* index = reinterpret_cast<std::uint64_t*>(base_ + h_->index_off);
  auto* groups = reinterpret_cast<std::uint64_t*>(base_ + h_->groups_off);
  std::memset(index, 0, (h_->index_mask + 1) * 8);
  std::memset(groups, 0, (h_->groups_mask + 1) * 8);
  for (std::uint32_t i = 0; i < h_->lanes; ++i) {
    Lane& l = lanes[i];
    l.head = l.tail = kNil;
    l.depth = l.active = 0;
    l.ringed = 0;
  }
  h_->ring_head = h_->ring_count = 0;
  h_->free_head = kNil;
  h_->lease_head = h_->lease_tail = kNil;
  h_->pending = h_->leased = 0;
  std::vector<std::uint32_t> pending, leased;
  for (std::uint32_t i = h_->jobs; i-- > 0;) {
    Slot* s = slot(i);
    if ((s->state == kPending || s->state == kLeased) && s->lane < h_->lanes && lanes[s->lane].live &&
        index_find(s->id, hash_id(s->id), nullptr) == kNil) {
      std::uint64_t at = 0;
      index_find(s->id, hash_id(s->id), &at);
      index[at] = entry(hash_id(s->id), i);
      (s->state == kPending ? pending : leased).push_back(i);
      continue;
    }
    s->state = kFree;
    s->next = h_->free_head;
    s->prev = kNil;
    h_->free_head = i;
  }
  std::sort(pending.begin(), pending.end(), [&](std::uint32_t a, std::uint32_t b) { return slot(a)->id < slot(b)->id; });
  for (std::uint32_t i : pending) {
    Lane& l = lanes[slot(i)->lane];
    Slot* s = slot(i);
    s->next = kNil;
    s->prev = l.tail;
    if (l.tail != kNil) slot(l.tail)->next = i;
    else l.head = i;
    l.tail = i;
    ++l.depth;
    ++h_->pending;
  }
  std::sort(leased.begin(), leased.end(),
            [&](std::uint32_t a, std::uint32_t b) { return slot(a)->deadline_ms < slot(b)->deadline_ms; });
  for (std::uint32_t i : leased) {
    Slot* s = slot(i);
    s->next = kNil;
    s->prev = h_->lease_tail;
    if (h_->lease_tail != kNil) slot(h_->lease_tail)->next = i;
    else h_->lease_head = i;
    h_->lease_tail = i;
    ++lanes[s->lane].active;
    ++h_->leased;
  }
  // The group map and the free lanes from the live lanes; then the ring.
  h_->lane_free_head = kNil;
  h_->lanes_live = 0;
  for (std::uint32_t i = h_->lanes; i-- > 0;) {
    Lane& l = lanes[i];
    if (l.live && (l.depth || l.active || l.limit || l.paused)) {
      std::uint64_t pos = l.ghash & h_->groups_mask;
      while (groups[pos] != 0) pos = (pos + 1) & h_->groups_mask;
      groups[pos] = std::uint64_t(l.ghash) << 32 | (i + 1);
      ++h_->lanes_live;
    } else {
      l.live = 0;
      l.next_free = h_->lane_free_head;
      h_->lane_free_head = i;
    }
  }
  for (std::uint32_t i = 0; i < h_->lanes; ++i)
    if (lanes[i].live) maybe_ring(i);
}

// ---- operations ----------------------------------------------------------------

fairlane::BrandedId MutexQueue::mint() noexcept {
  const std::uint64_t now_ms = clock_us(CLOCK_REALTIME) / 1000;
  const std::uint64_t base = now_ms > fairlane::kEpochMs
                                 ? fairlane::snowflake_of(now_ms - fairlane::kEpochMs, h_->node, 0)
                                 : 0;
  if (!lock()) return {};
  const std::uint64_t next = std::max(base, h_->mint_last + 1);
  h_->mint_last = next;
  unlock();
  return fairlane::BrandedId::make(std::string_view(h_->kind, 3), next);
}

fairlane::EnqueueStatus MutexQueue::enqueue(const fairlane::BrandedId& group, const fairlane::BrandedId& job,
                                            std::string_view payload) noexcept {
  using fairlane::EnqueueStatus;
  if (!job.well_formed()) return EnqueueStatus::invalid_id;
  if (job.kind() != std::string_view(h_->kind, 3)) return EnqueueStatus::kind_mismatch;
  if (group.valid() && !group.well_formed()) return EnqueueStatus::invalid_group;
  if (payload.size() > h_->payload) return EnqueueStatus::payload_too_large;
  const fairlane::BrandedId& g = group.valid() ? group : default_group();
  const std::uint64_t jh = hash_id(job), gh = hash_id(g);
  const std::uint64_t ready = now_us();
  const RetryRecord retry = pack(fairlane::RetryPolicy{});
  if (!lock()) return EnqueueStatus::corrupt;
  std::uint64_t at = 0;
  if (index_find(job, jh, &at) != kNil) {
    ++h_->duplicates;
    unlock();
    return EnqueueStatus::duplicate;
  }
  if (h_->free_head == kNil) {
    unlock();
    return EnqueueStatus::full;
  }
  const std::uint32_t lane = lane_of_group(g, gh, true);
  if (lane == kNil) {
    unlock();
    return EnqueueStatus::lanes_full;
  }
  const std::uint32_t i = h_->free_head;
  Slot* s = slot(i);
  h_->free_head = s->next;
  s->id = job;
  s->lane = lane;
  s->attempt = 0;
  s->token = 0;
  s->deadline_ms = 0;
  s->ready_us = ready;
  s->len = std::uint32_t(payload.size());
  s->retry = retry;
  std::memcpy(payload_of(s), payload.data(), payload.size());
  s->state = kPending;  // last: what a repair reads
  reinterpret_cast<std::uint64_t*>(base_ + h_->index_off)[at] = entry(jh, i);
  pending_insert(lane, i);
  ++reinterpret_cast<Lane*>(base_ + h_->lanes_off)[lane].depth;
  ++h_->pending;
  ++h_->enqueued;
  maybe_ring(lane);
  unlock();
  return EnqueueStatus::enqueued;
}

bool MutexQueue::claim_locked(fairlane::Lease& out, std::uint32_t lease_ms, std::uint64_t now_us) noexcept {
  const std::uint64_t now_ms = now_us / 1000;
  if (h_->lease_head != kNil && slot(h_->lease_head)->deadline_ms <= now_ms) expire(now_ms);
  auto* lanes = reinterpret_cast<Lane*>(base_ + h_->lanes_off);
  auto* ring = reinterpret_cast<std::uint32_t*>(base_ + h_->ring_off);
  while (h_->ring_count > 0) {
    const std::uint32_t lane = ring[h_->ring_head];
    h_->ring_head = (h_->ring_head + 1) % h_->lanes;
    --h_->ring_count;
    Lane& l = lanes[lane];
    if (l.paused || l.depth == 0 || (l.limit != 0 && l.active >= l.limit)) {
      l.ringed = 0;  // left the ring lazily (a limit set, a pause)
      continue;
    }
    const std::uint32_t i = l.head;
    Slot* s = slot(i);
    l.head = s->next;
    if (l.head != kNil) slot(l.head)->prev = kNil;
    else l.tail = kNil;
    --l.depth;
    ++l.active;
    --h_->pending;
    ++h_->leased;
    ++s->attempt;
    s->token = ++h_->next_token;
    s->deadline_ms = now_ms + lease_ms;
    s->state = kLeased;
    lease_insert(i);
    const std::uint64_t waited = now_us > s->ready_us ? now_us - s->ready_us : 0;
    ++l.served;
    ++l.wait[wait_bucket(waited)];
    ++h_->claimed;
    if (l.depth > 0 && (l.limit == 0 || l.active < l.limit)) {
      ring[(h_->ring_head + h_->ring_count) % h_->lanes] = lane;  // LMOVE: back to the tail
      ++h_->ring_count;
    } else {
      l.ringed = 0;
    }
    out.id = s->id;
    out.group = l.group;
    out.attempt = s->attempt;
    out.token = fairlane::Token(s->token);
    out.deadline_ms = s->deadline_ms;
    out.waited_us = waited;
    unpack(s->retry, out.retry);
    out.payload.assign(payload_of(s), s->len);
    return true;
  }
  return false;
}

bool MutexQueue::claim(fairlane::Lease& out, std::uint32_t lease_ms) noexcept {
  const std::uint64_t now = now_us();
  if (!lock()) return false;
  const bool got = claim_locked(out, lease_ms, now);
  unlock();
  return got;
}

bool MutexQueue::claim_wait(fairlane::Lease& out, std::uint32_t lease_ms, int timeout_ms) noexcept {
  timespec until{};
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += long(timeout_ms % 1000) * 1'000'000;
  if (until.tv_nsec >= 1'000'000'000) { until.tv_sec += 1; until.tv_nsec -= 1'000'000'000; }
  if (!lock()) return false;
  bool got = false;
  for (;;) {
    if ((got = claim_locked(out, lease_ms, now_us()))) break;
    ++h_->waiters;
    const int rc = pthread_cond_timedwait(&h_->cv, &h_->mu, &until);
    --h_->waiters;
    if (rc == EOWNERDEAD) {  // the mutex is ours again, its last holder died inside
      rebuild();
      ++h_->repairs;
      pthread_mutex_consistent(&h_->mu);
      continue;
    }
    if (rc != 0) {
      got = rc == ETIMEDOUT && claim_locked(out, lease_ms, now_us());
      break;
    }
  }
  unlock();
  return got;
}

fairlane::AckStatus MutexQueue::complete(const fairlane::BrandedId& job, fairlane::Token token) noexcept {
  using fairlane::AckStatus;
  if (!job.well_formed() || job.kind() != std::string_view(h_->kind, 3)) return AckStatus::gone;
  const std::uint64_t jh = hash_id(job);
  if (!lock()) return AckStatus::corrupt;
  std::uint64_t at = 0;
  const std::uint32_t i = index_find(job, jh, &at);
  if (i == kNil) {
    unlock();
    return AckStatus::gone;
  }
  Slot* s = slot(i);
  if (s->state != kLeased || s->token != token.value) {
    unlock();
    return AckStatus::stale;
  }
  lease_unlink(i);
  index_erase(at);
  const std::uint32_t lane = s->lane;
  s->state = kFree;  // a repair now frees it, whatever follows
  s->next = h_->free_head;
  h_->free_head = i;
  --reinterpret_cast<Lane*>(base_ + h_->lanes_off)[lane].active;
  --h_->leased;
  ++h_->completed;
  maybe_ring(lane);
  retire_if_idle(lane);
  unlock();
  return AckStatus::ok;
}

fairlane::LaneStatus MutexQueue::set_limit(const fairlane::BrandedId& group, std::uint32_t limit) noexcept {
  if (!group.well_formed()) return fairlane::LaneStatus::invalid_group;
  if (limit == 0 || limit > fairlane::kMaxLimit) return fairlane::LaneStatus::invalid_argument;
  const std::uint64_t gh = hash_id(group);
  if (!lock()) return fairlane::LaneStatus::corrupt;
  const std::uint32_t lane = lane_of_group(group, gh, true);
  if (lane == kNil) {
    unlock();
    return fairlane::LaneStatus::lanes_full;
  }
  reinterpret_cast<Lane*>(base_ + h_->lanes_off)[lane].limit = limit;
  maybe_ring(lane);  // a higher limit may make it serviceable; a lower one takes effect at its next turn
  unlock();
  return fairlane::LaneStatus::ok;
}

MutexQueue::Stats MutexQueue::stats() noexcept {
  Stats st{};
  if (!lock()) return st;
  st = Stats{h_->enqueued, h_->duplicates, h_->claimed, h_->completed, h_->expired, h_->repairs,
             h_->pending,  h_->leased,     h_->lanes_live, h_->ring_count};
  unlock();
  return st;
}

void MutexQueue::advance_clock(std::uint64_t ms) noexcept {
  h_->clock_offset_ms.fetch_add(std::int64_t(ms), std::memory_order_relaxed);
}

}  // namespace fairlane::bench
