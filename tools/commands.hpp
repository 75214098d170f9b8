// The administration commands, one function each.
//
// Each takes its arguments as the text the user typed (main.cpp binds them
// with CLI11), validates all of it before touching a segment, and returns
// the exit code. Failures are thrown as cli::Failure.
#pragma once

#include <string>

namespace fairlane::cli {

struct CreateArgs {
  std::string segment, jobs, lanes, payload_bytes, processes, job_kind, mode, node;
  std::string mirror, durability, on_full, mirror_log, sync_timeout_ms, recovery_ms;
  std::string mirror_option;  // a mirror-only option given on the command line (empty: none)
  bool json = false;
};
struct SegmentArgs {  // tick, inspect, pause/resume without a group
  std::string segment;
  bool json = false;
};
struct DestroyArgs {
  std::string segment;
  bool force = false;  // remove even while live processes are attached
  bool json = false;
};
struct MintArgs {
  std::string segment, kind;  // kind empty: the job namespace
  bool json = false;
};
struct EnqueueArgs {
  std::string segment, group, job, payload, delay_ms;
  std::string wait_ms;                  // a full queue is waited out this long
  std::string payload_file;             // a file's bytes, "-" for stdin
  std::string max_attempts, backoff;    // the job's retry policy (empty: none)
  bool payload_set = false;             // --payload was given
  bool mint = false;
  bool json = false;
};
struct ClaimArgs {
  std::string segment, lease_ms, wait_ms;
  bool json = false;
};
struct AckArgs {  // complete, fail, extend, release
  std::string segment, job, token;
  std::string lease_ms;                           // extend
  std::string delay_ms, max_attempts, error;      // fail
  bool json = false;
};
struct LaneArgs {  // pause, resume, limit, weight, depth, drain
  std::string segment, group, value;  // group may be empty for pause/resume
  bool json = false;
};

int run_create(const CreateArgs& a);
int run_destroy(const DestroyArgs& a);
int run_mint(const MintArgs& a);
int run_enqueue(const EnqueueArgs& a);
int run_claim(const ClaimArgs& a);
int run_complete(const AckArgs& a);
int run_fail(const AckArgs& a);
int run_extend(const AckArgs& a);
int run_release(const AckArgs& a);
int run_pause(const LaneArgs& a, bool pause);
int run_limit(const LaneArgs& a);
int run_weight(const LaneArgs& a);
int run_depth(const LaneArgs& a);
int run_drain(const LaneArgs& a);
int run_tick(const SegmentArgs& a);
int run_inspect(const SegmentArgs& a);

}  // namespace fairlane::cli
