// repair: the offline rebuild. It refuses while another live process is
// attached (unless forced); for each kind of damage fsck names
// (segment_damage.hpp) it leaves a clean segment that serves every job
// exactly once (nothing lost but what the damage itself destroyed, nothing
// duplicated), keeps the settings of live groups and the leases held across
// it, and takes new work.
#include "forked_child.hpp"
#include "segment_damage.hpp"

#include <unistd.h>

#include <chrono>

namespace fairlane {
namespace {

using namespace test;
using namespace std::chrono_literals;

class RepairTest : public QueueTest {
 protected:
  // The settings populate() made are still in force.
  void expect_settings_kept() {
    const auto a = lane(kGroupA), b = lane(kGroupB), c = lane(kGroupC);
    ASSERT_TRUE(a && b && c) << "a group with a setting lost its lane";
    EXPECT_EQ(a->limit, 3U);
    EXPECT_EQ(b->weight, 2U);
    EXPECT_TRUE(c->paused);
    EXPECT_FALSE(a->paused || b->paused);
  }

  // Every job of `expected` is delivered exactly once and nothing else; the
  // leases held across the repair are still good; new work is taken.
  void expect_serves_exactly(const std::set<BrandedId>& expected, const Population& p, const std::set<BrandedId>& lost) {
    for (const auto& [id, token] : p.leases) {
      if (lost.count(id)) continue;
      const auto j = q().job(id);
      ASSERT_TRUE(j.has_value()) << "a lease held across the repair is gone: " << id.str();
      EXPECT_EQ(j->state, JobState::leased) << id.str();
      EXPECT_EQ(j->token, token) << "the lease's token changed: " << id.str();
      EXPECT_EQ(q().complete(id, token), AckStatus::ok) << "a lease held across the repair was lost: " << id.str();
    }
    ASSERT_EQ(q().resume(kGroupC), LaneStatus::ok);
    std::map<BrandedId, int> got;
    Lease l;
    auto drain_queue = [&] {
      for (int guard = 0; guard < 1000 && q().claim(l, 60000); ++guard) {
        ++got[l.id];
        EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok) << l.id.str();
      }
    };
    drain_queue();
    q().advance_clock(kLaterMs + 1000);  // the delayed job falls due
    drain_queue();
    for (const auto& [id, n] : got) {
      EXPECT_TRUE(expected.count(id)) << "delivered a job that was not there: " << id.str();
      EXPECT_EQ(n, 1) << id.str() << " delivered " << n << " times";
    }
    for (const BrandedId& id : expected) EXPECT_TRUE(got.count(id)) << "lost: " << id.str();
    // The dead letter is still a dead letter.
    const auto d = q().job(p.dead);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->state, JobState::dead);
    // New work, in a new group and an old one.
    for (const BrandedId& g : {group("NEW"), kGroupA}) {
      const BrandedId fresh = q().mint();
      ASSERT_EQ(q().enqueue(g, fresh, "new"), EnqueueStatus::enqueued);
      ASSERT_TRUE(q().claim(l, 1000));
      EXPECT_EQ(l.id, fresh);
      EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    }
    const FsckReport f = q().fsck();
    EXPECT_TRUE(f.clean()) << "after serving everything:\n" << show(f);
    const Snapshot s = q().snapshot();
    EXPECT_EQ(s.pending + s.leased + s.scheduled, 0U);
  }
};

TEST_F(RepairTest, ACleanSegmentIsLeftAsItWas) {
  const Population p = populate(q());
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_TRUE(r.value().clean()) << show(r.value());
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
  expect_settings_kept();
  expect_serves_exactly(p.deliverable(), p, {});
}

// ---- each kind of damage is undone ---------------------------------------------------------

class RepairDamage : public RepairTest, public ::testing::WithParamInterface<DamageKind> {};

