// One hiredis connection with reconnect and backoff (see connection.hpp).
#include "connection.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cstdio>
#include <thread>
#include <utility>

namespace fairlane::valkey {

void ReplyDeleter::operator()(redisReply* r) const noexcept {
  if (r) freeReplyObject(r);
}

void ContextDeleter::operator()(redisContext* c) const noexcept {
  if (c) redisFree(c);
}

Args& Args::add_double(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", d);
  own_.emplace_back(buf);
  v_.push_back(own_.back());
  return *this;
}

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  const auto n = ms.count() < 1 ? 1 : ms.count();
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(n / 1000);
  tv.tv_usec = static_cast<suseconds_t>((n % 1000) * 1000);
  return tv;
}

}  // namespace

Connection::Connection(std::string host, int port, const ValkeyOptions& options)
    : host_(std::move(host)), port_(port), options_(options) {
  const bool v6 = host_.find(':') != std::string::npos;
  address_ = (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

Connection::~Connection() = default;

std::string Connection::try_connect() {
  ctx_.reset(redisConnectWithTimeout(host_.c_str(), port_, to_timeval(options_.connect_timeout)));
  if (!ctx_) return "valkey " + address_ + " unreachable: out of memory";
  if (ctx_->err) {
    std::string why = ctx_->errstr;
    ctx_.reset();
    return "valkey " + address_ + " unreachable: " + why;
  }
  // A reply later than the command timeout counts as a dropped connection.
  redisSetTimeout(ctx_.get(), to_timeval(options_.command_timeout));
  redisEnableKeepAlive(ctx_.get());
  return {};
}

std::string Connection::connect() {
  std::string why;
  auto pause = options_.reconnect_backoff;
  const int attempts = options_.reconnect_attempts < 1 ? 1 : options_.reconnect_attempts;
  for (int i = 0; i < attempts; ++i) {
    if (i > 0) {
      // Backoff between attempts: a restarting server gets a moment.
      std::this_thread::sleep_for(pause);
      pause *= 2;
    }
    why = try_connect();
    if (why.empty()) return why;
  }
  return why;
}

void Connection::set_timeout(std::chrono::milliseconds t) {
  if (ctx_) redisSetTimeout(ctx_.get(), to_timeval(t));
}

Reply Connection::send_once(const Args& args, std::string& io_error) {
  io_error.clear();
  if (!ctx_) {
    io_error = "not connected";
    return nullptr;
  }
  const auto& v = args.views();
  argv_.resize(v.size());
  argvlen_.resize(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    argv_[i] = v[i].data();
    argvlen_[i] = v[i].size();
  }
  void* r = redisCommandArgv(ctx_.get(), int(v.size()), argv_.data(), argvlen_.data());
  if (r == nullptr || ctx_->err) {
    io_error = ctx_->errstr[0] ? ctx_->errstr : "connection lost";
    if (r) freeReplyObject(r);
    ctx_.reset();  // a context that saw an I/O error is not reusable
    return nullptr;
  }
  return Reply(static_cast<redisReply*>(r));
}

Reply Connection::command(const Args& args) {
  std::string io_error;
  if (ctx_) {
    Reply r = send_once(args, io_error);
    if (r) return r;
  }
  // Dropped (or never made): reconnect with backoff, then resend once.
  if (std::string why = connect(); !why.empty()) throw BackendError(why);
  Reply r = send_once(args, io_error);
  if (!r) throw BackendError("valkey " + address_ + " unreachable: " + io_error);
  return r;
}

std::vector<Reply> Connection::pipeline(const std::vector<Args>& commands) {
  if (!ctx_) {
    if (std::string why = connect(); !why.empty()) throw BackendError(why);
  }
  auto lost = [&](const char* what) -> BackendError {
    std::string why = ctx_ && ctx_->errstr[0] ? ctx_->errstr : what;
    ctx_.reset();  // a context that saw an I/O error is not reusable
    return BackendError("valkey " + address_ + " unreachable: " + why);
  };
  for (const Args& args : commands) {
    const auto& v = args.views();
    argv_.resize(v.size());
    argvlen_.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      argv_[i] = v[i].data();
      argvlen_[i] = v[i].size();
    }
    if (redisAppendCommandArgv(ctx_.get(), int(v.size()), argv_.data(), argvlen_.data()) != REDIS_OK)
      throw lost("cannot queue a command");
  }
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* r = nullptr;
    if (redisGetReply(ctx_.get(), &r) != REDIS_OK || r == nullptr) throw lost("connection lost");
    replies.emplace_back(static_cast<redisReply*>(r));
  }
  return replies;
}

Reply Connection::blocking_command(const Args& args, std::chrono::milliseconds block) {
  set_timeout(options_.command_timeout + block);
  struct Restore {
    Connection& c;
    ~Restore() { c.set_timeout(c.options_.command_timeout); }
  } restore{*this};
  if (!ctx_) {
    if (std::string why = connect(); !why.empty()) throw BackendError(why);
    set_timeout(options_.command_timeout + block);
  }
  std::string io_error;
  Reply r = send_once(args, io_error);
  if (r) return r;
  if (std::string why = connect(); !why.empty()) throw BackendError(why);
  set_timeout(options_.command_timeout + block);
  r = send_once(args, io_error);
  if (!r) throw BackendError("valkey " + address_ + " unreachable: " + io_error);
  return r;
}

}  // namespace fairlane::valkey
