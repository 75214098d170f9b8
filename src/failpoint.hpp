// Named failpoints: places inside the multi-step transitions where a test
// can have the process SIGKILLed, to show that survivors recover from a
// death at exactly that step.
//
// They exist only in the test build of the library (the target
// fairlane_failpoints, compiled with FAIRLANE_FAILPOINTS); in the library
// users link, FAIRLANE_FAILPOINT(name) is nothing at all.
//
// Arming: failpoint_arm(name, nth, action) in the process (a forked test
// child), or the environment variable FAIRLANE_FAILPOINT=name[:nth][:stop],
// read at the first failpoint reached. The nth time the armed point is
// reached, the process raises SIGKILL (no handler, no destructor, no flush,
// as with a kill from outside), or with `stop` SIGSTOP: it stays inside its
// operation at that instruction until someone sends SIGCONT, then goes on.
// A test with threads can instead have a function called at a point
// (failpoint_call), to make another thread step in at exactly that place.
#pragma once

#include <cstddef>

#ifdef FAIRLANE_FAILPOINTS

namespace fairlane::detail {

enum class FailpointAction { kill, stop };
void failpoint_hit(const char* name) noexcept;
void failpoint_arm(const char* name, unsigned nth = 1, FailpointAction action = FailpointAction::kill) noexcept;

// In-process, for tests with threads: each time any thread reaches `name`
// (a failpoint, or a step point: a place only for this, listed in
// failpoint.cpp), `fn(arg)` runs there (the function decides what to do
// for which thread), until disarmed with fn = nullptr. Up to four points
// at once, each armed and disarmed while no thread can reach it.
// Independent of failpoint_arm.
void failpoint_call(const char* name, void (*fn)(void*), void* arg) noexcept;

// Every failpoint compiled into the library, in the order of the transitions.
extern const char* const kFailpoints[];
extern const std::size_t kFailpointCount;

}  // namespace fairlane::detail

#define FAIRLANE_FAILPOINT(name) ::fairlane::detail::failpoint_hit(name)

#else

#define FAIRLANE_FAILPOINT(name) ((void)0)

#endif
