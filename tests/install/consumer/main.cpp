// Uses each public header of an installed fairlane: a job through a segment,
// a Backend over it, and a Valkey backend that cannot connect (which links
// the library's hiredis code, so the package must bring hiredis along).
#include <fairlane/backend.hpp>
#include <fairlane/ids.hpp>
#include <fairlane/mirror.hpp>
#include <fairlane/queue.hpp>
#include <fairlane/result.hpp>
#include <fairlane/retry.hpp>
#include <fairlane/valkey.hpp>
#include <fairlane/worker.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

int main() {
  const std::string name = "fl-install-consumer-" + std::to_string(::getpid());
  auto q = fairlane::Queue::open_or_create(name, {.jobs = 1024, .payload_bytes = 64});
  if (!q) {
    std::fprintf(stderr, "open_or_create: %s\n", q.error().message.c_str());
    return 1;
  }
  const auto tenant = fairlane::BrandedId::parse("CUS0KHTOWnGLuC");
  if (!tenant) return 1;
  const auto job = q->mint();
  const bool in = q->enqueue(*tenant, job, "payload") == fairlane::EnqueueStatus::enqueued;
  fairlane::Lease lease;
  const bool claimed = q->try_claim(lease, 1000) == fairlane::ClaimStatus::claimed && lease.id == job &&
                       lease.payload == "payload";
  const bool done = claimed && q->complete(lease.id, lease.token) == fairlane::AckStatus::ok;
  (void)fairlane::Queue::remove(name);
  // Port 1 on loopback: nothing listens there; the answer is an error, not a hang.
  auto v = fairlane::open_valkey("valkey://127.0.0.1:1/fl-install-consumer");
  std::printf("enqueued %d, claimed %d, completed %d, valkey refused %d\n", in, claimed, done, !v);
  return in && claimed && done && !v ? 0 : 1;
}
