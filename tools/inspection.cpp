// Registration of the inspection commands (see inspection.hpp).
#include "inspection.hpp"

#include <CLI/CLI.hpp>

namespace fairlane::cli {

void InspectionCommands::add(const AddCommand& sub) {
  CLI::App* s = sub("watch", "live view of a segment: lanes, rates, waits, leases, processes (q quits)",
                    [this] { return run_watch(watch_); });
  s->add_option("SEG", watch_.segment, "segment name or valkey:// URL")->required();
  s->add_option("--interval", watch_.interval_ms, "refresh every MS milliseconds")->capture_default_str()->type_name("MS");
  s->add_flag("--once", watch_.once, "print one frame and exit (also when stdout is not a terminal)");

  s = sub("stats", "counters, lane gauges and wait histograms (--prometheus, or --listen to be scraped)",
          [this] { return run_stats(stats_); });
  s->add_option("SEG", stats_.segment, "segment name or valkey:// URL")->required();
  s->add_flag("--prometheus", stats_.prometheus, "Prometheus text exposition format");
  s->add_flag("--json", stats_.json, "print JSON");
  s->add_option("--output", stats_.output, "write to FILE atomically (temporary file + rename)")->type_name("FILE");
  s->add_option("--listen", stats_.listen, "serve /metrics over HTTP on HOST:PORT until SIGINT/SIGTERM")
      ->type_name("HOST:PORT");
  s->add_flag("--log-requests", stats_.log_requests, "with --listen: one line per request on stdout");
  s->add_option("--histograms", stats_.histograms,
                "per-group wait histograms: none, top:N (the N groups with the most claims) or all")
      ->capture_default_str()->type_name("WHICH");

  s = sub("dead", "dead letters: list [--json] | requeue ID | requeue --all | purge",
          [this] { return run_dead(dead_); });
  s->add_option("SEG", dead_.segment, "segment name or valkey:// URL")->required();
  s->add_option("ACTION", dead_.action, "list, requeue or purge")->required();
  s->add_option("ID", dead_.id, "job id (requeue)");
  s->add_flag("--all", dead_.all, "requeue every dead job");
  s->add_option("--limit", dead_.limit, "list at most N")->capture_default_str()->type_name("N");
  s->add_flag("--json", dead_.json, "print JSON");

  s = sub("jobs", "list jobs with their state, attempts, retry policy and age", [this] { return run_jobs(jobs_); });
  s->add_option("SEG", jobs_.segment, "segment name or valkey:// URL")->required();
  s->add_option("--group", jobs_.group, "only this lane (a group id or 'default')")->type_name("GROUP");
  s->add_option("--state", jobs_.state, "only pending, leased, scheduled or dead")->type_name("S");
  s->add_option("--limit", jobs_.limit, "at most N")->capture_default_str()->type_name("N");
  s->add_flag("--json", jobs_.json, "print JSON");

  s = sub("job", "show one job whole: state, attempts, token, retry policy, last error, ages, payload; exit 1 if none",
          [this] { return run_job(job_); });
  s->add_option("SEG", job_.segment, "segment name or valkey:// URL")->required();
  s->add_option("ID", job_.id, "job id")->required();
  s->add_flag("--json", job_.json, "print JSON (the payload JSON-escaped)");
  s->add_flag("--payload-only", job_.payload_only, "write the payload's raw bytes to stdout, nothing else");
}

}  // namespace fairlane::cli
