// ValkeyBackend: each operation is one EVALSHA of a script in scripts.hpp.
//
// The client validates what it can without the server (ids, groups, payload
// size, ranges), exactly as the segment does and with the same statuses, so
// a bad argument never costs a round trip and never writes anything. The
// rest is decided inside the script, atomically on the server.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <initializer_list>
#include <utility>

#include "connection.hpp"
#include "fairlane/valkey.hpp"
#include "scripts.hpp"

namespace fairlane {

using valkey::Args;
using valkey::Reply;

namespace {

constexpr std::uint32_t kDefaultMaxPayload = 256;       // the segment's default payload_bytes
constexpr std::uint32_t kLargestPayload = 64u << 20;    // a sane bound for one job
constexpr std::size_t kMaxErrorBytes = 1024;            // last_error kept by fail()
constexpr std::chrono::milliseconds kWaitBackstop{1000};  // longest BLPOP between claims

enum class Sid : std::size_t {
  init, now, mint, enqueue, claim, complete, fail, extend, pause, resume, pause_all, resume_all,
  limit, weight, drain, tick, advance, snapshot, count_
};

struct ScriptDef {
  std::string_view name;
  std::string_view body;
};

constexpr std::array<ScriptDef, std::size_t(Sid::count_)> kScripts = {{
    {"init", valkey::kInit},         {"now", valkey::kNow},
    {"mint", valkey::kMint},         {"enqueue", valkey::kEnqueue},
    {"claim", valkey::kClaim},       {"complete", valkey::kComplete},
    {"fail", valkey::kFail},         {"extend", valkey::kExtend},
    {"pause", valkey::kPause},       {"resume", valkey::kResume},
    {"pause_all", valkey::kPauseAll}, {"resume_all", valkey::kResumeAll},
    {"limit", valkey::kLimit},       {"weight", valkey::kWeight},
    {"drain", valkey::kDrain},       {"tick", valkey::kTick},
    {"advance_clock", valkey::kAdvance}, {"snapshot", valkey::kSnapshot},
}};

// A decimal number as a string_view into its own buffer.
struct Num {
  explicit Num(std::uint64_t v) noexcept { n = std::size_t(std::to_chars(buf, buf + sizeof buf, v).ptr - buf); }
  std::string_view sv() const noexcept { return {buf, n}; }
  char buf[24];
  std::size_t n;
};

std::string_view text(const redisReply* r) noexcept { return {r->str, r->len}; }

}  // namespace

struct ValkeyBackend::Impl {
  ValkeyUrl url;
  ValkeyOptions options;
  valkey::Connection conn;
  std::string prefix;
  std::array<std::string, valkey::kFixedKeys.size()> fixed;
  std::array<std::string, std::size_t(Sid::count_)> shas;
  std::string kind = "JOB";
  std::uint32_t max_payload = kDefaultMaxPayload;
  std::string where;  // "valkey://host:port/queue", for messages
  Args args;
  std::string job_key, lane_key;

  Impl(ValkeyUrl u, const ValkeyOptions& o)
      : url(std::move(u)), options(o), conn(url.host, url.port, o), prefix(url.prefix()), where(url.str()) {
    for (std::size_t i = 0; i < fixed.size(); ++i) fixed[i] = prefix + std::string(valkey::kFixedKeys[i]);
  }

  [[noreturn]] void error(std::string_view op, std::string_view what) const {
    throw BackendError(where + ": " + std::string(op) + ": " + std::string(what));
  }

  const std::string& job(const BrandedId& id) {
    job_key.assign(prefix).append("job:").append(id.str());
    return job_key;
  }
  const std::string& lane(std::string_view group) {
    lane_key.assign(prefix).append("g:").append(group).append(":pending");
    return lane_key;
  }

  void load(Sid s) {
    Args a;
    std::string source(valkey::kPrelude);
    source += kScripts[std::size_t(s)].body;
    a.add("SCRIPT").add("LOAD").add(source);
    Reply r = conn.command(a);
    if (r->type != REDIS_REPLY_STRING) {
      error(std::string("loading the ") + std::string(kScripts[std::size_t(s)].name) + " script",
            r->type == REDIS_REPLY_ERROR ? text(r.get()) : std::string_view("unexpected reply"));
    }
    shas[std::size_t(s)] = std::string(text(r.get()));
  }

