// What the transition files (admission, claiming, acknowledgement, sweeping,
// lane controls, inspection) share inside the library.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>

#include "fairlane/queue.hpp"
#include "id_index.hpp"
#include "lane_order.hpp"
#include "lanes.hpp"
#include "mirror_log.hpp"
#include "segment.hpp"
#include "slots.hpp"
#include "util.hpp"

namespace fairlane::detail {

inline constexpr std::uint64_t kNever = ~0ULL;

// ---- ids --------------------------------------------------------------------------------

// A job id of this queue as its snowflake, or false (malformed, or another
// namespace: the status says which).
enum class IdCheck { ok, invalid, kind_mismatch };
IdCheck job_snowflake_decoded(const Segment& s, const BrandedId& id, std::uint64_t& sf) noexcept;
// The id this thread minted last is known without decoding (its enqueue
// names it next): inline, so that the enqueue does not lose it to GCC's
// growth budget for the caller's loop (out of line, the cycle cost 35
// instructions more; the budget still decides for the enqueue's other
// callees, so count the cycle after any change to the four calls).
inline IdCheck job_snowflake(const Segment& s, const BrandedId& id, std::uint64_t& sf) noexcept {
  if (id.valid()) {
    const char* b = IdAccess::bytes(id);
    if (same_id_words(t_mint_memo.w0, t_mint_memo.w1, b) && std::memcmp(b, s.kind, kKindLength) == 0) {
      sf = t_mint_memo.sf;
      return IdCheck::ok;
    }
  }
  return job_snowflake_decoded(s, id, sf);
}

// A group id's key, or false if it is not well formed.
bool group_of(const BrandedId& group, GroupKey& g) noexcept;

// Does a call's group name the default lane (empty, or DEF00000000000)?
bool is_default_group(const BrandedId& group) noexcept;

// The default group's id (kDefaultGroup) as its two words (id_words), made
// at compile time: compared (same_id_words) and written (IdAccess) in
// registers, with no parse, no static and no call.
constexpr std::uint64_t id_text_word(std::string_view text, std::size_t at) noexcept {
  std::uint64_t w = 0;
  for (std::size_t i = 0; i < 8 && at + i < text.size(); ++i) w |= std::uint64_t(std::uint8_t(text[at + i])) << (8 * i);
  return w;
}
inline constexpr std::uint64_t kDefaultGroupW0 = id_text_word(kDefaultGroup, 0);
inline constexpr std::uint64_t kDefaultGroupW1 = id_text_word(kDefaultGroup, 8);
inline BrandedId default_group_id() noexcept { return IdAccess::from_words(kDefaultGroupW0, kDefaultGroupW1); }

// The lane of a group for a call that names one (empty: the default lane).
// create: make it if absent. Returns kNoLane with `find` set otherwise.
std::uint32_t group_lane(Segment& s, const BrandedId& group, bool create, LaneFind& find) noexcept;

// ---- timing -----------------------------------------------------------------------------

// Lowers the earliest deadline/due time the sweep knows of (next_due).
void lower_next_due(Segment& s, std::uint64_t when_ms) noexcept;

// ---- sweeping (sweeping.cpp) ------------------------------------------------------------

// A claim or waiter calls this first: if a chunk of the sweep is due (a
// deadline or due time passed, or the recovery bound since the last pass),
// takes one chunk of the slot table and does what is due in it.
void maybe_sweep(Segment& s, std::uint64_t now_ms) noexcept;
// Is a pass under way (its next chunk waiting for a claim to take it)?
bool sweep_under_way(const Segment& s) noexcept;
// The whole table at once (tick). Returns how many jobs moved.
std::uint64_t sweep_all(Segment& s, std::uint64_t now_ms) noexcept;

// ---- intents (what a thread is between two shared steps of: layout.hpp) ----------------

struct IntentSlot {
  std::atomic<std::uint64_t>* intent = nullptr;
  std::atomic<std::uint64_t>* lane = nullptr;
  std::atomic<std::uint64_t>* pred = nullptr;
  std::atomic<std::uint64_t>* tid = nullptr;  // the fallback record's owner word, when used
};

// Where this thread writes its intents for the duration of one call: its
// thread record, or its process record's fallback (taken by CAS for the
// call, shared by the process's threads that found no thread record).
class IntentGuard {
 public:
  explicit IntentGuard(Segment& s) noexcept : IntentGuard(s, s.thread()) {}
  // With the calling thread's record (s.thread()) already looked up.
  explicit IntentGuard(Segment& s, ThreadRecord* t) noexcept {
    if (t) slot_ = {&t->intent, &t->intent_lane, &t->intent_pred, nullptr};
    else take_fallback(s);
  }
  ~IntentGuard() {
    clear();
    if (slot_.tid) slot_.tid->store(0, std::memory_order_release);
  }
  IntentGuard(const IntentGuard&) = delete;
  IntentGuard& operator=(const IntentGuard&) = delete;
  // Release: a survivor that reads the intent (acquire) sees the lane and
  // pred too. The shared step that follows is a seq_cst CAS, so the intent
  // is visible to anyone who sees that step ([S8]).
  void set(Intent kind, std::uint32_t slot, std::uint64_t ctr, std::uint32_t lane) noexcept {
    if (!slot_.intent) return;
    slot_.lane->store(lane, std::memory_order_relaxed);
    slot_.intent->store(IntentWord::make(kind, slot, ctr), std::memory_order_release);
  }
  // A take (pop_run, pop_strays) with the deadline (segment ms) of the lease
  // it is for, in pred: a taker still short of its lease past that deadline
  // (stopped, or descheduled that long) has its take undone by a sweep as
  // if it were dead, as its lease would have expired. A husk's take carries
  // one too (intend_husk_take, claiming.cpp: now + recovery_ms), and its
  // lane's incarnation in `lane` (IntentLane).
  // 0 is no deadline (never overdue); no take writes it.
  void set_take(Intent kind, std::uint32_t slot, std::uint64_t ctr, std::uint64_t lane, std::uint64_t deadline_ms) noexcept {
    if (!slot_.intent) return;
    slot_.pred->store(deadline_ms, std::memory_order_relaxed);
    slot_.lane->store(lane, std::memory_order_relaxed);
    slot_.intent->store(IntentWord::make(kind, slot, ctr), std::memory_order_release);
  }
  void clear() noexcept {
    if (slot_.intent) slot_.intent->store(0, std::memory_order_release);
  }
  std::atomic<std::uint64_t>* pred() noexcept { return slot_.pred; }

