// One hiredis connection with the backend's reconnect policy (Connection),
// and the queue's route through a standalone server or a Valkey Cluster
// (Client).
//
// Not thread-safe (neither is a redisContext). Every command is sent with
// redisCommandArgv, so payloads and ids are binary-safe and never formatted.
// No message built here ever holds a password.
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
  // A literal lives for the whole program.
  Args& add(const char* s) { return add(std::string_view(s)); }
  // A string made for the call (a temporary) is kept here, as a number's
  // text is: a view of it would dangle before the command is sent. (A key
  // made as `prefix + "meta"` and added as a view did: restore wrote its
  // owner under freed bytes, found by a tester on 2026-12-07.)
  Args& add(std::string&& s) {
    own_.push_back(std::move(s));
    v_.push_back(own_.back());
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

// Who to AUTH as after every connect (empty password: no AUTH).
struct Auth {
  std::string user;      // empty: the default user
  std::string password;
};

class Connection {
 public:
  Connection(std::string host, int port, const ValkeyOptions& options, Auth auth = {});
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
  const std::string& host() const noexcept { return host_; }
  int port() const noexcept { return port_; }
  bool connected() const noexcept { return ctx_ != nullptr; }

 private:
  // One attempt; "" or why not. `fatal`: retrying cannot help (refused AUTH).
  std::string try_connect(bool& fatal);
  Reply send_once(const Args& args, std::string& io_error);
  void set_timeout(std::chrono::milliseconds t);
  // Why the last call on ctx_ failed, for a message.
  std::string io_error_text() const;

  std::string host_;
  int port_;
  std::string address_;
  ValkeyOptions options_;
  Auth auth_;
  std::unique_ptr<redisContext, ContextDeleter> ctx_;
  std::chrono::milliseconds timeout_{0};  // the socket timeout set last
  std::vector<const char*> argv_;
  std::vector<std::size_t> argvlen_;
};

// The Cluster hash slot of a key (CRC16/XMODEM of its {tag} or the key).
std::uint16_t key_slot(std::string_view key) noexcept;

// The queue's route: every key of a queue is in one slot ({Q}), so a client
// talks to one node at a time, the one that serves that slot.
//
// Standalone servers are found by CLUSTER SLOTS answering "cluster support
// disabled"; then every command goes to the one node. On a Cluster the
// owner of the slot comes from CLUSTER SLOTS (any seed node answers), and
//   MOVED   the slot has a new owner: switch to it and resend;
//   ASK     the slot is migrating and the key is already there: resend to
//           the target after ASKING (once; the owner does not change);
//   TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, UNBLOCKED
//           mid-migration or mid-failover: back off (1 ms doubling to
//           100 ms) and resend;
//   I/O error on the owner (a master that died): ask the nodes for the
//           topology again and resend.
// All within ValkeyOptions::cluster_retry_budget, then BackendError. Every
// redirected command had not run, so resending it is always safe.
class Client {
 public:
  Client(const ValkeyUrl& url, const ValkeyOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Finds the node serving the queue and connects to it. "" or why not.
  std::string connect();
  Reply command(const Args& args);
  // BLPOP and the like. A redirect answer (the slot moved while blocked)
  // switches the route and returns nullptr: the caller looks again.
  Reply blocking_command(const Args& args, std::chrono::milliseconds block);
  // One round trip. On a redirect or TRYAGAIN in any reply, the whole
  // pipeline is sent again (to the new owner, or after ASKING): only for
  // commands that are safe to run twice (the mirror's and restore's).
  std::vector<Reply> pipeline(const std::vector<Args>& commands);

  const std::string& address() const noexcept;  // the node serving the queue now ("host:port")
  bool cluster() const noexcept { return cluster_; }
  std::uint64_t redirects() const noexcept { return redirects_; }  // MOVED + ASK followed, ever
  std::uint64_t retries() const noexcept { return retries_; }      // TRYAGAIN and the like waited out, ever

 private:
  Connection& node(const std::string& host, int port);
  std::string discover();  // CLUSTER SLOTS from any known node; sets primary_
  // What to do with an error reply. Returns true when the command must be
  // sent again (after switching the route or backing off); sets `ask_to`
  // for an ASK.
  bool redirect(std::string_view error, std::string& ask_host, int& ask_port);
  void backoff();
  [[noreturn]] void give_up(std::string_view why);

  ValkeyUrl url_;
  ValkeyOptions options_;
  Auth auth_;
  std::uint16_t slot_;
  bool cluster_ = false;
  std::vector<std::unique_ptr<Connection>> nodes_;
  Connection* primary_ = nullptr;
  std::vector<ValkeyEndpoint> known_;  // seeds, then every node CLUSTER SLOTS named
  std::chrono::steady_clock::time_point deadline_{};
  std::chrono::milliseconds pause_{1};
  std::uint64_t redirects_ = 0, retries_ = 0;
};

}  // namespace fairlane::valkey