  // One EVALSHA: the fixed keys, then `keys`, then `argv`. Loads the script
  // on first use and again after NOSCRIPT (a restarted or flushed server).
  Reply eval(Sid s, std::initializer_list<std::string_view> keys, std::initializer_list<std::string_view> argv) {
    for (int round = 0; round < 2; ++round) {
      if (shas[std::size_t(s)].empty()) load(s);
      const Num nkeys(fixed.size() + keys.size());
      args.clear();
      args.add("EVALSHA").add(shas[std::size_t(s)]).add(nkeys.sv());
      for (const auto& k : fixed) args.add(k);
      for (auto k : keys) args.add(k);
      for (auto v : argv) args.add(v);
      Reply r = conn.command(args);
      if (r->type != REDIS_REPLY_ERROR) return r;
      if (text(r.get()).substr(0, 8) == "NOSCRIPT") {
        shas[std::size_t(s)].clear();
        continue;
      }
      error(kScripts[std::size_t(s)].name, text(r.get()));
    }
    error(kScripts[std::size_t(s)].name, "the server keeps forgetting its scripts (NOSCRIPT)");
  }

  std::int64_t integer(const redisReply* r, Sid s) const {
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING) {
      std::int64_t v = 0;
      auto [p, ec] = std::from_chars(r->str, r->str + r->len, v);
      if (ec == std::errc() && p == r->str + r->len) return v;
    }
    error(kScripts[std::size_t(s)].name, "unexpected reply from the server");
  }

  const redisReply* element(const redisReply* r, std::size_t i, Sid s) const {
    if (r->type != REDIS_REPLY_ARRAY || i >= r->elements) error(kScripts[std::size_t(s)].name, "unexpected reply shape");
    return r->element[i];
  }

  BrandedId id_from(const redisReply* r, Sid s) const {
    if (r->type != REDIS_REPLY_STRING) error(kScripts[std::size_t(s)].name, "unexpected reply from the server");
    auto id = BrandedId::parse(text(r));
    if (!id) error(kScripts[std::size_t(s)].name, "'" + std::string(text(r)) + "' in the keyspace is not a branded id");
    return *id;
  }

  // The claim script's reply, parsed into `out`. Returns how many leases;
  // `next_due` gets the script's hint (ms, -1 none).
  std::size_t claim(Lease* out, std::size_t room, std::uint32_t lease_ms, std::int64_t* next_due) {
    const Num lease(lease_ms), n(room);
    Reply r = eval(Sid::claim, {}, {lease.sv(), n.sv()});
    const std::size_t got = std::size_t(integer(element(r.get(), 0, Sid::claim), Sid::claim));
    const std::uint64_t deadline = std::uint64_t(integer(element(r.get(), 1, Sid::claim), Sid::claim));
    if (next_due) *next_due = integer(element(r.get(), 2, Sid::claim), Sid::claim);
    if (got > room || r->elements != 3 + 5 * got) error("claim", "unexpected reply shape");
    for (std::size_t i = 0; i < got; ++i) {
      const std::size_t b = 3 + 5 * i;
      Lease& l = out[i];
      l.id = id_from(r->element[b], Sid::claim);
      l.group = id_from(r->element[b + 1], Sid::claim);
      const redisReply* p = r->element[b + 2];
      if (p->type == REDIS_REPLY_STRING) l.payload.assign(p->str, p->len);
      else l.payload.clear();
      l.attempt = std::uint32_t(integer(r->element[b + 3], Sid::claim));
      l.token = Token(l.attempt);  // interim: EchoMQ's attempts until the backend keeps a token of its own
      l.deadline_ms = deadline;
      l.waited_us = std::uint64_t(std::max<std::int64_t>(0, integer(r->element[b + 4], Sid::claim))) * 1000;
    }
    return got;
  }
};

// ---- setup ---------------------------------------------------------------------

