// Peer: the same lane semantics as fairlane behind one process-shared
// pthread mutex. The straw man the lock-free design has to beat.
//
// One POSIX shm segment: a header (mutex, condvar for parked consumers), a
// ring of lane indexes (a circular array: each lane at most once), per-lane
// FIFOs threaded through the job slots, and a free list of slots. Every
// operation takes the mutex:
//   enqueue: pop a free slot, copy the payload, append to its lane; ring the
//            lane if it is not ringed and below its ceiling; signal a parked
//            consumer.
//   claim:   pop the ring's head lane (LMOVE head -> tail), pop the lane's
//            oldest job, lease it (attempt + 1, deadline), active + 1; put the
//            lane back at the tail if it still has jobs and headroom, copy the
//            payload out.
//   complete(slot, attempt): fenced by the attempt, free the slot,
//            active - 1, re-ring the lane if it became serviceable again.
// Not crash-safe (a holder killed inside the mutex wedges everyone) and
// nothing here is meant to be: it shows what the lock costs.
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "peer.hpp"

namespace fairlane::bench {
namespace {

constexpr std::uint32_t kNil = 0xFFFFFFFFu;

struct Header {
  std::uint64_t magic;
  std::uint64_t bytes;
  std::uint32_t jobs, lanes, payload, slot_stride;
  std::uint64_t lanes_off, ring_off, slots_off;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  std::uint32_t waiters;
  std::uint32_t free_head;
  std::uint32_t ring_head, ring_count;  // ring capacity == lanes
};

struct Lane {
  std::uint32_t head, tail;  // slot indexes, kNil when empty
  std::uint32_t depth, active, limit;
  std::uint8_t ringed, paused, pad[2];
};

struct Slot {
  std::uint32_t next;     // lane FIFO or free list
  std::uint32_t lane;
  std::uint32_t attempt;
  std::uint32_t state;    // 0 free, 1 pending, 2 leased
  std::uint64_t deadline_ms;
  std::uint32_t len, pad;
  // payload follows
};

constexpr std::uint64_t kMagic = 0x4d55545851000001ULL;

std::uint64_t mono_ms() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000 + std::uint64_t(ts.tv_nsec) / 1'000'000;
}

class MutexQueue {
 public:
  ~MutexQueue() {
    if (base_) munmap(base_, size_);
  }

  static bool create(const std::string& name, std::uint32_t jobs, std::uint32_t lanes,
                     std::uint32_t payload, std::uint64_t& bytes_out, std::string& error) {
    const std::uint32_t stride = std::uint32_t((sizeof(Slot) + payload + 7) / 8 * 8);
    const std::uint64_t lanes_off = (sizeof(Header) + 63) / 64 * 64;
    const std::uint64_t ring_off = lanes_off + std::uint64_t(lanes) * sizeof(Lane);
    const std::uint64_t slots_off = (ring_off + std::uint64_t(lanes) * 4 + 63) / 64 * 64;
    const std::uint64_t bytes = slots_off + std::uint64_t(jobs) * stride;
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) { error = "shm_open " + name + ": " + std::strerror(errno); return false; }
    if (ftruncate(fd, off_t(bytes)) != 0) {
      error = std::string("ftruncate: ") + std::strerror(errno);
      close(fd);
      return false;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) { error = std::string("mmap: ") + std::strerror(errno); return false; }
    auto* h = static_cast<Header*>(p);
    h->bytes = bytes;
    h->jobs = jobs;
    h->lanes = lanes;
    h->payload = payload;
    h->slot_stride = stride;
    h->lanes_off = lanes_off;
    h->ring_off = ring_off;
    h->slots_off = slots_off;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&h->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    auto* base = static_cast<char*>(p);
    auto* ln = reinterpret_cast<Lane*>(base + lanes_off);
    for (std::uint32_t i = 0; i < lanes; ++i) ln[i] = Lane{kNil, kNil, 0, 0, 0, 0, 0, {}};
    for (std::uint32_t i = 0; i < jobs; ++i) {
      auto* s = reinterpret_cast<Slot*>(base + slots_off + std::uint64_t(i) * stride);
      s->next = i + 1 < jobs ? i + 1 : kNil;
    }
    h->free_head = 0;
    h->magic = kMagic;
    munmap(p, bytes);
    bytes_out = bytes;
    return true;
  }

  bool open(const std::string& name, std::string& error) {
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
    if (h_->magic != kMagic) { error = "mutex-shm segment not initialised"; return false; }
    lanes_ = reinterpret_cast<Lane*>(base_ + h_->lanes_off);
    ring_ = reinterpret_cast<std::uint32_t*>(base_ + h_->ring_off);
    return true;
  }

  bool enqueue(std::uint32_t lane, const char* data, std::uint32_t len) noexcept {
    pthread_mutex_lock(&h_->mu);
    const std::uint32_t i = h_->free_head;
    if (i == kNil) {
      pthread_mutex_unlock(&h_->mu);
      return false;
    }
    Slot* s = slot(i);
    h_->free_head = s->next;
    s->next = kNil;
    s->lane = lane;
    s->state = 1;
    s->len = len;
    std::memcpy(payload(s), data, len);
    Lane& l = lanes_[lane];
    if (l.tail == kNil) l.head = i;
    else slot(l.tail)->next = i;
    l.tail = i;
    ++l.depth;
    maybe_ring(lane, l);
    pthread_mutex_unlock(&h_->mu);
    return true;
  }

  // Claims into out (payload copied); returns the slot or kNil.
  std::uint32_t claim(char* out, std::uint32_t& attempt, std::uint32_t lease_ms) noexcept {
    pthread_mutex_lock(&h_->mu);
    std::uint32_t i = claim_locked(out, attempt, lease_ms);
    pthread_mutex_unlock(&h_->mu);
    return i;
  }

