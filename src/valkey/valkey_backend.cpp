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
#include <cstdio>
#include <deque>
#include <initializer_list>
#include <random>
#include <thread>
#include <utility>

#include "connection.hpp"
#include "fairlane/valkey.hpp"
#include "retry_text.hpp"
#include "scripts.hpp"

namespace fairlane {

using valkey::Args;
using valkey::Reply;
using valkey::decode_policy;
using valkey::encode_policy;

namespace {

constexpr std::uint32_t kDefaultMaxPayload = 256;       // the segment's default payload_bytes
constexpr std::uint32_t kLargestPayload = 64u << 20;    // a sane bound for one job
constexpr std::size_t kMaxErrorBytes = 1024;            // last_error kept by fail()
constexpr std::chrono::milliseconds kWaitBackstop{1000};  // longest BLPOP between claims
constexpr std::chrono::milliseconds kLongestWait = std::chrono::hours(24 * 365 * 100);  // claim_wait's timeout, at most
constexpr int kRetriesBeforeRepair = 5;                 // FLRETRY answers before the `r` flag is sent
constexpr std::size_t kBatchChunk = 512;                // items per batch script (bounds one script's run)
constexpr std::uint64_t kLargestExactInLua = 1ULL << 53;  // a Lua number (a double) is an exact integer up to here

enum class Sid : std::size_t {
  init, now, mint, enqueue, enqueue_batch, claim, complete, complete_batch, fail, extend, release, pause,
  resume, pause_all, resume_all, limit, clear_limit, weight, drain, reassign, tick, advance, snapshot, job,
  jobs, requeue_dead, requeue_all_dead, purge_dead, check_writable, count_
};

struct ScriptDef {
  std::string_view name;
  std::string_view helper;  // a shared piece it needs, or empty
  std::string_view body;
};

constexpr std::array<ScriptDef, std::size_t(Sid::count_)> kScripts = {{
    {"init", {}, valkey::kInit},
    {"now", {}, valkey::kNow},
    {"mint", {}, valkey::kMint},
    {"enqueue", valkey::kEnqueueOne, valkey::kEnqueue},
    {"enqueue_batch", valkey::kEnqueueOne, valkey::kEnqueueBatch},
    {"claim", {}, valkey::kClaim},
    {"complete", valkey::kCompleteOne, valkey::kComplete},
    {"complete_batch", valkey::kCompleteOne, valkey::kCompleteBatch},
    {"fail", {}, valkey::kFail},
    {"extend", {}, valkey::kExtend},
    {"release", {}, valkey::kRelease},
    {"pause", {}, valkey::kPause},
    {"resume", {}, valkey::kResume},
    {"pause_all", {}, valkey::kPauseAll},
    {"resume_all", {}, valkey::kResumeAll},
    {"limit", {}, valkey::kLimit},
    {"clear_limit", {}, valkey::kClearLimit},
    {"weight", {}, valkey::kWeight},
    {"drain", {}, valkey::kDrain},
    {"reassign", {}, valkey::kReassign},
    {"tick", {}, valkey::kTick},
    {"advance_clock", {}, valkey::kAdvance},
    {"snapshot", {}, valkey::kSnapshot},
    {"job", {}, valkey::kJob},
    {"jobs", {}, valkey::kJobs},
    {"requeue_dead", valkey::kRequeueOne, valkey::kRequeueDead},
    {"requeue_all_dead", valkey::kRequeueOne, valkey::kRequeueAllDead},
    {"purge_dead", {}, valkey::kPurgeDead},
    {"check_writable", {}, valkey::kCheckWritable},
}};

// A decimal number as a string_view into its own buffer.
struct Num {
  explicit Num(std::uint64_t v) noexcept { n = std::size_t(std::to_chars(buf, buf + sizeof buf, v).ptr - buf); }
  std::string_view sv() const noexcept { return {buf, n}; }
  char buf[24];
  std::size_t n;
};

std::string_view text(const redisReply* r) noexcept { return {r->str, r->len}; }

bool starts(std::string_view s, std::string_view p) noexcept { return s.substr(0, p.size()) == p; }

bool policy_ok(const RetryPolicy& p) noexcept {
  return p.max_attempts <= 65535 && (!p.backoff || p.backoff->valid());
}
// Why an enqueue is refused before it is sent (enqueued: it is not), in the
// order the segment checks, so that a call with several faults is refused
// for the same one on every backend: a delay over kMaxDelayMs, the job id,
// its namespace, the group, the payload's size, the retry policy's ranges.
EnqueueStatus refusal(const BrandedId& group, const BrandedId& job, std::string_view payload,
                      const EnqueueOptions& o, std::string_view kind, std::uint32_t max_payload) noexcept {
  if (o.delay_ms > kMaxDelayMs) return EnqueueStatus::invalid_argument;
  if (!job.well_formed()) return EnqueueStatus::invalid_id;
  if (job.kind() != kind) return EnqueueStatus::kind_mismatch;
  if (group.valid() && !group.well_formed()) return EnqueueStatus::invalid_group;
  if (payload.size() > max_payload) return EnqueueStatus::payload_too_large;
  if (!policy_ok(o.retry)) return EnqueueStatus::invalid_argument;
  return EnqueueStatus::enqueued;
}

}  // namespace

struct ValkeyBackend::Impl {
  ValkeyUrl url;
  ValkeyOptions options;
  valkey::Client conn;
  std::string prefix;
  std::array<std::string, valkey::kFixedKeys.size()> fixed;
  std::array<std::string, std::size_t(Sid::count_)> shas;
  std::string kind = "JOB";
  std::uint32_t max_payload = kDefaultMaxPayload;
  std::string where;  // "valkey://host:port/queue", for messages (never a password)
  Args args;
  std::string job_key, lane_key;
  std::vector<std::string> many_keys;  // batch keys (owned while a call runs)
  std::mt19937_64 rng{std::random_device{}()};