 private:
  void take_fallback(Segment& s) noexcept;  // no thread record: the process record's, for the call
  IntentSlot slot_;
};

// Is there a take's intent (pop_run, pop_strays) of a live thread (any
// process but a dead one), not overdue, naming `slot` with ctr `ctr`?
// O(threads); for recovery.
bool live_intent_names(Segment& s, std::uint32_t slot, std::uint64_t ctr, std::uint64_t now_ms) noexcept;

// ---- moving a job back into its lane -----------------------------------------------------

// Links a returning slot into its group's lane's strays (finding or making
// the lane) and makes it pending: take the move (CAS returning(holder 0) ->
// returning(me)) unless `mine`, link it, then the `linked` step. changed:
// someone else took the move first; parked: no lane could be had, so the
// slot was put as `fallback` says (or, without one, scheduled, due now) for
// the sweep to try again.
enum class Moved { ok, changed, parked, corrupt };
Moved link_returning(Segment& s, std::uint32_t slot, bool mine = false, const Word128* fallback = nullptr) noexcept;
// A returning job (released, failed, expired or adopted, on its way into its
// lane) whose linker is gone or was never one: link it, or take the move
// over from a dead holder. False when a live holder is at it (stopped,
// perhaps: it holds this one job) or the word moved on. `now` in ms, for
// the holder's judge. The sweep's step for such a slot; reassign's too.
bool finish_returning(Segment& s, std::uint32_t slot, const Word128& w, std::uint64_t now_ms) noexcept;

// The `linked` step for a returning slot already linked in lane `lane`'s
// strays (its mover's last step, which anyone who meets it there may take),
// for the move of admission ctr `ctr` only: the slot must still be
// returning at that ctr and name that lane. A helper that saw the node long
// ago and resumes while the job is returning in a later move (not linked
// yet) would otherwise make it pending with no node anywhere.
void finish_linking(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t ctr) noexcept;

// Brings a scheduled (due) or dead job back to its group's lane: take it
// (CAS to returning(me)), then link it. `attempt` is what the pending job
// keeps (requeue starts again at 0). changed: the slot word was not `from`;
// lanes_full: no lane for its group now (the job is put back as it was).
enum class Adopted { ok, changed, lanes_full, corrupt };
// `wait_on_full`: with no lane for its group now, the job waits scheduled,
// due now, for a sweep to link it (a requeue); without it, it stays as it
// was (a promotion, tried again by a later sweep).
Adopted adopt_job(Segment& s, std::uint32_t slot, Word128 from, std::uint32_t attempt, bool wait_on_full = false) noexcept;

// Takes a lease out of leased by a step `op` of its lane word and applies
// it (acks.cpp). stale: the id is a job but not leased under this token.
enum class Take { ok, stale, gone, corrupt };
// `due_by`: an expiry's now (the lease is taken back only while its
// deadline is at or before it); kNever for every other exit.
Take release_lease(Segment& s, std::uint64_t sf, Token token, RelOp op, std::uint32_t& slot_out,
                   std::uint32_t& lane_out, std::uint64_t due_by = kNever) noexcept;

// What a fail() parks a lease as (fail_to's low word: state, attempt, when).
inline std::uint64_t target_lo(SlotState st, std::uint32_t attempt, std::uint64_t when) noexcept {
  return SlotWord::make(st, attempt, when, 0, 0).lo;
}

// Where a lease's `park` step goes (scheduled or dead, and when), for the
// lease of ctr `ctr`: kept in the slot's run_seq, which a leased job does
// not use (it is in no run), never in fail_to, which a later admission of
// the slot owns. The attempt bits carry the lease's ctr (low 16 bits): a
// fail() that read the lease long ago and writes its plan after the slot
// has moved on cannot pass its plan for a later lease's (lane_base falls
// back to `back`), and touches no admission at all.
inline std::uint64_t park_plan(SlotState st, std::uint64_t ctr, std::uint64_t when) noexcept {
  return target_lo(st, std::uint32_t(ctr & 0xFFFF), when);
}
// The mark every other exit of a lease (complete, release, back) and the
// return of a taken job leave in run_seq before their lane CAS: the step is
// applied only to the lease (or take) it was made for (lane_base).
inline std::uint64_t exit_mark(std::uint64_t ctr) noexcept { return park_plan(SlotState::free, ctr, 0); }
// An expiry's mark: as exit_mark, but with a `when` that is never 0 and
// is this write's own (`nonce`: the writer's holder and a count of its
// thread's expiry marks), so that an extend that finds it may void it
// (acks.cpp, [A6]) by a CAS from exactly the value it saw, which a later
// expiry of the same lease never writes again. lane_base reads the ctr
// bits and the state of a mark, never its `when`.
inline std::uint64_t expiry_mark(std::uint64_t ctr, std::uint64_t nonce) noexcept {
  return park_plan(SlotState::free, ctr, nonce | (1ULL << 43));
}
inline bool is_expiry_mark(std::uint64_t v, std::uint64_t ctr) noexcept {
  const Word128 t{v, 0};
  return SlotWord::state(t) == SlotState::free && SlotWord::attempt(t) == (ctr & 0xFFFF) && SlotWord::when(t) != 0;
}

// Frees an aborted slot that is no longer linked anywhere; a reassign's
// origin (its word names the slot the job moved to) has that move decided
// first.
// With `ctr`, only that incarnation of the slot (a caller that read it
// earlier leaves a later one alone). True if this call freed it.
inline constexpr std::uint64_t kAnyCtr = ~0ULL;
bool free_aborted(Segment& s, std::uint32_t slot, std::uint64_t ctr = kAnyCtr) noexcept;

// A husk popped from its lane (by a claim, a drain, or for a dead popper).
// A killed admission's husk names its admitter as holder until the
// admitter is done deciding (drop_lost clears it): until then the slot is
// not freed, only marked popped (an attempt of 1, which no husk has
// otherwise), so that the admitter, which judges its own admission by the
// slot word at its ctr, never finds it freed and reused (it took that for
// committed and answered `enqueued` for a job that was killed); whoever of
// the two comes second frees it. A husk with no holder is freed at once.
// True if this call was the husk's release (freed or marked it, from not
// yet popped): its lane's husk count is its caller's to lower, once.
bool release_husk(Segment& s, std::uint32_t slot, std::uint64_t ctr = kAnyCtr) noexcept;
inline bool husk_popped(const Word128& w) noexcept {
  return SlotWord::state(w) == SlotState::aborted && SlotWord::attempt(w) != 0;
}

// ---- admission (admission.cpp) ------------------------------------------------------------

// No wait for Valkey's acknowledgement (see mirror_admitted).
inline constexpr std::uint64_t kNoWait = ~0ULL;

// What an admission says beside its status.
struct AdmitOut {
  // The mirror's sequence to wait for (mirror_admitted), or kNoWait.
  std::uint64_t wait_seq = kNoWait;
  // `full` because the id index's two buckets for the id were full, not for
  // want of a slot: enqueue_wait does not wait on it (a freed slot does not
  // change it).
  bool index_full = false;
  // `lanes_full` because the group's two directory buckets hold only groups
  // with work, not for want of a lane record: a lane given back elsewhere
  // does not change it (enqueue_wait polls it instead).
  bool buckets_full = false;
};

// Queue::enqueue's work (group, job, payload, options as there), and what
// the admission said beside the status. For enqueue_wait.
EnqueueStatus enqueue_one(Segment& s, const BrandedId& group, const BrandedId& job, std::string_view payload,
                          const EnqueueOptions* options, AdmitOut& said) noexcept;

// ---- the mirror's side of admissions (queue.cpp) ------------------------------------------

// The running mirror's process record, if its owner is attached; alive?
// Does the owner word of the record a mirror role names say that role's
// owner holds it (attached, stamped, and the role's incarnation bits in the
// word itself: a process attaching to a dead mirror's record says neither
// its stamp nor its incarnation yet)?
bool mirror_role_owner(std::uint64_t owner, std::uint32_t role) noexcept;
const ProcRecord* mirror_proc(const Segment& s) noexcept;
bool mirror_alive(const Segment& s) noexcept;
// Before an admission writes anything: is there a mirror to take it?
std::optional<EnqueueStatus> mirror_admission_check(const Segment& s) noexcept;
// After an admission: log it. Under sync durability, `wait_seq` is set to
// the record the enqueuer must see acknowledged (mirror_wait_acked).
EnqueueStatus mirror_admitted(Segment& s, std::uint32_t slot, std::uint64_t& wait_seq) noexcept;
// Waits until Valkey has acknowledged record `seq`, the sync timeout, or
// the mirror's death.
EnqueueStatus mirror_wait_acked(Segment& s, std::uint64_t seq) noexcept;

// ---- claims (claiming.cpp) ---------------------------------------------------------------

// Claims up to `room` jobs (one lane's only, if `one_lane`). An empty
// answer reads the ring's tail hint (to tell a scribbled gap from an empty
// ring) at the first empty look of this thread at this handle and then at
// one in 64, or always if `look_hard` (claiming.cpp, unwritten_head).
ClaimStatus claim_some(Segment& s, Lease* out, std::size_t room, std::size_t& got, std::uint32_t lease_ms,
                       std::uint64_t now_us, bool one_lane, bool look_hard = false) noexcept;

// Takes the job at the front of lane `lane` for this thread without the
// ring (drain): one job, leased for `lease_ms`. empty when the lane has none.
ClaimStatus take_front(Segment& s, std::uint32_t lane, Lease& out, std::uint32_t lease_ms, std::uint64_t now_us) noexcept;

// Pops and frees the husks (aborted slots) at the front of lane `lane`, so
// that a lane whose last job moved away (reassign) leaves the ring.
void pop_front_husks(Segment& s, std::uint32_t lane) noexcept;

// Fills a lease from its slot (the caller holds the lease).
void fill_lease(const Segment& s, std::uint32_t slot, std::uint32_t lane, std::uint32_t attempt, Token token,
                std::uint64_t deadline, std::uint64_t now_us, Lease& out);

// ---- finishing what dead processes left half done ---------------------------------------

// Settles the intent of a thread of a dead process (sweeping.cpp): a job it
// took out of its lane and had not yet leased goes back (or, aborted, is
// freed); a job it was appending is committed if it got linked, freed if
// not. With live_owner, the intent is a live thread's take past its lease's
// deadline: it is undone only if it is still overdue as read here, and the
// intent itself is left to its owner (only the owner clears a live intent).
// Returns whether it did anything.
bool settle_intent(Segment& s, std::atomic<std::uint64_t>& intent, std::atomic<std::uint64_t>& intent_lane,
                   std::atomic<std::uint64_t>& intent_pred, std::uint64_t now_ms, bool live_owner = false) noexcept;

}  // namespace fairlane::detail
