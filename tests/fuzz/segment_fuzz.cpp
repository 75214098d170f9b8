// libFuzzer target (issue 16): a small, valid, populated segment is written
// over with the fuzzer's bytes, then every kind of call runs on it. Nothing
// is asserted except that nothing crashes (ASan, UBSan, a signal) or hangs
// (libFuzzer's -timeout). Built only with FAIRLANE_FUZZ=ON and clang (preset
// `fuzz`, `./run.sh fuzz`).
//
// Input: a list of writes, each
//   offset  u32, little-endian: where, taken modulo the room past the first
//           4096 bytes of the segment (the header; left alone)
//   length  u8, modulo 17: 0..16 bytes
//   bytes   `length` bytes (fewer if the input ends first)
//
// Each input gets its own segment (jobs 64, lanes 8, payload 64), named by
// this process's pid and a counter, removed at the end of the input.
#include <fairlane/queue.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace fairlane;

constexpr std::size_t kSkip = 4096;

BrandedId group(std::uint64_t n) { return BrandedId::make("FZG", n + 1); }

// Leases taken before the scribbling, handed back after it.
struct Held {
  std::vector<Lease> leases;
  std::vector<BrandedId> ids;
};

Held populate(Queue& q) {
  Held h;
  (void)q.set_limit(group(0), 2);
  (void)q.set_weight(group(1), 3);
  (void)q.pause(group(3));
  for (int i = 0; i < 12; ++i) {
    const BrandedId id = q.mint();
    EnqueueOptions o;
    if (i == 11) o.delay_ms = 60'000;
    if (q.enqueue(group(std::uint64_t(i) % 4), id, "fuzz payload " + std::to_string(i), o) == EnqueueStatus::enqueued)
      h.ids.push_back(id);
  }
  for (int i = 0; i < 5; ++i) {
    Lease l;
    if (q.try_claim(l, 60'000) == ClaimStatus::claimed) h.leases.push_back(l);
  }
  if (h.leases.size() >= 2) {
    (void)q.fail(h.leases[0].id, h.leases[0].token, FailOptions{60'000, 5, "later"});  // scheduled
    (void)q.fail(h.leases[1].id, h.leases[1].token, FailOptions{0, 1, "dead"});        // dead
  }
  return h;
}

void scribble(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const int fd = ::shm_open(("/" + name).c_str(), O_RDWR, 0);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || std::size_t(st.st_size) <= kSkip + 16) {
    ::close(fd);
    return;
  }
  const std::size_t seg = std::size_t(st.st_size);
  void* p = ::mmap(nullptr, seg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return;
  auto* base = static_cast<unsigned char*>(p);
  std::size_t i = 0;
  while (i + 5 <= size) {
    std::uint32_t off = 0;
    std::memcpy(&off, data + i, 4);  // little-endian hosts only (Linux x86-64 / arm64)
    std::size_t len = data[i + 4] % 17;
    i += 5;
    if (len > size - i) len = size - i;
    const std::size_t room = seg - kSkip - len + 1;
    std::memcpy(base + kSkip + off % room, data + i, len);
    i += len;
  }
  ::munmap(p, seg);
}

// Every kind of call, on one handle; results are ignored.
void exercise(Queue& q, Held& held) {
  for (int i = 0; i < 3; ++i) (void)q.enqueue(group(std::uint64_t(i)), q.mint(), "after");
  (void)q.enqueue(BrandedId(), q.mint(), "default lane");
  if (!held.ids.empty()) (void)q.enqueue(group(0), held.ids.back(), "duplicate?");
  Lease l;
  for (int i = 0; i < 4; ++i) {
    if (q.try_claim(l, 60'000) != ClaimStatus::claimed) break;
    if (i % 2) (void)q.complete(l.id, l.token);
    else (void)q.fail(l.id, l.token, FailOptions{0, 2, "fuzz"});
  }
  for (const Lease& h : held.leases) {
    (void)q.extend(h.id, h.token, 1000);
    (void)q.complete(h.id, h.token);
    (void)q.release(h.id, h.token);
    (void)q.fail(h.id, h.token, FailOptions{});
  }
  std::vector<Lease> batch(3);
  const std::size_t n = q.claim_batch(batch, 60'000);
  std::vector<AckStatus> acks(n);
  (void)q.complete_batch(std::span<const Lease>(batch.data(), n), acks);
  const std::size_t m = q.claim_lane_batch(batch, 60'000);
  for (std::size_t k = 0; k < m; ++k) (void)q.release(batch[k].id, batch[k].token);
  std::vector<EnqueueItem> items = {{group(4), q.mint(), "b1"}, {group(5), q.mint(), "b2"}};
  std::vector<EnqueueStatus> st(items.size());
  (void)q.enqueue_batch(items, st);
  (void)q.set_limit(group(1), 1);
  (void)q.clear_limit(group(0));
  (void)q.set_weight(group(2), 2);
  (void)q.resume(group(3));
  (void)q.pause(group(6));
  (void)q.depth(group(0));
  (void)q.drain(group(5));
  for (const BrandedId& id : held.ids) {
    (void)q.job(id, true);
    (void)q.reassign(id, group(7));
    (void)q.requeue_dead(id);
  }
  (void)q.snapshot();
  (void)q.jobs();
  JobFilter dead;
  dead.state = JobState::dead;
  (void)q.jobs(dead);
  (void)q.requeue_all_dead();
  (void)q.processes();
  (void)q.recovery();
  (void)q.corruption();
  (void)q.config();
  q.advance_clock(1000);
  (void)q.tick();
  (void)q.fsck();
  (void)q.purge_dead();
  (void)q.release_all();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static unsigned long counter = 0;
  const std::string name = "flfuzz_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  (void)Queue::remove(name);
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 8;
  o.payload_bytes = 64;
  o.processes = 4;  // the two handles of an input, with room: 64 thread records, not 4,096
  {
    auto created = Queue::create(name, o);
    if (!created) {
      std::fprintf(stderr, "segment_fuzz: create %s: %s\n", name.c_str(), created.error().message.c_str());
      return 0;
    }
    Queue q = std::move(created.value());
    Held held = populate(q);
    scribble(name, data, size);
    exercise(q, held);
    {
      auto second = Queue::open(name);  // attaching to a damaged segment
      if (second) exercise(*second, held);
    }
    auto repaired = q.repair(true);
    (void)repaired;
    (void)q.fsck();
    Lease l;
    (void)q.enqueue(group(0), q.mint(), "after repair");
    if (q.try_claim(l, 1000) == ClaimStatus::claimed) (void)q.complete(l.id, l.token);
    (void)q.snapshot();
  }
  (void)Queue::remove(name);
  return 0;
}