ValkeyBackend::ValkeyBackend(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
ValkeyBackend::~ValkeyBackend() = default;

Result<std::unique_ptr<ValkeyBackend>> ValkeyBackend::open(std::string_view url, const ValkeyOptions& options) {
  auto u = ValkeyUrl::parse(url);
  if (!u) return u.error();
  if (options.node > 1023)
    return Error{Errc::invalid_argument, 0, "node " + std::to_string(options.node) + " is out of range (0..1023)"};
  if (!options.job_kind.empty() && !valid_kind(options.job_kind))
    return Error{Errc::invalid_argument, 0, "job kind '" + options.job_kind + "' is not three letters A-Z"};
  if (options.max_payload > kLargestPayload)
    return Error{Errc::invalid_argument, 0,
                 "max payload " + std::to_string(options.max_payload) + " is larger than " +
                     std::to_string(kLargestPayload) + " bytes"};

  auto impl = std::make_unique<Impl>(std::move(u).value(), options);
  if (std::string why = impl->conn.connect(); !why.empty()) return Error{Errc::system, 0, why};
  try {
    const std::string want_kind = options.job_kind.empty() ? "JOB" : options.job_kind;
    const Num want_max(options.max_payload ? options.max_payload : kDefaultMaxPayload);
    Reply r = impl->eval(Sid::init, {}, {want_kind, want_max.sv()});
    const redisReply* k = impl->element(r.get(), 0, Sid::init);
    const redisReply* m = impl->element(r.get(), 1, Sid::init);
    if (k->type != REDIS_REPLY_STRING || !valid_kind(text(k)))
      return Error{Errc::corrupt, 0, impl->where + ": meta field job_kind is not three letters A-Z"};
    impl->kind = std::string(text(k));
    const std::int64_t max = impl->integer(m, Sid::init);
    if (max < 0 || max > std::int64_t(kLargestPayload))
      return Error{Errc::corrupt, 0, impl->where + ": meta field max_payload is out of range"};
    impl->max_payload = std::uint32_t(max);
    if (!options.job_kind.empty() && options.job_kind != impl->kind)
      return Error{Errc::invalid_argument, 0,
                   impl->where + " takes job ids of namespace " + impl->kind + ", not " + options.job_kind};
    if (options.max_payload != 0 && options.max_payload != impl->max_payload)
      return Error{Errc::invalid_argument, 0,
                   impl->where + " was set up for payloads of at most " + std::to_string(impl->max_payload) +
                       " bytes, not " + std::to_string(options.max_payload)};
  } catch (const BackendError& e) {
    return Error{Errc::system, 0, e.what()};
  }
  return std::unique_ptr<ValkeyBackend>(new ValkeyBackend(std::move(impl)));
}

Result<std::unique_ptr<Backend>> open_valkey(std::string_view url, ValkeyOptions options) {
  auto b = ValkeyBackend::open(url, options);
  if (!b) return b.error();
  return std::unique_ptr<Backend>(std::move(b).value());
}

const ValkeyUrl& ValkeyBackend::url() const noexcept { return impl_->url; }
std::uint32_t ValkeyBackend::max_payload() const noexcept { return impl_->max_payload; }
std::uint16_t ValkeyBackend::node() const noexcept { return impl_->options.node; }
std::string ValkeyBackend::describe() const { return impl_->where; }
std::string ValkeyBackend::job_kind() const { return impl_->kind; }

std::uint64_t ValkeyBackend::now_ms() {
  Reply r = impl_->eval(Sid::now, {}, {});
  return std::uint64_t(impl_->integer(r.get(), Sid::now));
}

BrandedId ValkeyBackend::mint() {
  Reply r = impl_->eval(Sid::mint, {}, {});
  const std::int64_t ms = impl_->integer(impl_->element(r.get(), 0, Sid::mint), Sid::mint);
  const std::int64_t seq = impl_->integer(impl_->element(r.get(), 1, Sid::mint), Sid::mint);
  return BrandedId::make(impl_->kind, snowflake_of(std::uint64_t(ms), impl_->options.node, std::uint32_t(seq)));
}

// ---- jobs ------------------------------------------------------------------------

EnqueueStatus ValkeyBackend::enqueue(const BrandedId& group, const BrandedId& job, std::string_view payload,
                                     EnqueueOptions options) {
  if (!job.well_formed()) return EnqueueStatus::invalid_id;
  if (group.valid() && !group.well_formed()) return EnqueueStatus::invalid_group;
  if (job.kind() != impl_->kind) return EnqueueStatus::kind_mismatch;
  if (payload.size() > impl_->max_payload) return EnqueueStatus::payload_too_large;
  const std::string_view g = group.valid() ? group.str() : kDefaultGroup;
  const Num delay(options.delay_ms);
  const std::string& jk = impl_->job(job);
  const std::string& lk = impl_->lane(g);
  Reply r = impl_->eval(Sid::enqueue, {jk, lk}, {job.str(), g, payload, delay.sv()});
  return impl_->integer(r.get(), Sid::enqueue) == 1 ? EnqueueStatus::enqueued : EnqueueStatus::duplicate;
}

bool ValkeyBackend::claim(Lease& out, std::uint32_t lease_ms) {
  return impl_->claim(&out, 1, lease_ms, nullptr) == 1;
}

std::size_t ValkeyBackend::claim_batch(std::span<Lease> out, std::uint32_t lease_ms) {
  if (out.empty()) return 0;
  return impl_->claim(out.data(), out.size(), lease_ms, nullptr);
}

bool ValkeyBackend::claim_wait(Lease& out, std::uint32_t lease_ms, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto give_up = clock::now() + std::max(timeout, std::chrono::milliseconds(0));
  const std::string& wake = impl_->fixed[9];
  for (;;) {
    std::int64_t next_due = -1;
    if (impl_->claim(&out, 1, lease_ms, &next_due) == 1) return true;
    const auto now = clock::now();
    if (now >= give_up) return false;
    // Park on the wake list until an enqueue (or a release, resume, clock
    // move) pushes a token, the next lease deadline or due time, a second
    // at most (leases taken by others since our claim), or the timeout.
    auto block = std::min(std::chrono::ceil<std::chrono::milliseconds>(give_up - now), kWaitBackstop);
    if (next_due >= 0) block = std::min(block, std::chrono::milliseconds(std::max<std::int64_t>(next_due, 1)));
    Args a;
    a.add("BLPOP").add(wake).add_double(double(std::max<std::int64_t>(block.count(), 1)) / 1000.0);
    Reply r = impl_->conn.blocking_command(a, block);
    if (r->type == REDIS_REPLY_ERROR) impl_->error("claim_wait", text(r.get()));
  }
}

AckStatus ValkeyBackend::complete(const BrandedId& job, Token token) {
  if (!job.well_formed() || job.kind() != impl_->kind) return AckStatus::gone;
  const Num a(token.value);
  Reply r = impl_->eval(Sid::complete, {impl_->job(job)}, {job.str(), a.sv()});
  switch (impl_->integer(r.get(), Sid::complete)) {
    case 0: return AckStatus::ok;
    case 1: return AckStatus::stale;
    default: return AckStatus::gone;
  }
}

FailStatus ValkeyBackend::fail(const BrandedId& job, Token token, const FailOptions& options) {
  if (!job.well_formed() || job.kind() != impl_->kind) return FailStatus::gone;
  const Num a(token.value), delay(options.delay_ms.value_or(0)), max(options.max_attempts.value_or(1));
  const std::string_view err = options.error.substr(0, kMaxErrorBytes);
  Reply r = impl_->eval(Sid::fail, {impl_->job(job)}, {job.str(), a.sv(), delay.sv(), max.sv(), err});
  switch (impl_->integer(r.get(), Sid::fail)) {
    case 0: return FailStatus::retrying;
    case 1: return FailStatus::dead;
    case 2: return FailStatus::stale;
    default: return FailStatus::gone;
  }
}

AckStatus ValkeyBackend::extend(const BrandedId& job, Token token, std::uint32_t lease_ms) {
  if (!job.well_formed() || job.kind() != impl_->kind) return AckStatus::gone;
  const Num a(token.value), ms(lease_ms);
  Reply r = impl_->eval(Sid::extend, {impl_->job(job)}, {job.str(), a.sv(), ms.sv()});
  switch (impl_->integer(r.get(), Sid::extend)) {
    case 0: return AckStatus::ok;
    case 1: return AckStatus::stale;
    default: return AckStatus::gone;
  }
}

// Interim forms of the calls the Valkey issue implements as one script each.
std::size_t ValkeyBackend::enqueue_batch(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < items.size() && i < statuses.size(); ++i) {
    statuses[i] = enqueue(items[i].group, items[i].job, items[i].payload, items[i].options);
    n += statuses[i] == EnqueueStatus::enqueued;
  }
  return n;
}