TEST_P(RepairDamage, LeavesACleanSegmentThatServesEveryJobOnce) {
  const DamageKind& k = GetParam();
  const Population p = populate(q());
  std::set<BrandedId> lost;
  {
    RawSegment raw(q().name());
    lost = do_damage(raw, p, k.damage);
  }
  if (HasFailure()) return;
  const FsckReport before = q().fsck();
  ASSERT_TRUE(has_issue(before, k.invariant)) << show(before);
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_TRUE(has_issue(r.value(), k.invariant)) << "repair returns what fsck found before it:\n" << show(r.value());
  EXPECT_FALSE(r.value().repairs.empty()) << "repair says nothing of what it changed";
  const FsckReport after = q().fsck();
  EXPECT_TRUE(after.clean()) << k.name << ": after repair:\n" << show(after) << "repair said:\n" << show(r.value());
  expect_settings_kept();
  std::set<BrandedId> expected;
  for (const BrandedId& id : p.deliverable())
    if (!lost.count(id)) expected.insert(id);
  expect_serves_exactly(expected, p, lost);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, RepairDamage, ::testing::ValuesIn(damage_kinds()),
                         [](const ::testing::TestParamInfo<DamageKind>& info) { return std::string(info.param.name); });

TEST_F(RepairTest, ManyKindsOfDamageAtOnce) {
  const Population p = populate(q());
  std::set<BrandedId> lost;
  {
    RawSegment raw(q().name());
    for (Damage d : {Damage::unlinked, Damage::active_off, Damage::unringed, Damage::dir_removed, Damage::index_removed,
                     Damage::husk_leaked, Damage::strays_flag})
      for (const BrandedId& id : do_damage(raw, p, d)) lost.insert(id);
    raw.header().ring_tail.store(raw.header().ring_head.load());  // and the ring's tail hint
    raw.header().sweep.next_due.store(~0ULL);                     // and the sweep's due time
  }
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_GE(r.value().issues.size(), 7U) << show(r.value());
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
  expect_settings_kept();
  std::set<BrandedId> expected = p.deliverable();
  expect_serves_exactly(expected, p, lost);
}

// A leaked husk takes a slot for good: after the repair every slot is usable.
TEST_F(RepairTest, EverySlotIsUsableAgainAfterALeakIsRepaired) {
  const Population p = populate(q());
  {
    RawSegment raw(q().name());
    for (int i = 0; i < 5; ++i) do_damage(raw, p, Damage::husk_leaked);
  }
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << describe(r.error());
  const Snapshot s = q().snapshot();
  const std::uint64_t live = s.pending + s.leased + s.scheduled + s.dead;
  std::uint64_t admitted = 0;
  for (;;) {
    const EnqueueStatus st = q().enqueue(kGroupA, q().mint(), "fill");
    if (st == EnqueueStatus::full) break;
    ASSERT_EQ(st, EnqueueStatus::enqueued);
    ++admitted;
  }
  EXPECT_EQ(admitted + live, q().config().jobs) << "slots lost for good";
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
}

// A job whose admitter died after linking it (its id is known: a rival may
// have been told `duplicate`) is admitted by the repair, not freed.
TEST_F(RepairTest, AnAdmittingSlotLinkedInItsLaneIsAdmitted) {
  const Population p = populate(q());
  {
    RawSegment raw(q().name());
    const std::uint32_t i = slot_of(raw, p.arun[1]);
    const Word128 w = raw.slot_word_value(i);
    set_slot_word(raw, i, SlotWord::make(SlotState::admitting, 0, 0, SlotWord::ctr(w), Holder::make(0, 1)));
  }
  EXPECT_TRUE(has_issue(q().fsck(), "in-flight")) << show(q().fsck());
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
  EXPECT_EQ(q().enqueue(kGroupA, p.arun[1], "again"), EnqueueStatus::duplicate) << "the admitted job lost its id";
  expect_serves_exactly(p.deliverable(), p, {});
}

