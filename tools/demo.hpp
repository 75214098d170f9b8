// `fairlane demo`: a flood of jobs from one tenant does not starve the
// quiet ones.
//
// The parent creates a fresh segment, spawns consumer and producer
// processes (this binary again, hidden subcommands demo-consumer and
// demo-producer), prints per-tenant progress every second from snapshots,
// then gathers the children's result files and prints a summary with a
// verdict computed from the measurements. The segment is removed at the
// end, also on Ctrl-C.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fairlane::cli {

// One tenant of the demo. Groups are fixed branded ids so a second terminal
// can `fairlane inspect` the demo segment and recognise them.
struct Tenant {
  std::string_view name;   // for people
  std::string_view group;  // branded id
  std::uint64_t rate;      // jobs per second; 0: as fast as it can
  std::uint64_t backlog;   // with rate 0: stop adding above this depth
};

inline constexpr Tenant kTenants[] = {
    {"flood", "TEN00000000001", 0, 16000},
    {"steady", "TEN00000000002", 3000, 0},
    {"trickle", "TEN00000000003", 20, 0},
};

struct DemoArgs {
  std::string seconds = "8", segment, consumers = "2", work_us = "30";
  bool json = false;
};
struct ProducerArgs {
  std::string segment, group, rate, seconds, backlog = "0", results;
};
struct ConsumerArgs {
  std::string segment, seconds, work_us = "30", results;
};

int run_demo(const DemoArgs& a);
int run_demo_producer(const ProducerArgs& a);
int run_demo_consumer(const ConsumerArgs& a);

}  // namespace fairlane::cli
