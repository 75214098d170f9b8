// Children that run a function of the test itself (fork, no exec), and an
// anonymous shared-memory block the parent and its children all see.
//
// For tests whose processes need no program of their own (the churn and
// scribble tests): the child opens its own Queue handle, never touches the
// parent's, reports through the shared block, and ends by _exit (never
// through the parent's destructors or gtest). Fork only from a
// single-threaded parent. A child dies with its parent (PR_SET_PDEATHSIG)
// and carries a watchdog alarm, so a hang ends as SIGALRM at worst.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

namespace fairlane::test {

// One T in MAP_SHARED | MAP_ANONYMOUS memory, made before the fork and so
// shared with every child. T must be usable across processes: atomics and
// plain data only.
template <class T>
class SharedBlock {
 public:
  SharedBlock() {
    void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
    ptr_ = new (p) T();
  }
  SharedBlock(const SharedBlock&) = delete;
  SharedBlock& operator=(const SharedBlock&) = delete;
  ~SharedBlock() {
    ptr_->~T();
    ::munmap(ptr_, sizeof(T));
  }
  T* operator->() const noexcept { return ptr_; }
  T& operator*() const noexcept { return *ptr_; }

 private:
  T* ptr_ = nullptr;
};

// A forked child running body() (returning its exit status).
class ForkedChild {
 public:
  template <class F>
  explicit ForkedChild(F&& body, unsigned watchdog_s = 300) {
    const pid_t parent = ::getpid();
    std::fflush(nullptr);  // nothing buffered is written twice
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      ::alarm(watchdog_s);
      int rc = 5;
      try {
        rc = body();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", int(::getpid()), e.what());
      } catch (...) {
      }
      std::fflush(nullptr);
      ::_exit(rc);
    }
  }
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;
  ForkedChild(ForkedChild&& o) noexcept : pid_(o.pid_), status_(o.status_), reaped_(o.reaped_) {
    o.pid_ = -1;
    o.reaped_ = true;
  }
  ~ForkedChild() {
    if (!reaped_ && pid_ > 0) {
      ::kill(pid_, SIGKILL);  // only our own child, by its pid
      wait();
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
    } else if (r < 0 && errno != EINTR) {
      status_ = -1;
      reaped_ = true;
    }
    return reaped_;
  }
  // Waits until the child exits or `guard` passes; false on the latter (the
  // child is still running: a hang).
  bool wait_for(std::chrono::milliseconds guard) {
    const auto until = std::chrono::steady_clock::now() + guard;
    while (!poll()) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }
  int wait() {
    while (!reaped_) {
      int st = 0;
      const pid_t r = ::waitpid(pid_, &st, 0);
      if (r == pid_) {
        status_ = st;
        reaped_ = true;
      } else if (r < 0 && errno != EINTR) {
        status_ = -1;
        reaped_ = true;
      }
    }
    return status_;
  }
  void kill_now() {
    if (!reaped_ && pid_ > 0) ::kill(pid_, SIGKILL);
  }
  bool reaped() const noexcept { return reaped_; }
  int status() const noexcept { return status_; }
  bool exited_zero() const noexcept { return reaped_ && status_ != -1 && WIFEXITED(status_) && WEXITSTATUS(status_) == 0; }
  bool signaled() const noexcept { return reaped_ && status_ != -1 && WIFSIGNALED(status_); }
  // "exited 0", "exited 3", "killed by signal 11 (Segmentation fault)", "running".
  std::string describe() const {
    if (!reaped_) return "still running";
    if (status_ == -1) return "lost";
    if (WIFEXITED(status_)) return "exited " + std::to_string(WEXITSTATUS(status_));
    if (WIFSIGNALED(status_))
      return "killed by signal " + std::to_string(WTERMSIG(status_)) + " (" + strsignal(WTERMSIG(status_)) + ")";
    return "status " + std::to_string(status_);
  }
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

}  // namespace fairlane::test
