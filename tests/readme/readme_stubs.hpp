// The user code README.md's examples call but do not show: declared here so
// every ```cpp block of the README compiles as a translation unit of its own
// (cmake/ReadmeExamples.cmake). Stubs only: the examples are compiled, not
// run. Names are the README's.
#pragma once

#include <cstdio>
#include <stop_token>
#include <string_view>

#include <fairlane/backend.hpp>
#include <fairlane/queue.hpp>

// The consumer loop's condition.
inline bool running = true;

// What the consumer does with a job: true when it is done.
inline bool handle(const fairlane::BrandedId&, std::string_view) { return true; }

// The worker example's order service.
enum class Ship { ok, throttled, down };
inline bool valid(std::string_view) { return true; }
inline Ship ship(const fairlane::BrandedId&, std::string_view, const std::stop_token&) { return Ship::ok; }