std::size_t ValkeyBackend::complete_batch(std::span<const Lease> leases, std::span<AckStatus> statuses) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < leases.size() && i < statuses.size(); ++i) {
    statuses[i] = complete(leases[i].id, leases[i].token);
    n += statuses[i] == AckStatus::ok;
  }
  return n;
}

std::size_t ValkeyBackend::claim_lane_batch(std::span<Lease> out, std::uint32_t lease_ms) { return claim_batch(out, lease_ms); }

AckStatus ValkeyBackend::release(const BrandedId& job, Token token) {
  FailOptions o;
  o.delay_ms = 0;
  o.max_attempts = 1U << 30;
  switch (fail(job, token, o)) {
    case FailStatus::retrying: case FailStatus::dead: return AckStatus::ok;
    case FailStatus::stale: return AckStatus::stale;
    case FailStatus::gone: return AckStatus::gone;
    case FailStatus::corrupt: return AckStatus::corrupt;
  }
  return AckStatus::gone;
}

MoveStatus ValkeyBackend::reassign(const BrandedId&, const BrandedId&) {
  throw BackendError(impl_->where + ": reassign is not implemented on Valkey yet");
}
std::optional<JobInfo> ValkeyBackend::job(const BrandedId&, bool) {
  throw BackendError(impl_->where + ": job lookup is not implemented on Valkey yet");
}
std::vector<JobInfo> ValkeyBackend::jobs(const JobFilter&) {
  throw BackendError(impl_->where + ": job listing is not implemented on Valkey yet");
}
AckStatus ValkeyBackend::requeue_dead(const BrandedId&) {
  throw BackendError(impl_->where + ": dead-letter requeue is not implemented on Valkey yet");
}
std::uint64_t ValkeyBackend::requeue_all_dead() {
  throw BackendError(impl_->where + ": dead-letter requeue is not implemented on Valkey yet");
}
std::uint64_t ValkeyBackend::purge_dead() {
  throw BackendError(impl_->where + ": dead-letter purge is not implemented on Valkey yet");
}
std::vector<ProcessInfo> ValkeyBackend::processes() { return {}; }
BackendCapabilities ValkeyBackend::capabilities() const { return {}; }