// A slot taken by an enqueue that died before writing its job (killed at
// enqueue.slot_taken: admitting, never published) holds what its last job
// left there. Repair frees it: it neither brings that job back (completed
// long ago) nor takes the id from the job that holds it now.
TEST_F(RepairTest, AnUnpublishedAdmissionIsFreedWithoutRaisingTheJobItsSlotLastHeld) {
  // X: enqueued, served and completed: its slot is free and still holds it.
  const BrandedId x = q().mint();
  ASSERT_EQ(q().enqueue(kGroupA, x, "first life"), EnqueueStatus::enqueued);
  std::uint32_t old_slot = ~0U;
  {
    RawSegment raw(q().name());
    old_slot = slot_of(raw, x);
  }
  Lease l = claim_one();
  ASSERT_EQ(l.id, x);
  ASSERT_EQ(q().complete(x, l.token), AckStatus::ok);
  // X again (its id is free once completed), in a later slot, and leased.
  ASSERT_EQ(q().enqueue(kGroupC, x, "second life"), EnqueueStatus::enqueued);
  l = claim_one();
  ASSERT_EQ(l.id, x);
  {
    RawSegment raw(q().name());
    ASSERT_GT(slot_of(raw, x), old_slot) << "the test needs X's second slot above its first";
    // An enqueue takes the first slot (free -> admitting, its ctr moved on)
    // and dies there, before writing its job.
    const Word128 w = raw.slot_word_value(old_slot);
    ASSERT_EQ(SlotWord::state(w), SlotState::free);
    ASSERT_EQ(raw.slot(old_slot).sf.load(), x.snowflake());
    set_slot_word(raw, old_slot, SlotWord::make(SlotState::admitting, 0, 0, SlotWord::ctr(w) + 1, Holder::make(0, 1)));
  }
  const FsckReport before = q().fsck();
  EXPECT_TRUE(has_issue(before, "in-flight")) << show(before);
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
  const auto j = q().job(x, true);
  ASSERT_TRUE(j.has_value()) << "the job that held the id was freed";
  EXPECT_EQ(j->state, JobState::leased);
  EXPECT_EQ(j->payload, "second life");
  EXPECT_EQ(j->group, kGroupC);
  EXPECT_EQ(q().jobs().size(), 1U) << "the completed job came back";
  EXPECT_EQ(q().complete(x, l.token), AckStatus::ok) << "the lease was lost";
  Lease none;
  EXPECT_FALSE(q().claim(none, 1000)) << "delivered " << none.id.str() << ", never enqueued again";
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
}

// Of two slots with one id, the job whose admission was decided is kept,
// not a rival admission of the same id that was never decided (a higher
// slot's enqueue was told `enqueued`; the lower one died undecided): the
// lease on the decided one holds across the repair.
TEST_F(RepairTest, OfTwoSlotsWithOneIdTheDecidedJobIsKept) {
  // A slot freed below X's, then X, leased.
  fill(kGroupB, 1);
  Lease l = claim_one();
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  const BrandedId x = q().mint();
  ASSERT_EQ(q().enqueue(kGroupA, x, "decided"), EnqueueStatus::enqueued);
  l = claim_one();
  ASSERT_EQ(l.id, x);
  {
    RawSegment raw(q().name());
    const std::uint32_t real = slot_of(raw, x);
    std::uint32_t rival = ~0U;
    for (std::uint32_t i = 0; i < real && rival == ~0U; ++i)
      if (SlotWord::state(raw.slot_word_value(i)) == SlotState::free) rival = i;
    ASSERT_NE(rival, ~0U) << "no free slot below X's";
    // The rival: the same id, written and published (pending target), its
    // admitter dead before the decision.
    auto& from = raw.slot(real);
    auto& to = raw.slot(rival);
    to.sf.store(from.sf.load());
    to.digits.store(from.digits.load());
    to.digits_tail.store(from.digits_tail.load());
    to.group_kind.store(from.group_kind.load());
    to.group_sf.store(from.group_sf.load());
    to.payload_len.store(0);
    to.flags.store(0);
    to.fail_to.store(SlotWord::make(SlotState::pending, 0, 0, 0, 0).lo);
    const std::uint64_t ctr = SlotWord::ctr(raw.slot_word_value(rival)) + 1;
    to.pub.store(ctr);
    set_slot_word(raw, rival, SlotWord::make(SlotState::admitting, 0, 0, ctr, Holder::make(0, 1)));
  }
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
  const auto j = q().job(x, true);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state, JobState::leased) << "the lease was lost to an undecided rival admission";
  EXPECT_EQ(j->payload, "decided");
  EXPECT_EQ(q().complete(x, l.token), AckStatus::ok);
  Lease none;
  EXPECT_FALSE(q().claim(none, 1000)) << "delivered " << none.id.str();
}

