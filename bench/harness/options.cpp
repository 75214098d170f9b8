#include "options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "peer.hpp"

namespace fairlane::bench {

const char* to_string(Topology t) noexcept {
  return t == Topology::threads ? "threads" : "processes";
}

const char* to_string(Placement p) noexcept {
  switch (p) {
    case Placement::split: return "split";
    case Placement::shared: return "shared";
    case Placement::os: return "os";
  }
  return "?";
}

const char* to_string(Mode m) noexcept {
  switch (m) {
    case Mode::flow: return "flow";
    case Mode::bare: return "bare";
    case Mode::batch: return "batch";
  }
  return "?";
}

std::vector<std::string> default_peers() {
  return {"fairlane",      "fairlane/threads", "mutex-shm",     "boost-mq",      "moodycamel", "valkey",
          "fairlane@2x2",  "mutex-shm@2x2",    "bare:fairlane", "bare:boost-mq", "batch:fairlane"};
}

namespace {
std::vector<std::string> bare_peers() { return {"bare:fairlane", "bare:boost-mq"}; }
}  // namespace

bool parse_spec(const std::string& text, PeerSpec& out, std::string& error) {
  PeerSpec s;
  std::string rest = text;
  if (auto colon = rest.find(':'); colon != std::string::npos) {
    const std::string m = rest.substr(0, colon);
    if (m == "bare") s.mode = Mode::bare;
    else if (m == "batch") s.mode = Mode::batch;
    else if (m == "flow") s.mode = Mode::flow;
    else { error = "unknown mode '" + m + "' in '" + text + "' (flow, bare or batch)"; return false; }
    rest = rest.substr(colon + 1);
  }
  if (auto at = rest.find('@'); at != std::string::npos) {
    const std::string t = rest.substr(at + 1);
    const auto x = t.find('x');
    std::uint32_t p = 0, c = 0;
    auto num = [](std::string_view v, std::uint32_t& n) {
      auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      return ec == std::errc() && ptr == v.data() + v.size() && n > 0;
    };
    if (x == std::string::npos || !num(std::string_view(t).substr(0, x), p) || !num(std::string_view(t).substr(x + 1), c)) {
      error = "bad topology '@" + t + "' in '" + text + "' (@PxC, e.g. @2x2)";
      return false;
    }
    s.producers = p;
    s.consumers = c;
    rest = rest.substr(0, at);
  }
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    s.topology = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (s.topology != "threads" && s.topology != "processes") {
      error = "unknown topology '" + s.topology + "' in '" + text + "' (threads or processes)";
      return false;
    }
  }
  if (rest.empty()) { error = "no peer name in '" + text + "'"; return false; }
  s.name = rest;
  out = s;
  return true;
}

