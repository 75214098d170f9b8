// fairlane_cycle_probe: a program whose locked read-modify-writes are known,
// to check the cycle counter's RMW count (bench/cycle/count.sh --probe, and
// the ctest bench.cycle.probe). Each region's dump text carries the count
// per iteration that fairlane_cycle_report --check must find exactly.
//
//   asm      inline assembly, so the compiler cannot choose other
//            instructions. Counted, once each: lock add, lock xadd, lock
//            cmpxchg that succeeds, lock cmpxchg that fails, xchg with memory
//            (no lock prefix: implicitly locked), mfence, lock cmpxchg16b.
//            Not counted: xchg between registers, a plain add to memory,
//            lfence, sfence, a plain load and store, a pause. 7 per iteration.
//   atomics  std::atomic as the library uses it: fetch_add, exchange,
//            compare_exchange_strong, a seq_cst store (an xchg on x86-64),
//            a seq_cst fence (mfence), and relaxed/acquire/release loads and
//            stores (plain moves, not counted). 5 per iteration.
//   libc     pthread_spin_lock + pthread_spin_unlock of a free lock: glibc's
//            x86-64 lock is one lock decl, its unlock a plain store; checks
//            that RMWs in a shared object (its own addresses) are found. 1.
//   none     the same shape of loop with only plain memory operations. 0.
//   inlined  no RMWs; checks the report's --inlined attribution instead:
//            cycleprobe::probe_outer, always inlined, runs one instruction
//            of its own and probe_inner (two) twice: 5 instructions in
//            probe_outer, 4 in probe_inner, per iteration (inl=
//            expectations; this file is built with -g for it).
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <valgrind/callgrind.h>

namespace {

struct alignas(16) Pair {
  std::uint64_t lo, hi;
};

Pair g_pair{0, 0};
std::uint64_t g_word = 0;
std::atomic<std::uint64_t> g_atomic{0};
std::atomic<std::uint64_t> g_flag{0};
pthread_spinlock_t g_spin;

__attribute__((noinline)) void asm_iteration() {
  std::uint64_t v = 1, expected = 0, r = 0;
  // lock add
  asm volatile("lock addq $1, %0" : "+m"(g_word) : : "cc");
  // lock xadd
  asm volatile("lock xaddq %1, %0" : "+m"(g_word), "+r"(v) : : "cc");
  // lock cmpxchg that succeeds: compare with the current value
  expected = __atomic_load_n(&g_word, __ATOMIC_RELAXED);
  r = expected + 1;
  asm volatile("lock cmpxchgq %2, %0" : "+m"(g_word), "+a"(expected) : "r"(r) : "cc");
  // lock cmpxchg that fails: the word is never ~0
  expected = ~std::uint64_t(0);
  asm volatile("lock cmpxchgq %2, %0" : "+m"(g_word), "+a"(expected) : "r"(r) : "cc");
  // xchg with memory, no prefix
  v = 7;
  asm volatile("xchgq %1, %0" : "+m"(g_word), "+r"(v));
  // mfence
  asm volatile("mfence" ::: "memory");
  // lock cmpxchg16b (compare rdx:rax, swap rcx:rbx)
  {
    std::uint64_t lo = g_pair.lo, hi = g_pair.hi;
    const std::uint64_t nlo = lo + 1, nhi = hi;
    asm volatile("lock cmpxchg16b %0" : "+m"(g_pair), "+a"(lo), "+d"(hi) : "b"(nlo), "c"(nhi) : "cc");
  }
  // Not locked RMWs:
  std::uint64_t a = 1, b = 2;
  asm volatile("xchgq %0, %1" : "+r"(a), "+r"(b));            // registers only
  asm volatile("addq $3, %0" : "+m"(g_word) : : "cc");        // plain RMW, not atomic
  asm volatile("lfence" ::: "memory");
  asm volatile("sfence" ::: "memory");
  asm volatile("pause");
  asm volatile("movq %1, %0" : "=m"(g_word) : "r"(a + b));   // plain store
}

__attribute__((noinline)) void atomics_iteration() {
  g_atomic.fetch_add(1, std::memory_order_relaxed);          // lock xadd / lock add
  (void)g_atomic.exchange(5, std::memory_order_acq_rel);     // xchg
  std::uint64_t e = 5;
  g_atomic.compare_exchange_strong(e, 6, std::memory_order_acq_rel);  // lock cmpxchg
  g_flag.store(1, std::memory_order_seq_cst);                // xchg (or mov + mfence: still 1)
  std::atomic_thread_fence(std::memory_order_seq_cst);       // mfence (or lock or: still 1)
  // Plain moves on x86-64:
  (void)g_atomic.load(std::memory_order_relaxed);
  (void)g_atomic.load(std::memory_order_acquire);
  (void)g_atomic.load(std::memory_order_seq_cst);
  g_flag.store(2, std::memory_order_release);
  g_flag.store(3, std::memory_order_relaxed);
}

__attribute__((noinline)) void libc_iteration() {
  pthread_spin_lock(&g_spin);
  pthread_spin_unlock(&g_spin);
}

__attribute__((noinline)) void none_iteration() {
  volatile std::uint64_t* w = &g_word;
  *w = *w + 1;
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void inlined_iteration();

template <class F>
void region(const char* name, unsigned rmw, std::uint64_t n, F f, const char* extra = "") {
  CALLGRIND_TOGGLE_COLLECT;
  for (std::uint64_t i = 0; i < n; ++i) f();
  CALLGRIND_TOGGLE_COLLECT;
  char text[160];
  std::snprintf(text, sizeof text, "%s n=%llu rmw=%u%s", name, static_cast<unsigned long long>(n), rmw, extra);
  CALLGRIND_DUMP_STATS_AT(text);
}

}  // namespace

// In a named namespace: the debug information names them with it, whatever
// the compiler does with the names of an anonymous namespace's functions.
namespace cycleprobe {
// Inline assembly, so that the count is the compiler's choice of nothing.
[[gnu::always_inline]] inline void probe_inner() { asm volatile("nop\n\tnop" ::: "memory"); }
[[gnu::always_inline]] inline void probe_outer() {
  probe_inner();
  asm volatile("nop" ::: "memory");
  probe_inner();
}
}  // namespace cycleprobe

namespace {
__attribute__((noinline)) void inlined_iteration() { cycleprobe::probe_outer(); }
}  // namespace

int main(int argc, char** argv) {
  std::uint64_t n = 1000;
  if (argc == 3 && std::strcmp(argv[1], "--n") == 0) n = std::strtoull(argv[2], nullptr, 10);
  pthread_spin_init(&g_spin, PTHREAD_PROCESS_PRIVATE);
  CALLGRIND_START_INSTRUMENTATION;
  region("asm", 7, n, asm_iteration);
  region("atomics", 5, n, atomics_iteration);
  region("libc", 1, n, libc_iteration);
  region("none", 0, n, none_iteration);
  region("inlined", 0, n, inlined_iteration, " inl=cycleprobe::probe_outer:5 inl=cycleprobe::probe_inner:4");
  CALLGRIND_STOP_INSTRUMENTATION;
  std::printf("fairlane_cycle_probe: %llu iterations per region\n", static_cast<unsigned long long>(n));
  return 0;
}
