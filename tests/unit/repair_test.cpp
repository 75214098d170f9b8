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
