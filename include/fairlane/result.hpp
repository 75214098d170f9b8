// Error values for setup and administration calls.
//
// Setup (create, open, remove) fails in many ways a person must act on, so it
// returns Result<T>: either a value or an Error carrying an enum, the errno
// where one applies, and a sentence that says what happened. The hot path
// (enqueue, claim, complete, fail, extend) does not use this type: its
// expected outcomes are plain enum values and it never throws.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace fairlane {

enum class Errc {
  not_found = 1,      // no segment of that name
  already_exists,     // create() found a segment of that name
  wrong_layout,       // magic or layout version of another build
  truncated,          // the file is smaller than its header says
  not_initialized,    // its creator died (or is still working) before it was ready
  corrupt,            // header fields that cannot be right
  invalid_argument,   // an option or argument out of range
  permission_denied,  // the OS refused access
  system,             // any other OS error; see sys_errno
  busy,               // the role is held by another live process (a second mirror)
  unavailable,        // a server (Valkey) could not be reached or refused the request
};

std::string_view to_string(Errc e) noexcept;

struct Error {
  Errc code{};
  int sys_errno = 0;      // errno of the failing call, 0 when none
  std::string message;    // one line, for a person
};

// A value or an Error. Deliberately small: C++20 has no std::expected.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}             // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}         // NOLINT: implicit by design

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T* operator->() { return &value(); }
  T& operator*() & { return value(); }

  const Error& error() const& { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

struct Unit {};
using Status = Result<Unit>;
inline Status ok_status() { return Unit{}; }

}  // namespace fairlane
