// `fairlane`: command-line parsing and dispatch.
//
// Every argument is bound as text and validated by the command itself
// (args.hpp), so messages are ours and uniform. Exit codes: 0 success,
// 1 nothing (empty claim, stale or gone job), 2 error; see cli_error.hpp.
#include <cstdio>
#include <exception>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli_error.hpp"
#include "commands.hpp"
#include "demo.hpp"
#include "fsck.hpp"
#include "inspection.hpp"
#include "mirror_cmd.hpp"
#include "fairlane/queue.hpp"

namespace {

using namespace fairlane::cli;

// One subcommand and what to run when it was chosen.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

class Parser {
 public:
  Parser() : app_("fairlane: a fair multi-tenant job queue in shared memory", "fairlane") {
    app_.require_subcommand(1);
    app_.footer(
        "Exit status: 0 success, 1 nothing (empty claim, unknown job or stale token; fsck: violations found), 2 error.\n"
        "GROUP is a branded id (e.g. TEN00000000001) or 'default'.\n"
        "SEG is a segment name; where its help says so, also a Valkey queue as valkey://HOST:PORT/QUEUE.\n"
        "Run 'fairlane demo' to watch a flooding tenant fail to starve the quiet ones.");
    add_admin();
    add_jobs();
    add_lanes();
    add_demo();
    inspection_.add([this](const char* name, const char* help, std::function<int()> run) {
      return sub(name, help, std::move(run));
    });
  }

  int main(int argc, char** argv) {
    // CLI11 would call an unknown command "A subcommand is required".
    if (argc >= 2 && argv[1][0] != '-') {
      std::string_view name = argv[1];
      bool known = false;
      for (const auto& c : commands_) known = known || c.app->get_name() == name;
      if (!known) {
        fmt::print(stderr, "fairlane: unknown command '{}' (see fairlane --help)\n", name);
        return kExitError;
      }
    }
    try {
      app_.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app_.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app_.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app_.exit(e);
    } catch (const CLI::ParseError& e) {
      fmt::print(stderr, "fairlane: {} (see fairlane --help)\n", e.what());
      return kExitError;
    }
    for (auto& c : commands_) {
      if (!c.app->parsed()) continue;
      refuse_empty(c.app);
      return c.run();
    }
    return kExitError;
  }

 private:
  CLI::App* sub(const char* name, const char* help, std::function<int()> run) {
    CLI::App* s = app_.add_subcommand(name, help);
    commands_.push_back(Command{s, std::move(run)});
    return s;
  }
  // SEG of a command that works on a segment or a Valkey queue alike.
  static void segment(CLI::App* s, std::string& into) {
    s->add_option("SEG", into, "segment name or valkey:// URL")->required();
  }
  // SEG of a command that works on a segment only (create, mirror, restore, fsck).
  static void segment_only(CLI::App* s, std::string& into) {
    s->add_option("SEG", into, "segment name")->required();
  }
  static void json(CLI::App* s, bool& into) { s->add_flag("--json", into, "print JSON"); }
  // Refuses an argument given as '' (a variable left unset in a script).
  // Many are held as strings that are empty when not given, where empty
  // means the default (restore's settings, create's and restore's
  // --mirror: none) or all (pause's and resume's GROUP: the whole queue),
  // so '' would pass for the argument left out. Only a payload and a fail's
  // error text may be empty.
  static void refuse_empty(const CLI::App* s) {
    for (const CLI::Option* o : s->get_options()) {
      const std::string& name = o->get_name();
      if (o->count() == 0 || name == "--payload" || name == "--error") continue;
      for (const std::string& v : o->results())
        if (v.empty()) fail(fmt::format("{}: {} given empty; nothing done", s->get_name(), name));
    }
  }
  // The first of `names` given on the command line, or "".
  static std::string given(const CLI::App* s, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (s->count(n) > 0) return n;
    return {};
  }

