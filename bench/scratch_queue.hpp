// A queue a benchmark program makes for itself and removes when it is done:
// named after the program and its pid, any leftover of that name removed
// first, removed again on every return from main.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "fairlane/queue.hpp"

namespace fairlane::bench {

class ScratchQueue {
 public:
  // nullopt, after a line on stderr naming `program`, if it cannot be made.
  static std::optional<ScratchQueue> create(const char* program, const QueueOptions& o) {
    std::string name = std::string(program) + "-" + std::to_string(getpid());
    (void)Queue::remove(name);
    auto created = Queue::create(name, o);
    if (!created) {
      std::fprintf(stderr, "%s: Queue::create %s: %s\n", program, name.c_str(), created.error().message.c_str());
      return std::nullopt;
    }
    return ScratchQueue(std::move(name), std::move(created).value());
  }
  ScratchQueue(ScratchQueue&& o) noexcept : name_(std::move(o.name_)), q_(std::move(o.q_)) { o.name_.clear(); }
  ScratchQueue& operator=(ScratchQueue&&) = delete;
  ~ScratchQueue() {
    if (!name_.empty()) (void)Queue::remove(name_);
  }

  Queue& queue() noexcept { return q_; }

 private:
  ScratchQueue(std::string name, Queue q) : name_(std::move(name)), q_(std::move(q)) {}
  std::string name_;
  Queue q_;
};

}  // namespace fairlane::bench
