// Exit codes of the tool and the exception that carries a failure to main.
//
// Like redis-cli, the tool is meant for scripts: 0 is success, 1 is
// "nothing" (an empty claim, an unknown job or stale token), 2 is an error.
// Every non-zero exit prints one line on stderr, prefixed "fairlane: ".
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace fairlane::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitNothing = 1;
inline constexpr int kExitError = 2;

// Thrown by argument validation and by commands; main prints the message
// and exits with the code. Never thrown once a command has changed state,
// except to report what the library refused.
struct Failure {
  int code = kExitError;
  std::string message;
};

[[noreturn]] inline void fail(std::string message) { throw Failure{kExitError, std::move(message)}; }

// Prints "fairlane: <message>" on stderr and returns kExitNothing.
int nothing(std::string_view message);

}  // namespace fairlane::cli