  void add_admin() {
    auto* s = sub("create", "create a segment", [this] {
      create_.mirror_option = given(app_.get_subcommand("create"), {"--durability", "--on-full", "--mirror-log", "--sync-timeout"});
      return run_create(create_);
    });
    fairlane::QueueOptions d;
    create_.jobs = std::to_string(d.jobs);
    create_.lanes = std::to_string(d.lanes);
    create_.payload_bytes = std::to_string(d.payload_bytes);
    create_.processes = std::to_string(d.processes);
    create_.job_kind = d.job_kind;
    create_.mode = "0600";
    create_.node = std::to_string(d.node);
    create_.recovery_ms = std::to_string(d.recovery_ms);
    segment_only(s, create_.segment);
    s->add_option("--jobs", create_.jobs, "job slots (pending+leased+scheduled+dead)")->capture_default_str()->type_name("N");
    s->add_option("--lanes", create_.lanes, "groups live at once (with a job or a setting)")->capture_default_str()->type_name("N");
    s->add_option("--payload-bytes", create_.payload_bytes, "largest payload of one job")->capture_default_str()->type_name("N");
    s->add_option("--processes", create_.processes, "processes attached at once (Queue handles; 1..4095)")
        ->capture_default_str()->type_name("N");
    s->add_option("--job-kind", create_.job_kind, "namespace of every job id")->capture_default_str()->type_name("KIND");
    s->add_option("--mode", create_.mode, "file mode, octal")->capture_default_str()->type_name("MODE");
    s->add_option("--node", create_.node, "snowflake node (0..1023) for mint")->capture_default_str()->type_name("N");
    s->add_option("--recovery-ms", create_.recovery_ms,
                  "recovery bound: how soon survivors recover after a dead process, ms")->capture_default_str()->type_name("MS");
    create_.durability = "async";
    create_.on_full = "refuse";
    create_.mirror_log = std::to_string(d.mirror_log);
    create_.sync_timeout_ms = std::to_string(d.sync_timeout_ms);
    s->add_option("--mirror", create_.mirror, "mirror every transition to valkey://HOST:PORT/QUEUE")->type_name("URL");
    s->add_option("--durability", create_.durability, "with --mirror: async, or sync: enqueue waits for Valkey")->capture_default_str()->type_name("MODE");
    s->add_option("--on-full", create_.on_full, "with --mirror: when the mirror log fills, refuse new jobs or drop the mirror")->capture_default_str()->type_name("POLICY");
    s->add_option("--mirror-log", create_.mirror_log, "with --mirror: transition log records (power of two)")->capture_default_str()->type_name("N");
    s->add_option("--sync-timeout", create_.sync_timeout_ms, "with --mirror, sync: longest wait for Valkey, ms")->capture_default_str()->type_name("MS");
    json(s, create_.json);

    s = sub("mirror", "ship a mirrored segment's transitions to Valkey until SIGINT/SIGTERM",
            [this] { return run_mirror(mirror_); });
    segment_only(s, mirror_.segment);
    s->add_option("--url", mirror_.url, "Valkey queue (default: the one the segment was created with)")->type_name("URL");
    s->add_option("--seconds", mirror_.seconds, "stop after S seconds (a fraction too: 0.5)")->type_name("S");
    s->add_flag("--quiet", mirror_.quiet, "no messages on stderr");

    s = sub("restore", "rebuild a segment from a Valkey queue (after a host restart)", [this] {
      restore_.mirror_option = given(app_.get_subcommand("restore"), {"--durability", "--on-full"});
      return run_restore(restore_);
    });
    segment_only(s, restore_.segment);
    s->add_option("--from", restore_.from, "valkey://HOST:PORT/QUEUE")->required()->type_name("URL");
    s->add_option("--jobs", restore_.jobs, "job slots (default 65536)")->type_name("N");
    s->add_option("--lanes", restore_.lanes, "lanes (default 4096)")->type_name("N");
    s->add_option("--payload-bytes", restore_.payload_bytes, "default: the queue's max payload")->type_name("N");
    s->add_option("--job-kind", restore_.job_kind, "default: the queue's job kind")->type_name("KIND");
    s->add_option("--mode", restore_.mode, "file mode, octal")->type_name("MODE");
    s->add_option("--mirror", restore_.mirror, "mirror the new segment (usually the same URL)")->type_name("URL");
    s->add_option("--durability", restore_.durability, "with --mirror: async or sync (no --mirror: what Valkey kept)")->type_name("MODE");
    s->add_option("--on-full", restore_.on_full, "with --mirror: refuse or drop (no --mirror: what Valkey kept)")->type_name("POLICY");
    json(s, restore_.json);

    s = sub("destroy", "remove a segment (refused while processes are attached), or every key of a Valkey queue",
            [this] { return run_destroy(destroy_); });
    segment(s, destroy_.segment);
    s->add_flag("--force", destroy_.force,
                "remove a segment even while live processes are attached to it (a Valkey queue: even if it is a "
                "segment's mirror)");
    json(s, destroy_.json);

    s = sub("inspect", "show config, counters, the ring and every lane", [this] { return run_inspect(seg_); });
    segment(s, seg_.segment);
    json(s, seg_.json);

    s = sub("fsck", "check every invariant of a segment against its job slots (exit 1: violations)", [this] {
      // By value, as --json: '--repair=no' is no repair (read as given, it
      // repaired), '--repair=banana' an error.
      if (fsck_force_ && !fsck_repair_) fail("--force requires --repair (see fairlane --help)");
      return run_fsck(seg_.segment, seg_.json, fsck_repair_, fsck_force_);
    });
    segment_only(s, seg_.segment);
    json(s, seg_.json);
    CLI::Option* repair =
        s->add_flag("--repair", fsck_repair_, "rebuild what is derived from the job slots (exit 1: repaired)");
    s->add_flag("--force", fsck_force_, "repair even while other processes are attached (they must be idle)")->needs(repair);

    s = sub("tick", "promote due jobs and reap expired leases now; prints how many moved",
            [this] { return run_tick(seg_); });
    segment(s, seg_.segment);
    json(s, seg_.json);

    s = sub("mint", "print a fresh id (default: of the job namespace)", [this] { return run_mint(mint_); });
    segment(s, mint_.segment);
    s->add_option("KIND", mint_.kind, "namespace, three letters A-Z");
    json(s, mint_.json);
  }