// A group's statistics (served, its wait histogram) stay with the group
// when the repair gives it another lane record.
TEST_F(RepairTest, EachGroupKeepsItsStatistics) {
  const BrandedId first = group("ZZZ"), second = group("AAA");
  fill(first, 3);
  fill(second, 1);
  for (int i = 0; i < 3; ++i) {
    Lease l = claim_one();
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  // A setting on the second group: the repair makes its lane first.
  ASSERT_EQ(q().set_weight(second, 2), LaneStatus::ok);
  const auto a = lane(first), b = lane(second);
  ASSERT_TRUE(a && b);
  ASSERT_NE(a->served, b->served) << "the test needs the groups' counts apart";
  const std::uint64_t total = q().snapshot().wait.count();
  {
    RawSegment raw(q().name());
    const std::uint32_t l = raw.find_lane([](const Word128& w) { return LaneWord::head(w) != 0; });
    ASSERT_NE(l, ~0U);
    set_lane_word(raw, l, LaneWord::with_active(lane_word(raw, l), 1));  // lane-active-count
  }
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << describe(r.error());
  ASSERT_FALSE(r.value().clean());
  const auto a2 = lane(first), b2 = lane(second);
  ASSERT_TRUE(a2 && b2);
  EXPECT_EQ(a2->served, a->served);
  EXPECT_EQ(b2->served, b->served);
  EXPECT_EQ(a2->wait.count(), a->wait.count());
  EXPECT_EQ(b2->wait.count(), b->wait.count());
  EXPECT_EQ(q().snapshot().wait.count(), total) << "the queue-wide wait histogram changed";
}

// On a clean segment repair changes nothing and says so: no line of
// repairs, no mirror resynchronisation, every lane where it was.
TEST_F(RepairTest, OnACleanSegmentItChangesNothing) {
  populate(q());
  std::vector<std::pair<std::string, std::uint64_t>> lanes_before;
  for (const LaneInfo& li : q().snapshot().lanes) lanes_before.emplace_back(li.group.string(), li.served);
  std::vector<unsigned char> bytes_before;
  {
    RawSegment raw(q().name());
    bytes_before.assign(raw.base() + raw.header().lanes_off,
                        raw.base() + raw.header().lanes_off + raw.header().lane_capacity * sizeof(detail::LaneRecord));
  }
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_TRUE(r.value().clean()) << show(r.value());
  EXPECT_TRUE(r.value().repairs.empty()) << r.value().repairs[0];
  RawSegment raw(q().name());
  EXPECT_TRUE(std::equal(bytes_before.begin(), bytes_before.end(), raw.base() + raw.header().lanes_off))
      << "a repair of a clean segment rewrote its lane records";
}

// ---- only alone ------------------------------------------------------------------------------

TEST_F(RepairTest, RefusesWhileAnotherLiveProcessIsAttachedUnlessForced) {
  const Population p = populate(q());
  {
    RawSegment raw(q().name());
    do_damage(raw, p, Damage::active_off);
  }
  // A child attached and idle until told to go.
  int ready[2], hold[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(hold), 0);
  const std::string name = q().name();
  ForkedChild child([&] {
    ::close(hold[1]);
    ::close(ready[0]);
    auto other = Queue::open(name);
    char c = other.ok() ? 'y' : 'n';
    if (::write(ready[1], &c, 1) != 1) return 3;
    if (::read(hold[0], &c, 1) < 0) return 4;  // EOF when the parent closes its end
    return 0;
  }, 60);
  ::close(ready[1]);
  ::close(hold[0]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');

  const std::string before = show(q().fsck());
  auto refused = q().repair();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::busy);
  EXPECT_NE(refused.error().message.find(std::to_string(child.pid())), std::string::npos) << refused.error().message;
  EXPECT_EQ(show(q().fsck()), before) << "a refused repair changed something";

  auto forced = q().repair(true);
  ASSERT_TRUE(forced.ok()) << describe(forced.error());
  EXPECT_TRUE(has_issue(forced.value(), "lane-active-count")) << show(forced.value());
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());

  ::close(hold[1]);
  ASSERT_TRUE(child.wait_for(30s)) << "the attached child did not exit";
  EXPECT_TRUE(child.exited_zero()) << child.describe();
  expect_settings_kept();
  expect_serves_exactly(p.deliverable(), p, {});
}

TEST_F(RepairTest, AnotherHandleOfThisProcessDoesNotCountAsAnotherProcess) {
  populate(q());
  auto other = Queue::open(q().name());
  ASSERT_TRUE(other.ok());
  auto r = q().repair();
  EXPECT_TRUE(r.ok()) << describe(r.error());
}

TEST_F(RepairTest, AnObserverCannotRepair) {
  populate(q());
  auto obs = Queue::open(q().name(), Queue::Attach::observer);
  ASSERT_TRUE(obs.ok());
  auto r = obs->repair(true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
}

}  // namespace
}  // namespace fairlane