  Impl(ValkeyUrl u, const ValkeyOptions& o)
      : url(std::move(u)), options(o), conn(url, o), prefix(url.prefix()), where(url.str()) {
    for (std::size_t i = 0; i < fixed.size(); ++i) fixed[i] = prefix + std::string(valkey::kFixedKeys[i]);
  }

  [[noreturn]] void error(std::string_view op, std::string_view what) const {
    throw BackendError(where + ": " + std::string(op) + ": " + std::string(what));
  }

  std::string job_key_of(std::string_view id) const { return prefix + "job:" + std::string(id); }
  std::string lane_key_of(std::string_view group) const { return prefix + "g:" + std::string(group) + ":pending"; }
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
    const ScriptDef& d = kScripts[std::size_t(s)];
    std::string source(valkey::kPrelude);
    source += valkey::kBackendPrelude;
    source += d.helper;
    source += d.body;
    a.add("SCRIPT").add("LOAD").add(source);
    Reply r = conn.command(a);
    if (r->type != REDIS_REPLY_STRING) {
      error(std::string("loading the ") + std::string(d.name) + " script",
            r->type == REDIS_REPLY_ERROR ? text(r.get()) : std::string_view("unexpected reply"));
    }
    shas[std::size_t(s)] = std::string(text(r.get()));
  }

  [[noreturn]] void read_only(std::string_view error_text) const {
    // "FLREADONLY host:segment; script: ..."
    std::string_view o = error_text.substr(11);
    o = o.substr(0, o.find(';'));
    const std::size_t colon = o.find(':');
    const std::string host(o.substr(0, colon)), seg(colon == std::string_view::npos ? "" : o.substr(colon + 1));
    throw ReadOnlyError(where + " is the mirror of segment '" + seg + "' on host " + host +
                            ": it is read-only through valkey:// (write through the segment; a program "
                            "may force a write with ValkeyOptions::force)",
                        std::string(o));
  }