void print_usage(const char* argv0) {
  std::fprintf(stderr,
R"(usage: %s [options]

Runs producers and consumers of each peer (fork + exec of this binary, or
threads in one process) and reports claim+complete throughput, claim and
enqueue-to-claim latency, parked-consumer wake-up latency, fairness over
backlogged lanes, and peak memory.

  --peers LIST         comma-separated runs, each [mode:]name[/threads][@PxC];
                       default: fairlane,fairlane/threads,mutex-shm,boost-mq,
                       moodycamel,valkey,fairlane@2x2,mutex-shm@2x2,
                       bare:fairlane,bare:boost-mq,batch:fairlane
                       name/threads or name/processes picks the topology;
                       @PxC runs P producers and C consumers (overrides -p, -c);
                       mode bare: the bare flow (below); mode batch: fills and
                       drains with single calls, then with batch calls
  --bare               only the bare flow: --peers bare:fairlane,bare:boost-mq
  --bare-jobs N        bare flow: jobs each producer sends, default 2000000
                       (--quick 200000); the consumers claim and complete them
                       all, lanes in turn, no per-operation timing
  --bare-work-ns N     bare flow: nanoseconds a consumer spends on each job,
                       between its claim and its complete (a spin on the
                       clock), default 0. Consumers slower than the producers
                       keep the queue full: the producers' `full` path. The
                       bare flow target is not judged with work (info)
  --bare-blocking      bare flow: full and empty are waited out in the peers'
                       blocking calls (fairlane enqueue_wait and claim_wait,
                       Boost timed_send and timed_receive; other peers still
                       retry) rather than retried with a backoff. The target
                       is not judged (info)
  --bare-rounds N      bare flow: runs of each bare peer, 1..50, default 5
                       (--quick 1), taken in turn (fairlane, boost-mq,
                       fairlane, ...): the target is judged on the median of
                       the rounds' ratios, so that a host that changes pace
                       between two runs does not decide it
  --flow-rounds N      flow: runs of fairlane and mutex-shm (processes, one
                       producer and one consumer), 1..50, default 5 (--quick
                       1), taken in turn: the first is the full run, the
                       others the flow alone (no drain, no wake-ups); the
                       flow target is judged on the median of the rounds'
                       ratios, as the bare flow's is
  --batch N            batch mode: jobs per batch call, default 32
  --capacity N         jobs the queue holds (bare flow: the same for every
                       peer, default the backlog rounded up to a power of 2)
  --cycle-json FILE    the cycle counter's report (bench/cycle/count.sh --json
                       FILE; ./run.sh bench writes it): judged against the
                       cycle budget in the targets
  --cycle-peer-json FILE
                       the same count of the mutex peer (count.sh --peer
                       mutex --json FILE; ./run.sh bench writes it): shown
                       beside the budget's line for reference, not judged
  --placement P        where the workers run: split (default; producer i on
                       allowed CPU i mod n, consumer j on CPU (producers + j)
                       mod n: one producer and one consumer on two CPUs run
                       apart), shared (all on the first allowed CPU) or os
                       (no pinning). The Valkey server is never pinned
  -p, --producers N    producer processes (threads), default 1
  -c, --consumers N    consumer processes (threads), default 1
  --lanes N            tenants, default 100
  --skew S             Zipf exponent of the tenants' shares, default 1.0 (0 = even)
  --payload BYTES      job payload, >= 16, default 64
  --duration SECONDS   measured time per peer, default 5
  --warmup SECONDS     unmeasured time before it, default 1
  --backlog N          flow: cap on enqueued-but-unclaimed jobs, default 8192
  --drain-jobs N       drain: jobs to pre-fill before timing the consumers
                       alone, default 100000 (0: no fill)
  --fill-seconds S     drain: longest fill, default 2 (slow peers get fewer jobs)
  --drain-rounds N     fill+drain rounds, 0..4 (0: no drain), default 2; the
                       last is reported, the first (a fresh segment) also as
                       "cold"
  --wake-rounds N      parked-consumer wake-ups to time, default 200 (0: skip)
  --sample K           time one claim in K (1: every claim), default 1
  --trace N            served-sequence records per consumer, default 1048576
  --window N           fairness window in claims, default max(1000, 4 * lanes)
  --valkey-consumers L consumer connections to try for valkey, default 1,2,4,8
  --redis-server PATH  default %s
  --seed N             lane-choice seed
  --quick              about one second per peer (CI smoke); prints the figures
                       and does not judge the targets
  --json               JSON on stdout instead of the table
  --json-file FILE     also write the JSON to FILE
  --trace-dir DIR      write the recorded served sequences (flow, drain) as CSV
  --chart DIR          PNG charts via gnuplot into DIR
  --no-progress        no progress lines on stderr
  --list               list the peers and exit
)",
               argv0, FAIRLANE_BENCH_REDIS_SERVER);
}

namespace {

template <class T>
bool parse_num(std::string_view s, T& out) {
  if constexpr (std::is_floating_point_v<T>) {
    std::string tmp(s);
    char* end = nullptr;
    double v = std::strtod(tmp.c_str(), &end);
    // strtod reads "nan" and "inf": a duration of either never ends (the
    // harness turns seconds into integer nanoseconds).
    if (end == tmp.c_str() || *end != '\0' || !std::isfinite(v)) return false;
    out = static_cast<T>(v);
    return true;
  } else {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  }
}

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    auto c = s.find(',');
    auto part = s.substr(0, c);
    if (!part.empty()) out.emplace_back(part);
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return out;
}

}  // namespace

