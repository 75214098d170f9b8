// Retry policies on the command line: parsing `--max-attempts` and
// `--backoff`, and showing a job's policy to people and scripts.
//
//   --backoff fixed:MS
//   --backoff exponential:BASE_MS[:CAP_MS[:FACTOR[:JITTER]]]
//
// CAP_MS defaults to 300000 (5 minutes), FACTOR to 2, JITTER to 0; the
// ranges are retry.hpp's (Backoff::valid): delays up to 2^32 - 1 ms, BASE_MS
// at most CAP_MS, FACTOR 1..1000, JITTER 0..1.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fairlane/retry.hpp"

namespace fairlane::cli {

// Throws cli::Failure naming --backoff and the field that is wrong.
Backoff parse_backoff(std::string_view text);

// "5 attempts, exponential 1.0 s..5m00s x2 jitter 0.5"; "-" for an empty policy.
std::string policy_text(const RetryPolicy& p);
// The backoff alone, in --backoff's own syntax: "exponential:1000:300000:2:0.5".
std::string backoff_spec(const Backoff& b);

// {"max_attempts": N|null, "backoff": {"kind", "base_ms", "cap_ms", "factor",
// "jitter", "spec"}|null}
nlohmann::json policy_json(const RetryPolicy& p);

}  // namespace fairlane::cli