  void add_jobs() {
    auto* s = sub("enqueue", "admit a job: prints 'enqueued ID' or 'duplicate ID'", [this] {
      enqueue_.payload_set = app_.get_subcommand("enqueue")->count("--payload") > 0;
      return run_enqueue(enqueue_);
    });
    enqueue_.delay_ms = "0";
    segment(s, enqueue_.segment);
    s->add_option("GROUP", enqueue_.group, "tenant group, or 'default'")->required();
    s->add_option("JOBID", enqueue_.job, "job id (or --mint)");
    s->add_flag("--mint", enqueue_.mint, "mint a fresh job id");
    s->add_option("--payload", enqueue_.payload, "payload text")->type_name("TEXT");
    s->add_option("--payload-file", enqueue_.payload_file, "payload: the bytes of FILE ('-': stdin), binary-safe")
        ->type_name("FILE");
    s->add_option("--delay", enqueue_.delay_ms, "not claimable for MS milliseconds")->capture_default_str()->type_name("MS");
    enqueue_.wait_ms = "0";
    s->add_option("--wait", enqueue_.wait_ms, "a full queue, no lane free or a full mirror log: wait up to MS for room")
        ->capture_default_str()
        ->type_name("MS");
    s->add_option("--max-attempts", enqueue_.max_attempts, "deliveries before the job is dead-lettered (1..65535)")
        ->type_name("N");
    s->add_option("--backoff", enqueue_.backoff,
                  "delay before a retry: fixed:MS or exponential:BASE_MS[:CAP_MS[:FACTOR[:JITTER]]]")
        ->type_name("SPEC");
    json(s, enqueue_.json);

    s = sub("claim", "lease a job: prints 'ID GROUP TOKEN PAYLOAD'; exit 1 when none",
            [this] { return run_claim(claim_); });
    claim_.lease_ms = "30000";
    claim_.wait_ms = "0";
    segment(s, claim_.segment);
    s->add_option("--lease", claim_.lease_ms, "lease length in ms")->capture_default_str()->type_name("MS");
    s->add_option("--wait", claim_.wait_ms, "wait up to MS for a job")->capture_default_str()->type_name("MS");
    json(s, claim_.json);

    s = sub("complete", "acknowledge a leased job; exit 1 if stale or gone", [this] { return run_complete(ack_); });
    ack_positionals(s);

    s = sub("release", "hand a lease back: the job returns to its lane at once, its attempt count unchanged",
            [this] { return run_release(ack_); });
    ack_positionals(s);

    s = sub("fail", "fail a leased job: prints 'retrying ID' or 'dead ID'", [this] { return run_fail(ack_); });
    s->footer(
        "The job is dead-lettered (and --delay unused) once its attempt reaches its max attempts: --max-attempts,\n"
        "else the job's own policy (enqueue --max-attempts), else the queue's default, 1 attempt unless the queue\n"
        "was created with another. So a job enqueued without a policy is dead-lettered by its first fail; give\n"
        "--max-attempts here (or at enqueue) for a retry.");
    ack_positionals(s);
    s->add_option("--delay", ack_.delay_ms,
                  "backoff before the retry, ms (default: the job's policy, then the queue's); unused when the job is "
                  "dead-lettered")
        ->type_name("MS");
    s->add_option("--max-attempts", ack_.max_attempts,
                  "dead-letter once the attempt reaches this (default: the job's policy, then the queue's: 1 "
                  "unless the queue was created with another)")
        ->type_name("N");
    s->add_option("--error", ack_.error, "error text kept with the job")->type_name("TEXT");

    s = sub("extend", "extend a lease by MS from now", [this] { return run_extend(ack_); });
    segment(s, ack_.segment);
    s->add_option("ID", ack_.job, "job id")->required();
    s->add_option("TOKEN", ack_.token, "the lease's token, as claim printed it")->required();
    s->add_option("MS", ack_.lease_ms, "new lease length in ms")->required();
    json(s, ack_.json);
  }