std::optional<Options> parse_options(int argc, char** argv, std::string& error) {
  Options o;
  bool peers_set = false, bare_jobs_set = false, bare_rounds_set = false, flow_rounds_set = false, duration_set = false, warmup_set = false, rounds_set = false,
       trace_set = false, vk_set = false, drain_set = false, fill_set = false, rounds_d_set = false;
  auto& p = o.params;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    std::string_view v;
    auto eq = a.find('=');
    bool has_eq = a.rfind("--", 0) == 0 && eq != std::string_view::npos;
    if (has_eq) { v = a.substr(eq + 1); a = a.substr(0, eq); }
    auto need = [&]() -> bool {
      if (has_eq && v.empty()) { error = std::string(a) + " given empty"; return false; }
      if (has_eq) return true;
      if (i + 1 >= argc) { error = std::string(a) + " needs a value"; return false; }
      v = argv[++i];
      // No option takes '' (a variable left unset): --json-file '' wrote no
      // file and --cycle-json '' judged no budget, both silently.
      if (v.empty()) { error = std::string(a) + " given empty"; return false; }
      return true;
    };
    auto num = [&](auto& out) -> bool {
      if (!need()) return false;
      if (!parse_num(v, out)) { error = std::string(a) + ": not a number: " + std::string(v); return false; }
      return true;
    };
    if (a == "-h" || a == "--help") { print_usage(argv[0]); std::exit(0); }
    else if (a == "--peers") { if (!need()) return {}; o.peers = split(v); peers_set = true; }
    else if (a == "--bare") { o.peers = bare_peers(); peers_set = true; }
    else if (a == "--bare-jobs") { if (!num(p.bare_jobs)) return {}; bare_jobs_set = true; }
    else if (a == "--bare-work-ns") { if (!num(p.bare_work_ns)) return {}; }
    else if (a == "--bare-blocking") { p.bare_blocking = 1; }
    else if (a == "--bare-rounds") { if (!num(o.bare_rounds)) return {}; bare_rounds_set = true; }
    else if (a == "--flow-rounds") { if (!num(o.flow_rounds)) return {}; flow_rounds_set = true; }
    else if (a == "--batch") { if (!num(p.batch)) return {}; }
    else if (a == "--capacity") { if (!num(p.capacity)) return {}; }
    else if (a == "--cycle-json") { if (!need()) return {}; o.cycle_json = std::string(v); }
    else if (a == "--cycle-peer-json") { if (!need()) return {}; o.cycle_peer_json = std::string(v); }
    else if (a == "--placement") {
      if (!need()) return {};
      if (v == "split") p.placement = Placement::split;
      else if (v == "shared") p.placement = Placement::shared;
      else if (v == "os") p.placement = Placement::os;
      else { error = "--placement: " + std::string(v) + " is not split, shared or os"; return {}; }
    }
    else if (a == "-p" || a == "--producers") { if (!num(p.producers)) return {}; }
    else if (a == "-c" || a == "--consumers") { if (!num(p.consumers)) return {}; }
    else if (a == "--lanes") { if (!num(p.lanes)) return {}; }
    else if (a == "--skew") { if (!num(p.skew)) return {}; }
    else if (a == "--payload") { if (!num(p.payload)) return {}; }
    else if (a == "--duration") { if (!num(o.duration_s)) return {}; duration_set = true; }
    else if (a == "--warmup") { if (!num(o.warmup_s)) return {}; warmup_set = true; }
    else if (a == "--backlog") { if (!num(p.backlog)) return {}; }
    else if (a == "--drain-jobs") { if (!num(p.drain_jobs)) return {}; drain_set = true; }
    else if (a == "--fill-seconds") { if (!num(o.fill_s)) return {}; fill_set = true; }
    else if (a == "--drain-rounds") { if (!num(p.drain_rounds)) return {}; rounds_d_set = true; }
    else if (a == "--wake-rounds") { if (!num(p.wake_rounds)) return {}; rounds_set = true; }
    else if (a == "--sample") { if (!num(p.sample)) return {}; }
    else if (a == "--trace") { if (!num(p.trace_cap)) return {}; trace_set = true; }
    else if (a == "--window") { if (!num(o.window)) return {}; }
    else if (a == "--seed") { if (!num(p.seed)) return {}; }
    else if (a == "--valkey-consumers") {
      if (!need()) return {};
      o.valkey_consumers.clear();
      for (auto& s : split(v)) {
        std::uint32_t n = 0;
        if (!parse_num(std::string_view(s), n) || n == 0) { error = "--valkey-consumers: bad count " + s; return {}; }
        o.valkey_consumers.push_back(n);
      }
      vk_set = true;
    }
    else if (a == "--redis-server") { if (!need()) return {}; o.redis_server = std::string(v); }
    else if (a == "--quick") { o.quick = true; }
    else if (a == "--json") { o.json = true; }
    else if (a == "--trace-dir") { if (!need()) return {}; o.trace_dir = std::string(v); }
    else if (a == "--json-file") { if (!need()) return {}; o.json_file = std::string(v); }
    else if (a == "--chart") { if (!need()) return {}; o.chart_dir = std::string(v); }
    else if (a == "--no-progress") { o.progress = false; }
    else if (a == "--list") { o.list = true; }
    else { error = "unknown argument: " + std::string(argv[i]); return {}; }
  }
  if (!peers_set) o.peers = default_peers();
  if (o.quick) {
    if (!duration_set) o.duration_s = 0.6;
    if (!warmup_set) o.warmup_s = 0.2;
    if (!rounds_set) p.wake_rounds = 20;
    if (!trace_set) p.trace_cap = 1u << 18;
    if (!vk_set) o.valkey_consumers = {2};
    if (!drain_set) p.drain_jobs = 20000;
    if (!fill_set) o.fill_s = 0.3;
    if (!rounds_d_set) p.drain_rounds = 1;
    if (!bare_jobs_set) p.bare_jobs = 200'000;
    if (!bare_rounds_set) o.bare_rounds = 1;
    if (!flow_rounds_set) o.flow_rounds = 1;
  }
  if (o.bare_rounds == 0 || o.bare_rounds > 50) { error = "--bare-rounds must be 1..50"; return {}; }
  if (o.flow_rounds == 0 || o.flow_rounds > 50) { error = "--flow-rounds must be 1..50"; return {}; }
  if (p.bare_jobs == 0) { error = "--bare-jobs must be >= 1"; return {}; }
  if (p.bare_work_ns > 1'000'000'000) { error = "--bare-work-ns must be at most 1000000000 (1 s)"; return {}; }
  if (p.batch == 0 || p.batch > 4096) { error = "--batch must be 1..4096"; return {}; }
  if (p.producers == 0 || p.consumers == 0) { error = "need at least one producer and one consumer"; return {}; }
  // In 64 bits: -p 4294967295 -c 1 adds up to 0 in 32.
  if (std::uint64_t(p.producers) + p.consumers > 256) { error = "at most 256 workers"; return {}; }
  for (auto& spec : o.peers) {
    PeerSpec ps;
    if (!parse_spec(spec, ps, error)) return {};
    if (std::uint64_t(ps.producers) + ps.consumers > 256) { error = "at most 256 workers: " + spec; return {}; }
    // A misspelt peer is a usage error now, not a failed run after the peers before it.
    const auto names = peer_names();
    if (std::find(names.begin(), names.end(), ps.name) == names.end()) {
      error = "unknown peer '" + ps.name + "' in '" + spec + "' (--list names them)";
      return {};
    }
  }
  // fairlane's segment holds at most 2^21 - 2 lanes, the harness's and the default one.
  if (p.lanes == 0 || p.lanes > (1u << 21) - 3) { error = "--lanes must be 1..2097149"; return {}; }
  if (p.payload < 16) { error = "--payload must be >= 16 (the timing stamp)"; return {}; }
  if (p.payload > (1u << 20)) { error = "--payload must be <= 1 MiB"; return {}; }
  if (p.skew < 0) { error = "--skew must be >= 0"; return {}; }
  // Bounded as --drain-jobs is: the peers size their queues from it by doubling,
  // which never ended above 2^63 (and ignored SIGTERM while at it).
  if (p.backlog == 0 || p.backlog > (1ULL << 26)) { error = "--backlog must be 1..2^26"; return {}; }
  // fairlane's segment takes a uint32_t count (4294967297 became 1 job) of at
  // most 2^26 - 2 (kMaxJobs): a larger one passed here and failed the run later.
  if (p.capacity > (1ULL << 26) - 2) { error = "--capacity must be <= 67108862 (2^26 - 2, fairlane's largest queue)"; return {}; }
  if (p.sample == 0) { error = "--sample must be >= 1 (1: every claim)"; return {}; }
  if (p.drain_jobs > (1ULL << 26)) { error = "--drain-jobs must be <= 2^26"; return {}; }
  if (p.drain_rounds > 4) { error = "--drain-rounds must be 0..4"; return {}; }
  if (p.drain_jobs == 0) p.drain_rounds = 0;
  if (p.drain_rounds == 0) p.drain_jobs = 0;
  p.fair_round = p.drain_rounds > 0 ? 1 : 0;
  if (o.fill_s < 0) { error = "--fill-seconds must be >= 0"; return {}; }
  if (o.duration_s <= 0 || o.warmup_s < 0) { error = "--duration must be > 0 and --warmup >= 0"; return {}; }
  if (o.peers.empty()) { error = "--peers is empty"; return {}; }
  return o;
}

}  // namespace fairlane::bench