// ---- lanes -------------------------------------------------------------------------

namespace {
// The group's name in the keyspace: the default lane for the empty id; empty
// for a malformed one.
std::string_view group_name(const BrandedId& g) noexcept {
  if (!g.valid()) return kDefaultGroup;
  if (!g.well_formed()) return {};
  return g.str();
}
}  // namespace

LaneStatus ValkeyBackend::pause(const BrandedId& group) {
  const std::string_view g = group_name(group);
  if (g.empty()) return LaneStatus::invalid_group;
  impl_->eval(Sid::pause, {impl_->lane(g)}, {g});
  return LaneStatus::ok;
}

LaneStatus ValkeyBackend::resume(const BrandedId& group) {
  const std::string_view g = group_name(group);
  if (g.empty()) return LaneStatus::invalid_group;
  impl_->eval(Sid::resume, {impl_->lane(g)}, {g});
  return LaneStatus::ok;
}

void ValkeyBackend::pause_all() { impl_->eval(Sid::pause_all, {}, {}); }
void ValkeyBackend::resume_all() { impl_->eval(Sid::resume_all, {}, {}); }

LaneStatus ValkeyBackend::clear_limit(const BrandedId& group) {
  // Interim: the limit script takes 0 as "clear"; the Valkey issue makes
  // clearing its own script and refuses limit 0, as EchoMQ does.
  if (group.valid() && !group.well_formed()) return LaneStatus::invalid_group;
  return set_limit(group, 0);
}

LaneStatus ValkeyBackend::set_limit(const BrandedId& group, std::uint32_t limit) {
  if (limit > kMaxLimit) return LaneStatus::invalid_argument;
  const std::string_view g = group_name(group);
  if (g.empty()) return LaneStatus::invalid_group;
  const Num n(limit);
  impl_->eval(Sid::limit, {impl_->lane(g)}, {g, n.sv()});
  return LaneStatus::ok;
}

LaneStatus ValkeyBackend::set_weight(const BrandedId& group, std::uint32_t weight) {
  if (weight < 1 || weight > kMaxWeight) return LaneStatus::invalid_argument;
  const std::string_view g = group_name(group);
  if (g.empty()) return LaneStatus::invalid_group;
  const Num w(weight);
  impl_->eval(Sid::weight, {impl_->lane(g)}, {g, w.sv()});
  return LaneStatus::ok;
}

std::uint64_t ValkeyBackend::depth(const BrandedId& group) {
  const std::string_view g = group_name(group);
  if (g.empty()) return 0;
  Args a;
  a.add("ZCARD").add(impl_->lane(g));
  Reply r = impl_->conn.command(a);
  if (r->type != REDIS_REPLY_INTEGER) impl_->error("depth", r->type == REDIS_REPLY_ERROR ? text(r.get()) : "unexpected reply");
  return std::uint64_t(r->integer);
}