  void ack_positionals(CLI::App* s) {
    segment(s, ack_.segment);
    s->add_option("ID", ack_.job, "job id")->required();
    s->add_option("TOKEN", ack_.token, "the lease's token, as claim printed it")->required();
    json(s, ack_.json);
  }

  void add_lanes() {
    auto* s = sub("pause", "pause a lane, or the whole queue without GROUP", [this] { return run_pause(lane_, true); });
    segment(s, lane_.segment);
    s->add_option("GROUP", lane_.group, "tenant group, or 'default'");
    json(s, lane_.json);

    s = sub("resume", "resume a lane, or the whole queue without GROUP", [this] { return run_pause(lane_, false); });
    segment(s, lane_.segment);
    s->add_option("GROUP", lane_.group, "tenant group, or 'default'");
    json(s, lane_.json);

    s = sub("limit", "cap a lane's jobs in flight (N, or 'none')", [this] { return run_limit(lane_); });
    lane_group(s);
    s->add_option("N", lane_.value, "1..131071, or 'none' to clear the limit")->required();

    s = sub("weight", "claims a lane gets per turn of the rotation (claim and claim_batch)", [this] { return run_weight(lane_); });
    lane_group(s);
    s->add_option("W", lane_.value, "1..1000")->required();

    s = sub("depth", "print a lane's pending count", [this] { return run_depth(lane_); });
    lane_group(s);

    s = sub("drain", "remove a lane's pending jobs; prints how many", [this] { return run_drain(lane_); });
    lane_group(s);
  }

  void lane_group(CLI::App* s) {
    segment(s, lane_.segment);
    s->add_option("GROUP", lane_.group, "tenant group, or 'default'")->required();
    json(s, lane_.json);
  }

  void add_demo() {
    auto* s = sub("demo", "run the fairness demo on its own segment (no server needed)",
                  [this] { return run_demo(demo_); });
    s->add_option("--seconds", demo_.seconds, "how long the producers run")->capture_default_str()->type_name("S");
    s->add_option("--segment", demo_.segment, "segment name (default: fairlane-demo-<pid>)")->type_name("NAME");
    s->add_option("--consumers", demo_.consumers, "consumer processes")->capture_default_str()->type_name("N");
    s->add_option("--work-us", demo_.work_us, "CPU each job costs a consumer, us")->capture_default_str()->type_name("US");
    json(s, demo_.json);

    // The demo's children: hidden from --help.
    s = sub("demo-producer", "demo child: enqueue for one tenant", [this] { return run_demo_producer(producer_); });
    s->group("");
    s->add_option("SEG", producer_.segment)->required();
    s->add_option("GROUP", producer_.group)->required();
    s->add_option("RATE", producer_.rate, "jobs/s or 'max'")->required();
    s->add_option("SECONDS", producer_.seconds)->required();
    s->add_option("--backlog", producer_.backlog);
    s->add_option("--results", producer_.results)->required();

    s = sub("demo-consumer", "demo child: claim, work, complete", [this] { return run_demo_consumer(consumer_); });
    s->group("");
    s->add_option("SEG", consumer_.segment)->required();
    s->add_option("SECONDS", consumer_.seconds)->required();
    s->add_option("--work-us", consumer_.work_us)->type_name("US");
    s->add_option("--results", consumer_.results)->required();
  }

  CLI::App app_;
  std::vector<Command> commands_;
  CreateArgs create_;
  MirrorArgs mirror_;
  RestoreArgs restore_;
  SegmentArgs seg_;
  bool fsck_repair_ = false, fsck_force_ = false;
  DestroyArgs destroy_;
  MintArgs mint_;
  EnqueueArgs enqueue_;
  ClaimArgs claim_;
  AckArgs ack_;
  LaneArgs lane_;
  DemoArgs demo_;
  ProducerArgs producer_;
  ConsumerArgs consumer_;
  InspectionCommands inspection_;  // watch, stats, dead, jobs
};

}  // namespace

int main(int argc, char** argv) {
  try {
    Parser parser;
    return parser.main(argc, argv);
  } catch (const Failure& f) {
    std::fflush(stdout);
    fmt::print(stderr, "fairlane: {}\n", f.message);
    return f.code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "fairlane: internal error: {}\n", e.what());
    return kExitError;
  }
}
