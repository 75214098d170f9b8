// Error values for setup and administration calls.
//
// Setup (create, open, remove) fails in many ways a person must act on, so it
// returns Result<T>: either a value or an Error carrying an enum, the errno
// where one applies, and a sentence that says what happened. The hot path
// (enqueue, claim, complete, fail, extend) does not use this type: its
// expected outcomes are plain enum values and it never throws.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace fairlane {

enum class Errc {
  not_found = 1,      // no segment of that name
  already_exists,     // create() found a segment of that name; open_or_create() found one created with other settings
  wrong_layout,       // magic or layout version of another build
  truncated,          // the file is smaller than its header says
  not_initialized,    // its creator died (or is still working) before it was ready
  corrupt,            // header fields that cannot be right
  invalid_argument,   // an option or argument out of range
  permission_denied,  // the OS refused access
  system,             // any other OS error; see sys_errno
  busy,               // held by other live processes: a role (a second mirror), the segment
                      // (repair while others are attached), or every process record (open of a
                      // segment with `processes` attached: try again once one detaches, or
                      // create it with more)
  unavailable,        // a server (Valkey) could not be reached or refused the request
};

std::string_view to_string(Errc e) noexcept;

struct Error {
  Errc code{};
  int sys_errno = 0;      // errno of the failing call, 0 when none
  std::string message;    // one line, for a person
};

// What Result::value() throws when it holds an Error: what() is the
// error's message, error() the whole Error (code and errno included).
class ResultError : public std::runtime_error {
 public:
  explicit ResultError(Error e) : std::runtime_error(e.message), error_(std::move(e)) {}
  const Error& error() const noexcept { return error_; }
  Errc code() const noexcept { return error_.code; }

 private:
  Error error_;
};

// A value or an Error. Deliberately small: C++20 has no std::expected.
// value(), operator* and operator-> on an Error throw ResultError; error()
// on a value throws std::logic_error (a bug in the caller).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}             // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}         // NOLINT: implicit by design

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { check(); return std::get<0>(v_); }
  T&& value() && { check(); return std::get<0>(std::move(v_)); }
  const T& value() const& { check(); return std::get<0>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

  const Error& error() const& {
    if (ok()) throw std::logic_error("Result::error() called on a value");
    return std::get<1>(v_);
  }

 private:
  void check() const {
    if (!ok()) throw ResultError(std::get<1>(v_));
  }
  std::variant<T, Error> v_;
};

struct Unit {};
using Status = Result<Unit>;
inline Status ok_status() { return Unit{}; }

}  // namespace fairlane
