// One hiredis connection with the backend's reconnect policy.
//
// Not thread-safe (neither is a redisContext). Every command is sent with
// redisCommandArgv, so payloads and ids are binary-safe and never formatted.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fairlane/valkey.hpp"

struct redisContext;
struct redisReply;

namespace fairlane::valkey {

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept;
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* c) const noexcept;
};

// The arguments of one command. Views are kept as given (the caller keeps
// the bytes alive until send); numbers are formatted into owned strings that
// do not move (a deque never relocates its elements).
class Args {
 public:
  Args() = default;
  // Not copyable: a copy's views would point into the original's strings.
  // Moving keeps every string where it is (a deque's move takes its blocks).
  Args(const Args&) = delete;
  Args& operator=(const Args&) = delete;
  Args(Args&&) = default;
  Args& operator=(Args&&) = default;
  Args& add(std::string_view s) {
    v_.push_back(s);
    return *this;
  }
  Args& add_num(std::uint64_t n) {
    own_.push_back(std::to_string(n));
    v_.push_back(own_.back());
    return *this;
  }
  Args& add_double(double d);
  void clear() {
    v_.clear();
    own_.clear();
  }
  const std::vector<std::string_view>& views() const noexcept { return v_; }

 private:
  std::vector<std::string_view> v_;
  std::deque<std::string> own_;
};

class Connection {
 public:
  Connection(std::string host, int port, const ValkeyOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects with the reconnect policy. Returns "" or why it failed
  // ("valkey 127.0.0.1:6390 unreachable: Connection refused").
  std::string connect();

  // Sends one command and reads its reply. On an I/O error (dropped
  // connection, no reply within the command timeout) reconnects with
  // backoff and sends it once more. Throws BackendError when the server
  // stays away. An error *reply* is returned, not thrown.
  Reply command(const Args& args);

  // As command, for a command that blocks on the server up to `block`
  // (BLPOP): the socket timeout is stretched by that much meanwhile.
  Reply blocking_command(const Args& args, std::chrono::milliseconds block);

  // Sends every command, then reads every reply (one round trip). No
  // resend: on an I/O error the connection is dropped and BackendError is
  // thrown; the caller decides whether the commands are safe to send again.
  // Connects first (with the reconnect policy) if not connected.
  std::vector<Reply> pipeline(const std::vector<Args>& commands);

  // "host:port"
  const std::string& address() const noexcept { return address_; }

 private:
  std::string try_connect();  // one attempt; "" or why not
  Reply send_once(const Args& args, std::string& io_error);
  void set_timeout(std::chrono::milliseconds t);

  std::string host_;
  int port_;
  std::string address_;
  ValkeyOptions options_;
  std::unique_ptr<redisContext, ContextDeleter> ctx_;
  std::vector<const char*> argv_;
  std::vector<std::size_t> argvlen_;
};

}  // namespace fairlane::valkey