std::uint64_t ValkeyBackend::drain(const BrandedId& group) {
  const std::string_view g = group_name(group);
  if (g.empty()) return 0;
  Reply r = impl_->eval(Sid::drain, {impl_->lane(g)}, {g});
  return std::uint64_t(impl_->integer(r.get(), Sid::drain));
}

std::uint64_t ValkeyBackend::tick() {
  Reply r = impl_->eval(Sid::tick, {}, {});
  return std::uint64_t(impl_->integer(r.get(), Sid::tick));
}

void ValkeyBackend::advance_clock(std::uint64_t ms) {
  const Num n(ms);
  impl_->eval(Sid::advance, {}, {n.sv()});
}

Snapshot ValkeyBackend::snapshot() {
  Impl& m = *impl_;
  Reply r = m.eval(Sid::snapshot, {}, {});
  const redisReply* root = r.get();
  auto el = [&](const redisReply* x, std::size_t i) { return m.element(x, i, Sid::snapshot); };
  auto u64 = [&](const redisReply* x) { return std::uint64_t(std::max<std::int64_t>(0, m.integer(x, Sid::snapshot))); };
  Snapshot s;
  s.paused = u64(el(root, 0)) != 0;
  s.now_ms = u64(el(root, 1));
  const redisReply* ring = el(root, 2);
  if (ring->type != REDIS_REPLY_ARRAY) m.error("snapshot", "unexpected reply shape");
  for (std::size_t i = 0; i < ring->elements; ++i) s.ring.push_back(m.id_from(ring->element[i], Sid::snapshot));
  const redisReply* c = el(root, 3);
  std::uint64_t* fields[] = {&s.counters.enqueued, &s.counters.duplicates, &s.counters.claimed,
                             &s.counters.completed, &s.counters.retried,   &s.counters.dead,
                             &s.counters.expired,  &s.counters.promoted,  &s.counters.drained};
  for (std::size_t i = 0; i < 9; ++i) *fields[i] = u64(el(c, i));
  s.jobs_capacity = 0;
  s.pending = u64(el(root, 4));
  s.leased = u64(el(root, 5));
  s.scheduled = u64(el(root, 6));
  s.dead = u64(el(root, 7));
  const redisReply* lanes = el(root, 8);
  if (lanes->type != REDIS_REPLY_ARRAY) m.error("snapshot", "unexpected reply shape");
  for (std::size_t i = 0; i < lanes->elements; ++i) {
    const redisReply* x = lanes->element[i];
    auto g = BrandedId::parse(text(el(x, 0)));
    if (!g) continue;  // a group EchoMQ named that is not a branded id: not ours to show
    LaneInfo li;
    li.group = *g;
    li.depth = u64(el(x, 1));
    li.active = u64(el(x, 2));
    li.limit = std::uint32_t(u64(el(x, 3)));
    li.weight = std::uint32_t(u64(el(x, 4)));
    li.paused = u64(el(x, 5)) != 0;
    li.ringed = u64(el(x, 6)) != 0;
    li.served = u64(el(x, 7));
    s.lanes.push_back(li);
  }
  return s;
}

std::uint64_t ValkeyBackend::remove_queue() {
  Impl& m = *impl_;
  const std::string pattern = m.prefix + "*";
  std::string cursor = "0";
  std::uint64_t removed = 0;
  do {
    Args a;
    a.add("SCAN").add(cursor).add("MATCH").add(pattern).add("COUNT").add("1000");
    Reply r = m.conn.command(a);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_ARRAY)
      m.error("remove_queue", r->type == REDIS_REPLY_ERROR ? text(r.get()) : "unexpected SCAN reply");
    cursor = std::string(text(r->element[0]));
    const redisReply* keys = r->element[1];
    if (keys->elements == 0) continue;
    Args del;
    del.add("UNLINK");
    for (std::size_t i = 0; i < keys->elements; ++i) del.add(text(keys->element[i]));
    Reply d = m.conn.command(del);
    if (d->type != REDIS_REPLY_INTEGER) m.error("remove_queue", d->type == REDIS_REPLY_ERROR ? text(d.get()) : "unexpected reply");
    removed += std::uint64_t(d->integer);
  } while (cursor != "0");
  // Scripts stay cached on the server; our shas stay valid.
  return removed;
}

}  // namespace fairlane
