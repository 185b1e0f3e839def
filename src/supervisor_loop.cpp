// Out-of-line members of Supervisor::Impl (supervisor_impl.hpp): the
// completion dispatch of the loop and the check that spares a run's uid
// kill. A run's steps are supervisor_run.cpp.
#include "supervisor_impl.hpp"

namespace corral {

bool Supervisor::Impl::no_children_of_runs() {
  // With runs in flight their leaders are children a wait sees: the
  // shortcut could never answer, and its waitid walks every child.
  if (!by_pid.empty()) return false;
  return no_children_but_clone_children();
}

bool Supervisor::Impl::only_known_children() {
  if (!options.become_subreaper) return false;
  if (no_children_of_runs()) return true;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  bool known = true;
  char buf[4096];
  // A pid is known when it is a run's (by_pid) or the guardian.
  auto check = [&](pid_t pid) {
    if (pid > 0 && !by_pid.count(pid) && !(guardian && pid == guardian->pid())) known = false;
  };
  while (known) {
    dirent* e = readdir(tasks);
    if (e == nullptr) break;
    if (e->d_name[0] == '.') continue;
    std::string path = std::string("/proc/self/task/") + e->d_name + "/children";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      known = errno == ENOENT;  // a thread that just exited
      continue;
    }
    // Read to the end, however long: with hundreds of runs in flight the
    // list passes one read (the kernel's seq_file hands out at most a page
    // per read, so a single 4 KiB read made every exit look unknown and
    // paid the uid kill's helper process every time). A later read resumes
    // by position in the list: sound because nothing leaves it meanwhile
    // (a child leaves our list only when reaped, and only this thread
    // reaps) and what joins it is appended. A pid cut by a read's end
    // carries over to the next one.
    pid_t pid = 0;
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        known = false;  // unreadable: do not guess
        break;
      }
      if (n == 0) {
        check(pid);
        break;
      }
      for (ssize_t i = 0; i < n && known; ++i) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          pid = pid * 10 + (buf[i] - '0');
        } else {
          check(pid);
          pid = 0;
        }
      }
      if (!known) break;
      // A short read was the end: seq_read_iter stops short of what was
      // asked only when the records ran out or its buffer (a page, at least
      // 4 KiB) overflowed with the next one, and then it holds at least a
      // page less one record ("PID " is at most 11 bytes). One read a
      // thread instead of two; the list always ends in a space, so no pid
      // is cut here.
      if (n < static_cast<ssize_t>(sizeof buf) - 64) break;
    }
    ::close(fd);
  }
  closedir(tasks);
  return known;
}

void Supervisor::Impl::handle_cqe(io_uring_cqe* cqe) {
  std::uint64_t data = io_uring_cqe_get_data64(cqe);
  if (data == 0) return;  // a removal or update request's own completion
  if (data == kSignalData) {
    on_signal_ready();
    return;
  }
  if (data == kWheelData) {
    on_wheel();
    return;
  }
  std::uint32_t slot = static_cast<std::uint32_t>(data >> 32);
  std::uint32_t gen = static_cast<std::uint32_t>((data >> 8) & 0xffffff);
  Op op = static_cast<Op>(data & 0xff);
  if (op == kOpWatch) {
    on_watch(slot, gen);
    return;
  }
  if (op == kOpWrite) {
    on_write(slot, gen, cqe->res);
    return;
  }
  if (slot >= slots.size() || !slots[slot]) return;
  Run& run = *slots[slot];
  if (!run.active || run.retiring || (run.gen & 0xffffff) != gen) return;
  bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;
  switch (op) {
    case kOpPid:
      run.pid_armed = false;
      if (cqe->res >= 0) on_leader_exit(slot, run);
      maybe_reap_orphans(false);
      break;
    case kOpOut:
    case kOpErr: {
      Pipe& pipe = (op == kOpOut) ? run.out : run.err;
      if (!more) pipe.armed = false;
      if (pipe.eof) {
        if (!pipe.armed) close_later(pipe.fd.release());
        break;
      }
      // POLLHUP without POLLIN: the pipe is empty and every write end is
      // closed (pipe_poll), which is what a read returning 0 would say: EOF,
      // without the read (two system calls a run, at its end). Not while
      // the output is paused: drain_pipe holds it.
      if (!more && cqe->res > 0 && (cqe->res & (POLLIN | POLLHUP)) == POLLHUP && !(run.output_paused && !run.exited)) {
        close_pipe(slot, run, pipe, op);  // no poll armed: the fd closes now
        break;
      }
      drain_pipe(slot, run, pipe, op);  // re-arms the poll once the pipe is empty
      if (pipe.eof && !pipe.armed) close_later(pipe.fd.release());
      break;
    }
    case kOpCpu:
      on_cpu_check(slot, run, cqe->res);
      break;
    case kOpNotice:
      run.listener_armed = false;
      on_notice(slot, run, cqe->res);
      break;
    case kOpOom:
      // The run's cgroup (v1) entered the OOM path: the run is over, as a
      // whole. Recorded before the kill: the kernel signals the eventfd
      // before its OOM killer picks a victim, so our SIGKILL often lands
      // first and the cgroup's oom_kill counter stays 0
      // (finish_container, CgroupStats::ceiling_oom).
      run.oom_armed = false;
      if (cqe->res <= 0) break;  // removed (the run retired) or the poll failed
      if (run.prep.runner->oom_is_the_runs_own(run.prep)) {
        run.end.oom_notified = true;
        if (!run.exited) request_kill(slot, run, SIGKILL);
      } else if (!run.exited) {
        // An OOM of a ceiling the run shares (its session's): the kernel's
        // OOM killer alone picks who dies. The run's own ceiling may still
        // run out later: watched again (oom_is_the_runs_own read the count).
        if (const int fd = run.prep.runner->oom_event_fd(run.prep); fd >= 0) arm_oom(slot, run, fd);
      }
      break;
    case kOpWatch:
    case kOpWrite:
      break;  // handled above
  }
  maybe_finish(slot, run);
}

}  // namespace corral