  std::uint32_t claim_wait(char* out, std::uint32_t& attempt, std::uint32_t lease_ms, int timeout_ms) noexcept {
    timespec until{};
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += long(timeout_ms % 1000) * 1'000'000;
    if (until.tv_nsec >= 1'000'000'000) { until.tv_sec += 1; until.tv_nsec -= 1'000'000'000; }
    pthread_mutex_lock(&h_->mu);
    std::uint32_t i;
    while ((i = claim_locked(out, attempt, lease_ms)) == kNil) {
      ++h_->waiters;
      int rc = pthread_cond_timedwait(&h_->cv, &h_->mu, &until);
      --h_->waiters;
      if (rc == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&h_->mu);
    return i;
  }

  bool complete(std::uint32_t i, std::uint32_t attempt) noexcept {
    pthread_mutex_lock(&h_->mu);
    Slot* s = slot(i);
    if (s->state != 2 || s->attempt != attempt) {
      pthread_mutex_unlock(&h_->mu);
      return false;
    }
    const std::uint32_t lane = s->lane;
    s->state = 0;
    s->next = h_->free_head;
    h_->free_head = i;
    Lane& l = lanes_[lane];
    --l.active;
    maybe_ring(lane, l);
    pthread_mutex_unlock(&h_->mu);
    return true;
  }

 private:
  Slot* slot(std::uint32_t i) const noexcept {
    return reinterpret_cast<Slot*>(base_ + h_->slots_off + std::uint64_t(i) * h_->slot_stride);
  }
  static char* payload(Slot* s) noexcept { return reinterpret_cast<char*>(s + 1); }

  void maybe_ring(std::uint32_t lane, Lane& l) noexcept {
    if (l.ringed || l.paused || l.depth == 0 || (l.limit != 0 && l.active >= l.limit)) return;
    ring_[(h_->ring_head + h_->ring_count) % h_->lanes] = lane;
    ++h_->ring_count;
    l.ringed = 1;
    if (h_->waiters) pthread_cond_signal(&h_->cv);
  }

  std::uint32_t claim_locked(char* out, std::uint32_t& attempt, std::uint32_t lease_ms) noexcept {
    if (h_->ring_count == 0) return kNil;
    const std::uint32_t lane = ring_[h_->ring_head];
    h_->ring_head = (h_->ring_head + 1) % h_->lanes;
    --h_->ring_count;
    Lane& l = lanes_[lane];
    const std::uint32_t i = l.head;
    Slot* s = slot(i);
    l.head = s->next;
    if (l.head == kNil) l.tail = kNil;
    --l.depth;
    ++l.active;
    s->state = 2;
    attempt = ++s->attempt;
    s->deadline_ms = mono_ms() + lease_ms;
    std::memcpy(out, payload(s), s->len);
    if (l.depth > 0 && (l.limit == 0 || l.active < l.limit)) {
      ring_[(h_->ring_head + h_->ring_count) % h_->lanes] = lane;  // back to the tail
      ++h_->ring_count;
    } else {
      l.ringed = 0;
    }
    return i;
  }

  char* base_ = nullptr;
  std::size_t size_ = 0;
  Header* h_ = nullptr;
  Lane* lanes_ = nullptr;
  std::uint32_t* ring_ = nullptr;
};

class MutexShmPeer final : public Peer {
 public:
  std::string_view name() const noexcept override { return "mutex-shm"; }
  std::string_view what() const noexcept override {
    return "fairlane's lanes + ring + leases under one process-shared pthread mutex";
  }

  bool setup(const Params& p, std::string& info, std::string& error) override {
    name_ = "/fairlane-bench-mutex-" + std::to_string(getpid());
    shm_unlink(name_.c_str());
    const std::uint64_t jobs = std::max(p.backlog * 2, p.drain_jobs + p.backlog) + 1024;
    if (!MutexQueue::create(name_, std::uint32_t(jobs), p.lanes, p.payload, bytes_, error)) return false;
    info = "shm=" + name_;
    return true;
  }

  bool attach(const Params&, std::string_view info, std::string& error) override {
    q_ = std::make_unique<MutexQueue>();
    return q_->open(std::string(info.substr(info.find('=') + 1)), error);
  }

  void producer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    ctx.produce([&](std::uint32_t lane, const char* data, std::uint32_t len) { return q.enqueue(lane, data, len); },
                [] {});
  }

  void consumer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    const std::uint32_t lease = ctx.params().lease_ms;
    std::vector<char> buf(ctx.params().payload);
    std::uint32_t slot = kNil, attempt = 0;
    ctx.consume(
        [&]() -> const char* {
          slot = q.claim(buf.data(), attempt, lease);
          return slot != kNil ? buf.data() : nullptr;
        },
        [&] {
          if (!q.complete(slot, attempt)) ctx.fail("mutex-shm: complete refused a fresh lease");
        },
        [&](int timeout_ms) -> const char* {
          slot = q.claim_wait(buf.data(), attempt, lease, timeout_ms);
          return slot != kNil ? buf.data() : nullptr;
        });
  }

  void detach() override { q_.reset(); }

  void teardown() override {
    if (!name_.empty()) shm_unlink(name_.c_str());
    name_.clear();
  }

  std::uint64_t shared_bytes() const override { return bytes_; }

 private:
  std::string name_;
  std::uint64_t bytes_ = 0;
  std::unique_ptr<MutexQueue> q_;
};

}  // namespace

std::unique_ptr<Peer> make_mutex_shm_peer() { return std::make_unique<MutexShmPeer>(); }

}  // namespace fairlane::bench
