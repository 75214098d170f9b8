// Fork + exec of the helper executable, with a start gate on its stdin.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace fairlane::test {

#ifndef FAIRLANE_WORKER_PATH
#error "FAIRLANE_WORKER_PATH must name the fairlane_test_worker executable"
#endif
inline const char* worker_path() { return FAIRLANE_WORKER_PATH; }

// A child process running `fairlane_test_worker args...`. It blocks on its
// stdin until release() (or until this object is destroyed).
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int gate[2];
    if (::pipe2(gate, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::vector<std::string> full;
    full.emplace_back(worker_path());
    for (auto& a : args) full.push_back(std::move(a));
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      // Only async-signal-safe calls from here to exec.
      ::dup2(gate[0], 0);  // dup2 clears O_CLOEXEC on the copy
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(gate[0]);
    gate_ = gate[1];
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  Child(Child&& o) noexcept : pid_(o.pid_), gate_(o.gate_), status_(o.status_), reaped_(o.reaped_) {
    o.pid_ = -1;
    o.gate_ = -1;
    o.reaped_ = true;
  }
  ~Child() {
    release();
    if (!reaped_ && pid_ > 0) {
      ::kill(pid_, SIGKILL);  // only our own child, by its pid
      wait();
    }
  }

  void release() {
    if (gate_ >= 0) {
      const char go = 'g';
      (void)!::write(gate_, &go, 1);
      ::close(gate_);
      gate_ = -1;
    }
  }

  // Non-blocking: true once the child has exited (status() is then valid).
  bool poll() {
    if (reaped_) return true;
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = st;
      reaped_ = true;
    }
    return reaped_;
  }
  // Blocks until the child exits; returns its wait status.
  int wait() {
    while (!reaped_) {
      int st = 0;
      const pid_t r = ::waitpid(pid_, &st, 0);
      if (r == pid_) {
        status_ = st;
        reaped_ = true;
      } else if (r < 0 && errno != EINTR) {
        reaped_ = true;
        status_ = -1;
      }
    }
    return status_;
  }
  // "exited 0", "exited 3", "killed by signal 14", for messages.
  std::string describe() {
    const int st = wait();
    if (st == -1) return "lost";
    if (WIFEXITED(st)) return "exited " + std::to_string(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) return "killed by signal " + std::to_string(WTERMSIG(st));
    return "status " + std::to_string(st);
  }
  bool succeeded() {
    const int st = wait();
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_ = -1;
  int gate_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

}  // namespace fairlane::test