  // One EVALSHA: the fixed keys, then `keys`, then the flags and `argv`.
  // Loads the script on first use and again after NOSCRIPT (a restarted or
  // flushed server); waits out FLRETRY (a key the script needed was not
  // there) and, after a few in a row, lets the script repair.
  template <class K, class V>
  Reply eval_any(Sid s, const K& keys, const V& argv) {
    int retries = 0;
    auto pause = std::chrono::milliseconds(2);
    for (int round = 0; round < 2 + kRetriesBeforeRepair + 1;) {
      if (shas[std::size_t(s)].empty()) load(s);
      const Num nkeys(fixed.size() + std::size(keys));
      args.clear();
      args.add("EVALSHA").add(shas[std::size_t(s)]).add(nkeys.sv());
      for (const auto& k : fixed) args.add(k);
      for (const auto& k : keys) args.add(k);
      std::string_view flags = "-";
      if (options.force) flags = retries >= kRetriesBeforeRepair ? "fr" : "f";
      else if (retries >= kRetriesBeforeRepair) flags = "r";
      args.add(flags);
      for (const auto& v : argv) args.add(v);
      Reply r = conn.command(args);
      if (r->type != REDIS_REPLY_ERROR) return r;
      const std::string_view t = text(r.get());
      if (starts(t, "NOSCRIPT")) {
        shas[std::size_t(s)].clear();
        ++round;
        continue;
      }
      if (starts(t, "FLREADONLY")) read_only(t);
      if (starts(t, "FLRETRY")) {
        ++retries;
        ++round;
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(200));
        continue;
      }
      if (starts(t, "NOAUTH"))
        error(kScripts[std::size_t(s)].name,
              "the server needs a password (NOAUTH): give it in the URL (valkey://USER:PASSWORD@HOST:PORT/QUEUE) "
              "or in FAIRLANE_VALKEY_PASSWORD");
      error(kScripts[std::size_t(s)].name, t);
    }
    error(kScripts[std::size_t(s)].name, "the server keeps refusing the script (NOSCRIPT or FLRETRY)");
  }
  Reply eval(Sid s, std::initializer_list<std::string_view> keys, std::initializer_list<std::string_view> argv) {
    return eval_any(s, keys, argv);
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
  std::size_t claim(Lease* out, std::size_t room, std::uint32_t lease_ms, char mode, std::int64_t* next_due) {
    const Num lease(lease_ms), n(room);
    const char m[2] = {mode, 0};
    Reply r = eval(Sid::claim, {}, {lease.sv(), n.sv(), std::string_view(m, 1)});
    const std::size_t got = std::size_t(integer(element(r.get(), 0, Sid::claim), Sid::claim));
    const std::uint64_t deadline = std::uint64_t(integer(element(r.get(), 1, Sid::claim), Sid::claim));
    if (next_due) *next_due = integer(element(r.get(), 2, Sid::claim), Sid::claim);
    constexpr std::size_t kF = 7;
    if (got > room || r->elements != 3 + kF * got) error("claim", "unexpected reply shape");
    for (std::size_t i = 0; i < got; ++i) {
      const std::size_t b = 3 + kF * i;
      Lease& l = out[i];
      l.id = id_from(r->element[b], Sid::claim);
      l.group = id_from(r->element[b + 1], Sid::claim);
      const redisReply* p = r->element[b + 2];
      if (p->type == REDIS_REPLY_STRING) l.payload.assign(p->str, p->len);
      else l.payload.clear();
      l.attempt = std::uint32_t(integer(r->element[b + 3], Sid::claim));
      l.token = Token(std::uint64_t(integer(r->element[b + 4], Sid::claim)));
      l.deadline_ms = deadline;
      l.waited_us = std::uint64_t(std::max<std::int64_t>(0, integer(r->element[b + 5], Sid::claim))) * 1000;
      const redisReply* pol = r->element[b + 6];
      l.retry = pol->type == REDIS_REPLY_STRING ? decode_policy(text(pol)) : RetryPolicy{};
    }
    return got;
  }

  JobInfo job_info(const redisReply* x, Sid s, bool with_payload) const {
    // {id, state, attempt, group, ready_ms, last_error, token, when, payload_bytes, retry, payload, stalled}
    if (x->type != REDIS_REPLY_ARRAY || x->elements < 12) error(kScripts[std::size_t(s)].name, "unexpected reply shape");
    JobInfo j;
    j.id = id_from(x->element[0], s);
    const std::string_view st = text(x->element[1]);
    j.state = st == "active" ? JobState::leased : st == "scheduled" ? JobState::scheduled
              : st == "dead" ? JobState::dead : JobState::pending;
    j.attempt = std::uint32_t(std::max<std::int64_t>(0, integer(x->element[2], s)));
    if (auto g = BrandedId::parse(text(x->element[3]))) j.group = *g;  // empty for EchoMQ's flat jobs
    j.ready_ms = std::uint64_t(std::max<std::int64_t>(0, integer(x->element[4], s)));
    j.last_error = std::string(text(x->element[5]));
    j.token = j.state == JobState::leased ? Token(std::uint64_t(integer(x->element[6], s))) : Token();
    j.when_ms = std::uint64_t(std::max<std::int64_t>(0, integer(x->element[7], s)));
    j.payload_bytes = std::uint32_t(std::max<std::int64_t>(0, integer(x->element[8], s)));
    j.retry = decode_policy(text(x->element[9]));
    if (with_payload) j.payload = std::string(text(x->element[10]));
    j.minted_unix_ms = (j.id.snowflake() >> 22) + kEpochMs;
    return j;
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
  if (options.max_stalled && *options.max_stalled > 1'000'000)
    return Error{Errc::invalid_argument, 0, "max_stalled " + std::to_string(*options.max_stalled) + " is out of range (0..1000000)"};

  auto impl = std::make_unique<Impl>(std::move(u).value(), options);
  if (std::string why = impl->conn.connect(); !why.empty())
    return Error{why.find("authentication failed") != std::string::npos || why.find("NOAUTH") != std::string::npos
                     ? Errc::permission_denied
                     : Errc::system,
                 0, why};
  try {
    const std::string want_kind = options.job_kind.empty() ? "JOB" : options.job_kind;
    const Num want_max(options.max_payload ? options.max_payload : kDefaultMaxPayload);
    const std::string stalled = options.max_stalled ? std::to_string(*options.max_stalled) : std::string();
    Reply r = impl->eval(Sid::init, {}, {want_kind, want_max.sv(), stalled, options.create ? "1" : "0"});
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 0)
      return Error{Errc::not_found, 0,
                   impl->where + " does not exist (no key of queue '" + impl->url.queue + "'): nothing was created"};
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
    const std::string_view w = e.what();
    const bool auth = w.find("NOAUTH") != std::string_view::npos || w.find("authentication") != std::string_view::npos;
    return Error{auth ? Errc::permission_denied : Errc::system, 0, std::string(w)};
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
bool ValkeyBackend::cluster() const noexcept { return impl_->conn.cluster(); }
std::string ValkeyBackend::serving_node() const { return impl_->conn.address(); }

std::optional<std::string> ValkeyBackend::owner() {
  Args a;
  a.add("HGET").add(impl_->fixed[6]).add("owner");  // META
  Reply r = impl_->conn.command(a);
  if (r->type == REDIS_REPLY_STRING) return std::string(text(r.get()));
  if (r->type == REDIS_REPLY_ERROR) impl_->error("owner", text(r.get()));
  return std::nullopt;
}

bool ValkeyBackend::writable() { return impl_->options.force || !owner().has_value(); }

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

namespace {
// The group's name in the keyspace: the default lane for the empty id; empty
// for a malformed one.
std::string_view group_name(const BrandedId& g) noexcept {
  if (!g.valid()) return kDefaultGroup;
  if (!g.well_formed()) return {};
  return g.str();
}

// A write refused on a mirror's keyspace (ReadOnlyError) answers read_only
// where the call's status can say it, as the segment's handles that make no
// writes do; calls that return counts, bools or nothing still throw.
template <class Status, class F>
Status or_read_only(F&& f) {
  try {
    return f();
  } catch (const ReadOnlyError&) {
    return Status::read_only;
  }
}
}  // namespace

EnqueueStatus ValkeyBackend::enqueue(const BrandedId& group, const BrandedId& job, std::string_view payload,
                                     const EnqueueOptions& options) {
  if (const EnqueueStatus st = refusal(group, job, payload, options, impl_->kind, impl_->max_payload);
      st != EnqueueStatus::enqueued)
    return st;
  const std::string_view g = group.valid() ? group.str() : kDefaultGroup;
  const Num delay(options.delay_ms);
  const std::string pol = encode_policy(options.retry);
  const std::string& jk = impl_->job(job);
  const std::string& lk = impl_->lane(g);
  return or_read_only<EnqueueStatus>([&] {
    Reply r = impl_->eval(Sid::enqueue, {jk, lk}, {job.str(), g, payload, delay.sv(), pol});
    return impl_->integer(r.get(), Sid::enqueue) == 1 ? EnqueueStatus::enqueued : EnqueueStatus::duplicate;
  });
}

std::size_t ValkeyBackend::enqueue_batch(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses) {
  Impl& m = *impl_;
  const std::size_t total = std::min(items.size(), statuses.size());
  std::size_t enqueued = 0;
  // Checked here, as the segment checks, so a refused item costs nothing;
  // the rest go in one script per chunk of kBatchChunk.
  std::vector<std::size_t> sent;
  std::deque<std::string> owned;  // keys, policies, delays: a deque never moves them, so the views stay valid
  std::vector<std::string_view> keys, argv;
  for (std::size_t from = 0; from < total; from += kBatchChunk) {
    const std::size_t to = std::min(total, from + kBatchChunk);
    sent.clear();
    owned.clear();
    keys.clear();
    argv.clear();
    for (std::size_t i = from; i < to; ++i) {
      const EnqueueItem& it = items[i];
      const EnqueueStatus st = refusal(it.group, it.job, it.payload, it.options, m.kind, m.max_payload);
      statuses[i] = st;
      if (st != EnqueueStatus::enqueued) continue;
      sent.push_back(i);
    }
    if (sent.empty()) continue;
    owned.push_back(std::to_string(sent.size()));
    argv.push_back(owned.back());
    for (std::size_t i : sent) {
      const EnqueueItem& it = items[i];
      const std::string_view g = it.group.valid() ? it.group.str() : kDefaultGroup;
      owned.push_back(m.job_key_of(it.job.str()));
      keys.push_back(owned.back());
      owned.push_back(m.lane_key_of(g));
      keys.push_back(owned.back());
      argv.push_back(it.job.str());
      argv.push_back(g);
      argv.push_back(it.payload);
      owned.push_back(std::to_string(it.options.delay_ms));
      argv.push_back(owned.back());
      owned.push_back(encode_policy(it.options.retry));
      argv.push_back(owned.back());
    }
    try {
      Reply r = m.eval_any(Sid::enqueue_batch, keys, argv);
      if (r->type != REDIS_REPLY_ARRAY || r->elements != sent.size()) m.error("enqueue_batch", "unexpected reply shape");
      for (std::size_t k = 0; k < sent.size(); ++k) {
        const bool ok = m.integer(r->element[k], Sid::enqueue_batch) == 1;
        statuses[sent[k]] = ok ? EnqueueStatus::enqueued : EnqueueStatus::duplicate;
        enqueued += ok;
      }
    } catch (const ReadOnlyError&) {
      for (std::size_t i : sent) statuses[i] = EnqueueStatus::read_only;
    }
  }
  return enqueued;
}

bool ValkeyBackend::claim(Lease& out, std::uint32_t lease_ms) {
  return impl_->claim(&out, 1, lease_ms, 'w', nullptr) == 1;
}

std::size_t ValkeyBackend::claim_batch(std::span<Lease> out, std::uint32_t lease_ms) {
  if (out.empty()) return 0;
  return impl_->claim(out.data(), out.size(), lease_ms, 'w', nullptr);
}

std::size_t ValkeyBackend::claim_lane_batch(std::span<Lease> out, std::uint32_t lease_ms) {
  if (out.empty()) return 0;
  return impl_->claim(out.data(), out.size(), lease_ms, 'l', nullptr);
}

bool ValkeyBackend::claim_wait(Lease& out, std::uint32_t lease_ms, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  // Bounded (a century): milliseconds::max() in steady_clock's nanoseconds
  // overflowed to a time in the past, and a wait meant to have no end made
  // one claim and said false (found by test).
  const auto give_up = clock::now() + std::clamp(timeout, std::chrono::milliseconds(0), kLongestWait);
  const std::string& wake = impl_->fixed[9];
  for (;;) {
    std::int64_t next_due = -1;
    if (impl_->claim(&out, 1, lease_ms, 'w', &next_due) == 1) return true;
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
    if (r && r->type == REDIS_REPLY_ERROR) impl_->error("claim_wait", text(r.get()));
  }
}

namespace {
AckStatus ack_status(std::int64_t v) noexcept {
  switch (v) {
    case 0: return AckStatus::ok;
    case 1: return AckStatus::stale;
    default: return AckStatus::gone;
  }
}
}  // namespace

AckStatus ValkeyBackend::complete(const BrandedId& job, Token token) {
  if (!job.well_formed() || job.kind() != impl_->kind) return AckStatus::gone;
  const Num t(token.value);
  return or_read_only<AckStatus>([&] {
    Reply r = impl_->eval(Sid::complete, {impl_->job(job)}, {job.str(), t.sv()});
    return ack_status(impl_->integer(r.get(), Sid::complete));
  });
}

std::size_t ValkeyBackend::complete_batch(std::span<const Lease> leases, std::span<AckStatus> statuses) {
  Impl& m = *impl_;
  const std::size_t total = std::min(leases.size(), statuses.size());
  std::size_t done = 0;
  std::vector<std::size_t> sent;
  std::deque<std::string> owned;  // a deque never moves its strings: the views stay valid
  std::vector<std::string_view> keys, argv;
  for (std::size_t from = 0; from < total; from += kBatchChunk) {
    const std::size_t to = std::min(total, from + kBatchChunk);
    sent.clear();
    owned.clear();
    keys.clear();
    argv.clear();
    for (std::size_t i = from; i < to; ++i) {
      const Lease& l = leases[i];
      if (!l.id.well_formed() || l.id.kind() != m.kind) {
        statuses[i] = AckStatus::gone;
        continue;
      }
      sent.push_back(i);
    }
    if (sent.empty()) continue;
    owned.push_back(std::to_string(sent.size()));
    argv.push_back(owned.back());
    for (std::size_t i : sent) {
      owned.push_back(m.job_key_of(leases[i].id.str()));
      keys.push_back(owned.back());
      argv.push_back(leases[i].id.str());
      owned.push_back(std::to_string(leases[i].token.value));
      argv.push_back(owned.back());
    }
    try {
      Reply r = m.eval_any(Sid::complete_batch, keys, argv);
      if (r->type != REDIS_REPLY_ARRAY || r->elements != sent.size()) m.error("complete_batch", "unexpected reply shape");
      for (std::size_t k = 0; k < sent.size(); ++k) {
        statuses[sent[k]] = ack_status(m.integer(r->element[k], Sid::complete_batch));
        done += statuses[sent[k]] == AckStatus::ok;
      }
    } catch (const ReadOnlyError&) {
      for (std::size_t i : sent) statuses[i] = AckStatus::read_only;
    }
  }
  return done;
}

FailStatus ValkeyBackend::fail(const BrandedId& job, Token token, const FailOptions& options) {
  if (!job.well_formed() || job.kind() != impl_->kind) return FailStatus::gone;
  const Num t(token.value);
  // A longer backoff than kMaxDelayMs waits kMaxDelayMs, as the segment's does.
  const std::string delay = options.delay_ms ? std::to_string(std::min(*options.delay_ms, kMaxDelayMs)) : std::string();
  const std::string max = options.max_attempts ? std::to_string(*options.max_attempts) : std::string();
  char u[32];
  std::snprintf(u, sizeof u, "%.17g", std::uniform_real_distribution<double>(0.0, 1.0)(impl_->rng));
  const std::string_view err = options.error.substr(0, kMaxErrorBytes);
  return or_read_only<FailStatus>([&] {
    Reply r = impl_->eval(Sid::fail, {impl_->job(job)}, {job.str(), t.sv(), delay, max, err, u});
    switch (impl_->integer(r.get(), Sid::fail)) {
      case 0: return FailStatus::retrying;
      case 1: return FailStatus::dead;
      case 2: return FailStatus::stale;
      default: return FailStatus::gone;
    }
  });
}

AckStatus ValkeyBackend::extend(const BrandedId& job, Token token, std::uint32_t lease_ms) {
  if (!job.well_formed() || job.kind() != impl_->kind) return AckStatus::gone;
  const Num t(token.value), ms(lease_ms);
  return or_read_only<AckStatus>([&] {
    Reply r = impl_->eval(Sid::extend, {impl_->job(job)}, {job.str(), t.sv(), ms.sv()});
    return ack_status(impl_->integer(r.get(), Sid::extend));
  });
}

AckStatus ValkeyBackend::release(const BrandedId& job, Token token) {
  if (!job.well_formed() || job.kind() != impl_->kind) return AckStatus::gone;
  const Num t(token.value);
  return or_read_only<AckStatus>([&] {
    Reply r = impl_->eval(Sid::release, {impl_->job(job)}, {job.str(), t.sv()});
    return ack_status(impl_->integer(r.get(), Sid::release));
  });
}

MoveStatus ValkeyBackend::reassign(const BrandedId& job, const BrandedId& group) {
  if (!job.well_formed() || job.kind() != impl_->kind) return MoveStatus::gone;
  const std::string_view g = group_name(group);
  if (g.empty()) return MoveStatus::invalid_group;
  return or_read_only<MoveStatus>([&] {
    const std::string jk = impl_->job_key_of(job.str());
    Reply r = impl_->eval(Sid::reassign, {jk, impl_->lane(g)}, {job.str(), g});
    switch (impl_->integer(r.get(), Sid::reassign)) {
      case 0: return MoveStatus::moved;
      case 1: return MoveStatus::gone;
      default: return MoveStatus::not_pending;
    }
  });
}

std::optional<JobInfo> ValkeyBackend::job(const BrandedId& id, bool with_payload) {
  if (!id.well_formed() || id.kind() != impl_->kind) return std::nullopt;
  Reply r = impl_->eval(Sid::job, {impl_->job(id)}, {id.str(), with_payload ? "1" : "0"});
  if (r->type == REDIS_REPLY_NIL) return std::nullopt;
  return impl_->job_info(r.get(), Sid::job, with_payload);
}

std::vector<JobInfo> ValkeyBackend::jobs(const JobFilter& filter) {
  std::string_view g;
  if (filter.group) {
    g = group_name(*filter.group);
    if (g.empty()) return {};
  }
  std::string_view st;
  if (filter.state) {
    switch (*filter.state) {
      case JobState::pending: st = "pending"; break;
      case JobState::leased: st = "active"; break;
      case JobState::scheduled: st = "scheduled"; break;
      case JobState::dead: st = "dead"; break;
    }
  }
  // Lua keeps numbers as doubles, and one of 10^17 or more reaches ZRANGE
  // as "1e+17", which Valkey refuses: a limit past 2^53 (more jobs than any
  // server holds) is 2^53, "every job" as on the segment.
  const Num limit(std::min<std::uint64_t>(filter.limit, kLargestExactInLua));
  Reply r = impl_->eval(Sid::jobs, {}, {g, st, limit.sv(), "0"});
  if (r->type != REDIS_REPLY_ARRAY) impl_->error("jobs", "unexpected reply shape");
  std::vector<JobInfo> out;
  out.reserve(r->elements);
  for (std::size_t i = 0; i < r->elements; ++i) out.push_back(impl_->job_info(r->element[i], Sid::jobs, false));
  return out;
}

AckStatus ValkeyBackend::requeue_dead(const BrandedId& id) {
  if (!id.well_formed() || id.kind() != impl_->kind) return AckStatus::gone;
  return or_read_only<AckStatus>([&] {
    Reply r = impl_->eval(Sid::requeue_dead, {impl_->job(id)}, {id.str()});
    return ack_status(impl_->integer(r.get(), Sid::requeue_dead));
  });
}

std::uint64_t ValkeyBackend::requeue_all_dead() {
  Reply r = impl_->eval(Sid::requeue_all_dead, {}, {});
  return std::uint64_t(impl_->integer(r.get(), Sid::requeue_all_dead));
}

std::uint64_t ValkeyBackend::purge_dead() {
  Reply r = impl_->eval(Sid::purge_dead, {}, {});
  return std::uint64_t(impl_->integer(r.get(), Sid::purge_dead));
}

std::vector<ProcessInfo> ValkeyBackend::processes() { return {}; }

BackendCapabilities ValkeyBackend::capabilities() const {
  BackendCapabilities c;
  c.process_records = false;  // Valkey keeps no record of its clients
  c.wait_histograms = false;  // only a lease's own waited_us
  c.fixed_capacity = false;   // server memory is the bound
  c.fsck = false;             // every transition is one atomic script
  return c;
}

// ---- lanes -------------------------------------------------------------------------

namespace {
// A lane control's script: ok, or read_only on a mirror's keyspace.
template <class F>
LaneStatus lane_call(F&& f) {
  return or_read_only<LaneStatus>([&] {
    f();
    return LaneStatus::ok;
  });
}
}  // namespace

LaneStatus ValkeyBackend::pause(const BrandedId& group) {
  const std::string_view g = group_name(group);
  if (g.empty()) return LaneStatus::invalid_group;
  return lane_call([&] { impl_->eval(Sid::pause, {impl_->lane(g)}, {g}); });
}

LaneStatus ValkeyBackend::resume(const BrandedId& group) {
  const std::string_view g = group_name(group);
  if (g.empty()) return LaneStatus::invalid_group;
  return lane_call([&] { impl_->eval(Sid::resume, {impl_->lane(g)}, {g}); });
}

LaneStatus ValkeyBackend::pause_all() {
  return lane_call([&] { impl_->eval(Sid::pause_all, {}, {}); });
}
LaneStatus ValkeyBackend::resume_all() {
  return lane_call([&] { impl_->eval(Sid::resume_all, {}, {}); });
}

LaneStatus ValkeyBackend::set_limit(const BrandedId& group, std::uint32_t limit) {
  if (limit < 1 || limit > kMaxLimit) return LaneStatus::invalid_argument;  // 0: EchoMQ refuses it; clear_limit clears
  const std::string_view g = group_name(group);
  if (g.empty()) return LaneStatus::invalid_group;
  const Num n(limit);
  return lane_call([&] { impl_->eval(Sid::limit, {impl_->lane(g)}, {g, n.sv()}); });
}

LaneStatus ValkeyBackend::clear_limit(const BrandedId& group) {
  const std::string_view g = group_name(group);
  if (g.empty()) return LaneStatus::invalid_group;
  return lane_call([&] { impl_->eval(Sid::clear_limit, {impl_->lane(g)}, {g}); });
}

LaneStatus ValkeyBackend::set_weight(const BrandedId& group, std::uint32_t weight) {
  if (weight < 1 || weight > kMaxWeight) return LaneStatus::invalid_argument;
  const std::string_view g = group_name(group);
  if (g.empty()) return LaneStatus::invalid_group;
  const Num w(weight);
  return lane_call([&] { impl_->eval(Sid::weight, {impl_->lane(g)}, {g, w.sv()}); });
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
  // Bounded as the segment bounds it (kMaxDelayMs a call): HINCRBY refuses
  // a number past 2^63, and a clock near it is past every number a script
  // keeps exactly (a Lua number is a double).
  const Num n(std::min(ms, kMaxDelayMs));
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
  for (std::size_t i = 0; i < ring->elements; ++i) {
    auto g = BrandedId::parse(text(ring->element[i]));
    if (g) s.ring.push_back(*g);
  }
  const redisReply* c = el(root, 3);
  // fairlane's counters, except completed and dead: EchoMQ's
  // metrics:completed / metrics:failed, which every client counts.
  std::uint64_t released = 0, stalled_dead = 0;
  std::uint64_t* fields[] = {&s.counters.enqueued, &s.counters.duplicates, &s.counters.claimed,
                             &s.counters.retried,  &s.counters.expired,    &s.counters.promoted,
                             &s.counters.drained,  &released,              &stalled_dead,
                             &s.counters.completed, &s.counters.dead};
  for (std::size_t i = 0; i < 11; ++i) *fields[i] = u64(el(c, i));
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
  s.lanes_live = s.lanes.size();
  s.lanes_capacity = 0;
  return s;
}

std::uint64_t ValkeyBackend::remove_queue() {
  Impl& m = *impl_;
  (void)m.eval(Sid::check_writable, {}, {});  // a mirror's keyspace is not ours to remove (ReadOnlyError)
  // Every key of the queue starts with "emq:{Q}:": the braces end the name,
  // so the keys of a queue whose name merely starts with Q never match.
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
    // One UNLINK per key, pipelined: a multi-key UNLINK would be one
    // command over keys that a reshard may have split between two nodes.
    std::vector<Args> dels;
    for (std::size_t i = 0; i < keys->elements; ++i) {
      const std::string_view k = text(keys->element[i]);
      if (k.substr(0, m.prefix.size()) != m.prefix) continue;
      dels.emplace_back().add("UNLINK").add(k);
    }
    for (const Reply& d : m.conn.pipeline(dels)) {
      if (d->type != REDIS_REPLY_INTEGER) m.error("remove_queue", d->type == REDIS_REPLY_ERROR ? text(d.get()) : "unexpected reply");
      removed += std::uint64_t(d->integer);
    }
  } while (cursor != "0");
  // Scripts stay cached on the server; our shas stay valid.
  return removed;
}

}  // namespace fairlane
