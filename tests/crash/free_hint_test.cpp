// Free hints (src/slots.hpp): an allocator passes over a block of slots
// whose hint says none is free, so a full table is told without reading
// every slot word. What they must never do is hide a free slot: each test
// here is one way a hint could end up saying "none" over a free slot, and
// what puts it right.
#include <gtest/gtest.h>

#include <fairlane/queue.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../src/failpoint.hpp"
#include "../../src/slots.hpp"
#include "segment.hpp"
#include "raw_segment.hpp"
#include "stopped_call.hpp"
#include "test_support.hpp"

namespace fairlane {
namespace {

using detail::kHintBlock;
using detail::kHintOwned;
using detail::kHintNone;
using test::expect_clean;
using test::RawSegment;
using test::SegmentFixture;

const BrandedId G = BrandedId::make("GRP", 7);
constexpr std::uint32_t kJobs = 4 * kHintBlock;

// Every slot of a `jobs`-slot queue held by a lease; free(slot) completes
// the one on that slot.
class FreeHints : public SegmentFixture {
 protected:
  void fill(std::uint32_t jobs = kJobs) {
    jobs_ = jobs;
    QueueOptions o;
    o.jobs = jobs;
    o.lanes = 8;
    o.payload_bytes = 16;
    create(o);
    ASSERT_FALSE(HasFailure());
    const BrandedId first = q().mint();
    ASSERT_EQ(q().enqueue(G, first, "t"), EnqueueStatus::enqueued);
    for (std::uint32_t i = 1; i < jobs; ++i) ASSERT_EQ(q().enqueue(G, q().mint(), "t"), EnqueueStatus::enqueued);
    leases_.resize(jobs);
    for (Lease& l : leases_) ASSERT_TRUE(q().claim(l, 600000));
    raw_.emplace(seg());
    // An empty table is filled from the thread's cursor on, round to it.
    cursor_ = slot_of_id(first);
    ASSERT_LT(cursor_, jobs);
    // The lease on each slot, by its token's slot (checked against the
    // slot's own words below, once).
    on_slot_.assign(jobs, ~0U);
    const std::uint64_t mask = (1ULL << raw_->header().slot_bits) - 1;
    for (std::uint32_t k = 0; k < jobs; ++k) {
      const auto slot = std::uint32_t(leases_[k].token.value & mask);
      ASSERT_LT(slot, jobs);
      ASSERT_EQ(raw_->slot(slot).sf.load(), leases_[k].id.snowflake());
      ASSERT_EQ(detail::SlotWord::state(raw_->slot_word_value(slot)), detail::SlotState::leased);
      on_slot_[slot] = k;
    }
  }
  // fill(jobs), then one enqueue that answers `full`: every hint of the
  // table says none.
  void fill_full(std::uint32_t jobs = kJobs) {
    fill(jobs);
    ASSERT_FALSE(HasFailure());
    ASSERT_EQ(q().enqueue(G, q().mint(), "x"), EnqueueStatus::full);
  }
  void free(std::uint32_t slot) {
    ASSERT_LT(slot, jobs_);
    ASSERT_NE(on_slot_[slot], ~0U) << "no lease on slot " << slot;
    Lease& l = leases_[on_slot_[slot]];
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    l.id = {};
    on_slot_[slot] = ~0U;
  }
  std::uint32_t slot_of_id(const BrandedId& id) {
    for (std::uint32_t i = 0; i < jobs_; ++i)
      if (raw_->slot(i).sf.load() == id.snowflake()) return i;
    return ~0U;
  }
  std::uint32_t blocks() const { return detail::hint_blocks(jobs_); }
  std::uint32_t groups() const { return detail::hint_groups(jobs_); }
  void finish() {
    for (Lease& l : leases_)
      if (l.id.valid()) {
        EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
      }
    test::serve_all(q());
    expect_clean(q());
  }
  void second_owner_race(bool sweep_reset);
  std::uint32_t jobs_ = 0;
  std::vector<Lease> leases_;
  std::vector<std::uint32_t> on_slot_;  // index in leases_ of the lease on each slot, ~0U once freed
  // Where this thread's allocation cursor stands after fill(): the slot of
  // the first job. Its start is the thread id's hash (alloc_cursor).
  std::uint32_t cursor_ = 0;
  std::optional<RawSegment> raw_;
};

// A full table says so and marks every block none; a slot freed in any
// block is found by the next enqueue, through the block's hint when it is
// not the cursor's block (the complete said "look" again). Before the
// hints, a full answer read all 256 slot words.
TEST_F(FreeHints, ASlotFreedInAnyBlockOfAFullTableIsFound) {
  fill_full();
  ASSERT_FALSE(HasFailure());
  for (std::uint32_t b = 0; b < kJobs / kHintBlock; ++b) EXPECT_EQ(raw_->hint(b).load(), kHintNone) << "block " << b;
  for (std::uint32_t b = 0; b < kJobs / kHintBlock; ++b) {
    const std::uint32_t slot = b * kHintBlock + 5 + b;
    free(slot);
    ASSERT_FALSE(HasFailure());
    EXPECT_EQ(raw_->hint(b).load(), 0u) << "the complete left block " << b << " marked none";
    const BrandedId id = q().mint();
    EXPECT_EQ(q().enqueue(G, id, "x"), EnqueueStatus::enqueued) << "slot " << slot << " was free";
    EXPECT_EQ(slot_of_id(id), slot);
    EXPECT_EQ(q().enqueue(G, q().mint(), "y"), EnqueueStatus::full);
  }
  finish();
}

// The race the protocol is for: an allocator that owns a block's look has
// found no free slot in it and has not yet written "none" when a slot of
// that block is freed. Its write must fail, and the slot stay findable.
TEST_F(FreeHints, ASlotFreedWhileAnAllocatorConcludesItsBlockHasNoneIsFound) {
  fill();
  ASSERT_FALSE(HasFailure());
  const BrandedId a = q().mint();
  test::StoppedCall<EnqueueStatus> allocator("alloc.block_looked", [&] { return q().enqueue(G, a, "a"); });
  std::uint32_t looked = ~0U;
  for (std::uint32_t b = 0; b < kJobs / kHintBlock; ++b)
    if (raw_->hint(b).load() >= kHintOwned) looked = b;
  ASSERT_NE(looked, ~0U) << "no block is being looked at";
  free(looked * kHintBlock + 9);
  const EnqueueStatus first = allocator.go();
  // It may have come back to the block and taken the slot; if not, the
  // block must not say none.
  if (first == EnqueueStatus::enqueued) {
    EXPECT_EQ(slot_of_id(a), looked * kHintBlock + 9);
  } else {
    EXPECT_EQ(first, EnqueueStatus::full);
    EXPECT_NE(raw_->hint(looked).load(), kHintNone) << "a free slot's block says none";
    EXPECT_EQ(q().enqueue(G, q().mint(), "b"), EnqueueStatus::enqueued);
  }
  EXPECT_EQ(q().enqueue(G, q().mint(), "c"), EnqueueStatus::full);
  finish();
}

// An owner that has found no free slot in its block and has not yet written
// "none" (stopped at the step point) while two slots of the block are freed
// (the first freer stores "look", the second finds it) and a second
// allocator takes the look over (its own CAS from "look"; it is then
// preempted before it finds them: done here by hand, with the value a look
// of another thread writes). The first owner's "none" must not land on the
// second's look: the block would say none over two free slots, and an
// enqueue answer `full`. With `sweep_reset`, the sweep stores "look" over
// the first owner's value instead of a freer. (Found in review of c7c52b9:
// with one shared "checking" value both tests failed.)
void FreeHints::second_owner_race(bool sweep_reset) {
  fill();
  ASSERT_FALSE(HasFailure());
  test::StoppedCall<EnqueueStatus> first_owner("alloc.block_looked", [&] { return q().enqueue(G, q().mint(), "a"); });
  std::uint32_t b = ~0U;
  for (std::uint32_t k = 0; k < kJobs / kHintBlock; ++k)
    if (raw_->hint(k).load() >= kHintOwned) b = k;
  ASSERT_NE(b, ~0U) << "no block is being looked at";
  if (sweep_reset) {
    (void)q().tick();
    EXPECT_EQ(raw_->hint(b).load(), 0u);
  }
  free(b * kHintBlock + 20);
  free(b * kHintBlock + 40);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(raw_->hint(b).load(), 0u);
  std::uint32_t look = 0;
  const std::uint32_t second = kHintOwned + 0x1234;
  ASSERT_NE(raw_->hint(b).load(), second);
  EXPECT_TRUE(raw_->hint(b).compare_exchange_strong(look, second));
  const EnqueueStatus first = first_owner.go();
  EXPECT_EQ(first, EnqueueStatus::full) << "it looked before the frees";
  EXPECT_NE(raw_->hint(b).load(), kHintNone) << "block " << b << " says none over two free slots";
  EXPECT_EQ(q().enqueue(G, q().mint(), "c"), EnqueueStatus::enqueued) << "full with two slots free";
  raw_->hint(b).store(0);  // the second look, never finished here
  finish();
}

TEST_F(FreeHints, AnOwnersNoneDoesNotLandOnALaterOwnersLookAfterAFreersStore) { second_owner_race(false); }
TEST_F(FreeHints, AnOwnersNoneDoesNotLandOnALaterOwnersLookAfterTheSweepsReset) { second_owner_race(true); }

// A freer stopped or killed between its CAS and its store, or a scribble,
// can leave "none" over a free slot; so can an allocator that died owning a
// look ("checking" for ever). The sweep (tick: a whole pass) sets both back
// to "look", and the slot is found.
TEST_F(FreeHints, TheSweepSetsBackAHintThatHidesAFreeSlotOrWasLeftMidLook) {
  fill_full();
  ASSERT_FALSE(HasFailure());
  free(2 * kHintBlock + 3);
  ASSERT_FALSE(HasFailure());
  raw_->hint(2).store(kHintNone);      // as a freer stopped before its store leaves it
  raw_->hint(3).store(kHintOwned + 77);  // as an allocator that died mid-look leaves it
  (void)q().tick();
  EXPECT_EQ(raw_->hint(2).load(), 0u);
  EXPECT_EQ(raw_->hint(3).load(), 0u);
  const BrandedId id = q().mint();
  EXPECT_EQ(q().enqueue(G, id, "x"), EnqueueStatus::enqueued);
  EXPECT_EQ(slot_of_id(id), 2 * kHintBlock + 3);
  finish();
}

// A child forked without exec that uses its copy of the handle acts for its
// parent (design.md) and keeps the forking thread's thread record and look
// count: its looks must still write tokens of their own. The child owns a
// look at block 2 and stops before its "none"; the sweep sets the hint back
// to "look"; the parent's next look at block 2 takes it over. The child's
// CAS to none must not land on the parent's look (as in
// AnOwnersNoneDoesNotLandOnALaterOwnersLook*, where a later owner that has
// not yet reached two freed slots would leave them hidden until the sweep).
TEST_F(FreeHints, AForkedCopyOfAHandleDoesNotWriteItsParentsToken) {
  fill();
  ASSERT_FALSE(HasFailure());
  constexpr std::uint32_t b = 2;
  // A look of the parent's first, so that its count is under way when the
  // child is forked (the child then has the same count).
  ASSERT_EQ(q().enqueue(G, q().mint(), "x"), EnqueueStatus::full);
  for (std::uint32_t k = 0; k < kJobs / kHintBlock; ++k) raw_->hint(k).store(k == b ? 0 : kHintNone);
  raw_->group_hint(0).store(0);  // the full answer above left the group none
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    detail::failpoint_call("alloc.block_looked", [](void*) {
      static bool once = false;
      if (!once) once = true, ::raise(SIGSTOP);  // stopped mid-look, its none not yet written
    }, nullptr);
    ::_exit(q().enqueue(G, q().mint(), "c") == EnqueueStatus::full ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(st));
  const std::uint32_t child_token = raw_->hint(b).load();
  ASSERT_NE(child_token, kHintNone);  // its token, or 0 if a copy does not own looks
  (void)q().tick();
  ASSERT_EQ(raw_->hint(b).load(), 0u);
  struct Step {
    RawSegment* raw;
    pid_t child;
    std::thread::id who;
    std::uint32_t mine = 0, after_child = 0;
  } step{&*raw_, child, std::this_thread::get_id()};
  detail::failpoint_call("alloc.block_looked", [](void* p) {
    Step& s = *static_cast<Step*>(p);
    if (std::this_thread::get_id() != s.who || s.mine != 0) return;
    s.mine = s.raw->hint(b).load();  // this look's token
    ::kill(s.child, SIGCONT);         // the child's CAS to none, while this look is on
    int cst = 0;
    ::waitpid(s.child, &cst, 0);
    s.after_child = s.raw->hint(b).load();
  }, &step);
  EXPECT_EQ(q().enqueue(G, q().mint(), "p"), EnqueueStatus::full);
  detail::failpoint_call("alloc.block_looked", nullptr, nullptr);
  EXPECT_NE(step.mine, child_token) << "parent and child wrote one token: 0x" << std::hex << step.mine;
  EXPECT_EQ(step.after_child, step.mine) << "the child's none landed on the parent's look: 0x" << std::hex
                                         << step.after_child;
  finish();
}

// A thread that finds no thread record free looks without owning: it
// writes neither a token nor a none. (Until 2026-12-06 such threads shared
// one owner number, and two of them could in principle write one token;
// holding a group's look for a whole walk widened that window. Found in
// the group hints' review.) A thread with a record, after it, marks every
// block none.
TEST_F(FreeHints, AThreadWithoutAThreadRecordLooksWithoutOwning) {
  fill();
  ASSERT_FALSE(HasFailure());
  for (std::uint32_t k = 0; k < blocks() + groups(); ++k) raw_->hint(k).store(0);
  detail::Segment& s = detail::QueueAccess::segment(q());
  const std::uint64_t owner = detail::ThreadOwner::make(s.me_index, s.me->incarnation.load());
  std::vector<std::uint32_t> taken;  // every record free until now, held in this process's name
  for (std::uint32_t i = 0; i < s.thread_count; ++i) {
    std::uint64_t free = 0;
    if (s.threads[i].owner.compare_exchange_strong(free, owner)) taken.push_back(i);
  }
  detail::raise_threads_used(*s.h, s.thread_count);
  ASSERT_FALSE(taken.empty());
  EnqueueStatus st{};
  std::thread([&] { st = q().enqueue(G, q().mint(), "x"); }).join();
  EXPECT_EQ(st, EnqueueStatus::full);
  for (std::uint32_t k = 0; k < blocks() + groups(); ++k)
    EXPECT_EQ(raw_->hint(k).load(), 0u) << "hint " << k << " written by a thread without a record";
  for (const std::uint32_t i : taken) s.threads[i].owner.store(0);
  std::thread([&] { st = q().enqueue(G, q().mint(), "y"); }).join();
  EXPECT_EQ(st, EnqueueStatus::full);
  for (std::uint32_t b = 0; b < blocks(); ++b) EXPECT_EQ(raw_->hint(b).load(), kHintNone) << "block " << b;
  EXPECT_EQ(raw_->group_hint(0).load(), kHintNone);
  finish();
}

// ---- group hints: the block hints' protocol one level up -----------------

// A table of three groups, the last one a part of a group whose last block
// is a part of a block.
constexpr std::uint32_t kGroupJobs = 2 * detail::kHintGroupSlots + 3 * kHintBlock + 5;

// A full table says so and marks every group none, so the next full answer
// reads one hint a group. A slot freed in any group, in the last block
// too, is found by the next enqueue (its complete said "look" again over
// the group), and the table is full again after that, every group none.
TEST_F(FreeHints, ASlotFreedInAnyGroupOfAFullTableIsFound) {
  fill_full(kGroupJobs);
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(groups(), 3u);
  for (std::uint32_t g = 0; g < groups(); ++g) EXPECT_EQ(raw_->group_hint(g).load(), kHintNone) << "group " << g;
  for (const std::uint32_t slot : {7u, detail::kHintGroupSlots + 2 * kHintBlock + 1, 2 * detail::kHintGroupSlots + 1,
                                   kGroupJobs - 1, detail::kHintGroupSlots - 1}) {
    free(slot);
    ASSERT_FALSE(HasFailure());
    EXPECT_EQ(raw_->group_hint(slot / detail::kHintGroupSlots).load(), 0u)
        << "the complete left the group of slot " << slot << " none";
    const BrandedId id = q().mint();
    EXPECT_EQ(q().enqueue(G, id, "x"), EnqueueStatus::enqueued) << "slot " << slot << " was free";
    EXPECT_EQ(slot_of_id(id), slot);
    EXPECT_EQ(q().enqueue(G, q().mint(), "y"), EnqueueStatus::full);
    for (std::uint32_t g = 0; g < groups(); ++g) EXPECT_EQ(raw_->group_hint(g).load(), kHintNone) << "group " << g;
  }
  finish();
}

// A freer stopped between its step on its block's hint and its step on its
// group's leaves the block saying "look" and, if an owner of the group's
// look read the block before that, the group saying none. A slot freed
// after it in the same block must not stay hidden behind the group: its
// freer reads the block's hint 0 and still says "look" over the group.
TEST_F(FreeHints, AFreerWhoseBlockSaysLookStillOpensItsGroup) {
  fill_full(kGroupJobs);
  ASSERT_FALSE(HasFailure());
  const std::uint32_t b = detail::kHintGroup + 3;  // a block of group 1
  free(b * kHintBlock + 10);                      // the stopped freer's slot
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(raw_->hint(b).load(), 0u);
  raw_->group_hint(1).store(kHintNone);  // its step on the group not made; the owner's none landed
  free(b * kHintBlock + 20);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(raw_->group_hint(1).load(), 0u) << "a free whose block said look left its group none";
  const BrandedId id = q().mint();
  EXPECT_EQ(q().enqueue(G, id, "x"), EnqueueStatus::enqueued) << "full with two slots free";
  const std::uint32_t got = slot_of_id(id);
  EXPECT_TRUE(got == b * kHintBlock + 10 || got == b * kHintBlock + 20) << got;
  finish();
}

// The race the group level must survive: an allocator that owns a group's
// look has read every block of it none and has not yet written the group's
// none when a slot of one of those blocks is freed (the freer's exchange on
// the block's hint, then its load of the group's, which finds the owner's
// token). The owner's none must fail, and the slot stay findable.
TEST_F(FreeHints, ASlotFreedWhileAnAllocatorConcludesItsGroupHasNoneIsFound) {
  fill_full(kGroupJobs);
  ASSERT_FALSE(HasFailure());
  raw_->group_hint(1).store(0);  // group 1 to be looked over again: every block of it says none
  const BrandedId a = q().mint();
  test::StoppedCall<EnqueueStatus> allocator("alloc.group_looked", [&] { return q().enqueue(G, a, "a"); });
  ASSERT_GE(raw_->group_hint(1).load(), kHintOwned) << "group 1's look is not owned";
  const std::uint32_t slot = detail::kHintGroupSlots + 5 * kHintBlock + 7;
  EXPECT_EQ(raw_->hint(slot / kHintBlock).load(), kHintNone);
  free(slot);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(allocator.go(), EnqueueStatus::full) << "it looked before the free";
  EXPECT_NE(raw_->group_hint(1).load(), kHintNone) << "a free slot's group says none";
  const BrandedId id = q().mint();
  EXPECT_EQ(q().enqueue(G, id, "b"), EnqueueStatus::enqueued) << "full with a slot free";
  EXPECT_EQ(slot_of_id(id), slot);
  finish();
}

// A full walk over hints that all say "look" looks at every block once and
// concludes every group once, and leaves all of them none, for every start
// block (the cursor after a slot taken in each block in turn) and tables of
// awkward sizes: part of a group, exactly one and two groups, a last group
// of one block, a last group that is part of a group. (Adopted from the
// group hints' review.)
TEST_F(FreeHints, AWalkLooksAtEveryBlockAndGroupOnceFromEveryStart) {
  struct Hits {
    std::atomic<std::uint32_t> n{0};
    static void hit(void* p) { static_cast<Hits*>(p)->n.fetch_add(1); }
  };
  for (const std::uint32_t jobs : {3 * kHintBlock + 5, detail::kHintGroupSlots, detail::kHintGroupSlots + 1,
                                   detail::kHintGroupSlots + kHintBlock, 2 * detail::kHintGroupSlots,
                                   2 * detail::kHintGroupSlots + 5 * kHintBlock + 3}) {
    SCOPED_TRACE(jobs);
    raw_.reset();
    fill(jobs);
    ASSERT_FALSE(HasFailure());
    for (std::uint32_t b = 0; b < blocks(); ++b) {
      const std::uint32_t x = std::min(jobs - 1, b * kHintBlock + kHintBlock - 1);
      free(x);
      ASSERT_FALSE(HasFailure());
      const BrandedId id = q().mint();
      ASSERT_EQ(q().enqueue(G, id, "x"), EnqueueStatus::enqueued);  // the cursor now after x
      ASSERT_EQ(slot_of_id(id), x);
      for (std::uint32_t k = 0; k < blocks() + groups(); ++k) raw_->hint(k).store(0);
      Hits looked, concluded;
      detail::failpoint_call("alloc.block_looked", &Hits::hit, &looked);
      detail::failpoint_call("alloc.group_looked", &Hits::hit, &concluded);
      const EnqueueStatus st = q().enqueue(G, q().mint(), "y");
      detail::failpoint_call("alloc.block_looked", nullptr, nullptr);
      detail::failpoint_call("alloc.group_looked", nullptr, nullptr);
      ASSERT_EQ(st, EnqueueStatus::full);
      EXPECT_EQ(looked.n.load(), blocks()) << "cursor after slot " << x;
      EXPECT_EQ(concluded.n.load(), groups()) << "cursor after slot " << x;
      for (std::uint32_t k = 0; k < blocks(); ++k) EXPECT_EQ(raw_->hint(k).load(), kHintNone) << "block " << k;
      for (std::uint32_t g = 0; g < groups(); ++g) EXPECT_EQ(raw_->group_hint(g).load(), kHintNone) << "group " << g;
      ASSERT_FALSE(HasFailure());
    }
    finish();
  }
}

// Two threads enqueue, claim and complete on a table of two groups and a
// bit kept near full; every 64 steps each they stop at a barrier, and no
// hint may then hold a token (every look ended) or say none over a free
// slot (every freer finished). (Adopted from the group hints' review. On
// the first version, which owned a group's look for the whole walk and
// had the freer load the group hint after an exchange on its block hint,
// the review's form of this test, with that exchange made a plain store,
// found a free slot hidden under its group's none in one run of three.
// A check of the invariant over real interleavings: the store order that
// closes that window now (src/slots.hpp, note_freed) is not something a
// test can force.)
TEST_F(FreeHints, BetweenStepsNoHintHidesAFreeSlot) {
  fill(kGroupJobs);
  ASSERT_FALSE(HasFailure());
  std::vector<Lease> own[2];
  for (std::size_t k = 0; k < leases_.size(); ++k) own[k % 2].push_back(leases_[k]);
  for (Lease& l : leases_) l.id = {};  // handed to the threads
  constexpr int kRounds = 2000;
  std::barrier sync(3);
  std::atomic<int> refused{0};
  auto worker = [&](int t) {
    std::mt19937 rng(unsigned(t) + 17);
    std::vector<Lease>& mine = own[t];
    for (int r = 0; r < kRounds; ++r) {
      for (int op = 0; op < 64; ++op) {
        if (rng() % 3 == 0 && !mine.empty()) {
          const std::size_t k = rng() % mine.size();
          if (q().complete(mine[k].id, mine[k].token) != AckStatus::ok) refused.fetch_add(1);
          mine[k] = mine.back();
          mine.pop_back();
        } else if (const EnqueueStatus st = q().enqueue(G, q().mint(), "x"); st == EnqueueStatus::enqueued) {
          Lease l;
          if (q().claim(l, 600000)) mine.push_back(l);
        } else if (st != EnqueueStatus::full) {
          refused.fetch_add(1);
        }
      }
      sync.arrive_and_wait();  // the check
      sync.arrive_and_wait();
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  std::uint64_t free_seen = 0;
  int hidden = 0;
  for (int r = 0; r < kRounds; ++r) {
    sync.arrive_and_wait();
    for (std::uint32_t k = 0; k < blocks() + groups(); ++k)
      if (raw_->hint(k).load() >= kHintOwned) ++hidden, ADD_FAILURE() << "round " << r << ": a token left on hint " << k;
    for (std::uint32_t i = 0; i < jobs_ && hidden < 5; ++i) {
      if (detail::SlotWord::state(raw_->slot_word_value(i)) != detail::SlotState::free) continue;
      ++free_seen;
      const std::uint32_t bh = raw_->hint(i / kHintBlock).load(), gh = raw_->group_hint(i / detail::kHintGroupSlots).load();
      if (bh == kHintNone || gh == kHintNone)
        ++hidden, ADD_FAILURE() << "round " << r << ": free slot " << i << " hidden (block " << bh << ", group " << gh << ")";
    }
    sync.arrive_and_wait();
  }
  a.join();
  b.join();
  EXPECT_EQ(refused.load(), 0);
  EXPECT_GT(free_seen, 0u) << "the table never had a free slot at a check";
  for (auto& v : own)
    for (Lease& l : v) EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  test::serve_all(q());
  expect_clean(q());
}

// The sweep says "look" over a group that says none over a free slot (its
// freer stopped or killed before its store, or a scribble), and over a
// group whose look's owner died mid-look.
TEST_F(FreeHints, TheSweepSetsBackAGroupHintThatHidesAFreeSlotOrWasLeftMidLook) {
  fill_full(kGroupJobs);
  ASSERT_FALSE(HasFailure());
  // An allocation looks at its cursor's line before any hint (alloc_slot):
  // a slot there is not hidden by hints. The cursor starts at the thread
  // id's hash, and for 3 of its 8,389 starts it stood on the line of the
  // first slot chosen here, which was then found at once (a CI failure,
  // 2026-12-07).
  std::uint32_t slot = 2 * detail::kHintGroupSlots + kHintBlock + 2;
  if (slot / detail::kCursorLook == cursor_ / detail::kCursorLook) slot += detail::kCursorLook;
  free(slot);
  ASSERT_FALSE(HasFailure());
  raw_->hint(slot / kHintBlock).store(kHintNone);  // as a freer stopped before its stores leaves them
  raw_->group_hint(2).store(kHintNone);
  raw_->group_hint(0).store(kHintOwned + 99);  // as an allocator that died mid-look leaves it
  EXPECT_EQ(q().enqueue(G, q().mint(), "x"), EnqueueStatus::full) << "hidden until the sweep";
  (void)q().tick();
  EXPECT_EQ(raw_->group_hint(2).load(), 0u);
  EXPECT_EQ(raw_->group_hint(0).load(), 0u);
  const BrandedId id = q().mint();
  EXPECT_EQ(q().enqueue(G, id, "x"), EnqueueStatus::enqueued);
  EXPECT_EQ(slot_of_id(id), slot);
  finish();
}

// Any byte but "checking" and "none" reads as "look": a scribbled hint
// costs a look, never a slot.
TEST_F(FreeHints, AScribbledHintReadsAsLook) {
  fill_full();
  ASSERT_FALSE(HasFailure());
  free(kHintBlock + 1);
  ASSERT_FALSE(HasFailure());
  for (std::uint32_t b = 0; b < kJobs / kHintBlock; ++b) raw_->hint(b).store(0xA5);  // below kHintOwned, not none
  const BrandedId id = q().mint();
  EXPECT_EQ(q().enqueue(G, id, "x"), EnqueueStatus::enqueued);
  EXPECT_EQ(slot_of_id(id), kHintBlock + 1);
  EXPECT_EQ(q().enqueue(G, q().mint(), "y"), EnqueueStatus::full);
  EXPECT_EQ(q().corruption().count, 0u);
  finish();
}

// One thread, no stopped freer: `full` exactly when every slot is held,
// for tables of awkward sizes (one block, part of a block, a block and a
// bit; one group and a bit, two groups and a block and a bit), with
// completions in random places, so that the allocation's cursor look and
// its walk by the hints (src/slots.hpp) meet every case: the cursor at a
// block's end, in the last block, in a one-block table, in the last group,
// in a group's first block. The tables of more than one group start 40
// jobs short of full, so that 20,000 random steps reach full.
TEST(Allocation, FullIsExactForEveryTableSize) {
  for (std::uint32_t jobs : {1u, 2u, 3u, 4u, 5u, 7u, 63u, 64u, 65u, 67u, 68u, 69u, 100u, 127u, 128u, 129u, 130u, 191u, 200u,
                             256u, 257u, detail::kHintGroupSlots + 1, 2 * detail::kHintGroupSlots + kHintBlock + 3}) {
    test::SegmentGuard g(test::unique_segment_name(std::to_string(jobs)));
    QueueOptions o;
    o.jobs = jobs;
    o.lanes = 8;
    o.payload_bytes = 16;
    auto r = Queue::create(g.name(), o);
    ASSERT_TRUE(r.ok()) << jobs;
    Queue& q = r.value();
    std::mt19937 rng(jobs);
    std::vector<Lease> held;
    std::uint32_t pending = 0, fulls = 0;
    if (jobs > detail::kHintGroupSlots) {
      for (; pending + 40 < jobs; ++pending) ASSERT_EQ(q.enqueue({}, q.mint(), "x"), EnqueueStatus::enqueued) << jobs;
    }
    for (int op = 0; op < 20000; ++op) {
      const std::uint32_t live = pending + std::uint32_t(held.size());
      const int what = int(rng() % 5) < 2 ? 0 : int(rng() % 2) + 1;
      if (what == 0 || live == 0) {
        const EnqueueStatus st = q.enqueue({}, q.mint(), "x");
        if (live < jobs) {
          ASSERT_EQ(st, EnqueueStatus::enqueued) << "jobs " << jobs << " live " << live << " op " << op;
          ++pending;
        } else {
          ASSERT_EQ(st, EnqueueStatus::full) << "jobs " << jobs << " op " << op;
          ++fulls;
        }
      } else if (what == 1 && pending > 0) {
        Lease l;
        ASSERT_TRUE(q.claim(l, 600000));
        held.push_back(l);
        --pending;
      } else if (!held.empty()) {
        const std::size_t k = rng() % held.size();
        ASSERT_EQ(q.complete(held[k].id, held[k].token), AckStatus::ok);
        held.erase(held.begin() + std::ptrdiff_t(k));
      }
    }
    EXPECT_GT(fulls, 0u) << "jobs " << jobs << ": the table was never full";
  }
}

}  // namespace
}  // namespace fairlane
