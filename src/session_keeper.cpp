// The session keeper (session_state.hpp run_keeper): a detached host process
// that builds one session's sandbox the way a container run is built, holds
// the session's lock and uid for its life, and tears it all down at the
// end. It is the only process that knows the sandbox as a PreparedRun;
// everything others need is in the state file.
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "corral/container.hpp"
#include "corral/host_probe.hpp"
#include "corral/privilege.hpp"
#include "corral/run_setup.hpp"
#include "session_cgroup.hpp"
#include "session_state.hpp"

namespace corral::session_state {
namespace {

// The idle program under pid 1: from the sandbox's own /usr, so a rootfs
// must have it too.
const std::vector<std::string> kIdleArgv{"sleep", "infinity"};

std::uint64_t pidns_inode(pid_t pid) {
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(pid) + "/ns/pid").c_str(), &st) != 0) return 0;
  return st.st_ino;
}

// v1: an empty freezer group beside the session's other groups
// (<our freezer group>/corral/<the session group's name>), so that the exec
// groups made below the session's (session_cgroup.cpp) are in the freezer
// too and a kill freezes them first. A container run needs none: SIGKILL to
// its pid 1 ends its pid namespace, and the kernel stops forks in it first.
// An exec shares the session's pid namespace, so only the cgroup ends it,
// and without a freezer a chain of processes that each fork and exit
// (setsid, out of the group kill's reach) slips between each read of
// cgroup.procs and the kill. "" when there is no freezer to use.
std::string make_freezer_group(const CgroupProbe& host, const std::string& session_group) {
  if (host.backend != CgroupVersion::v1 || host.v1_freezer < 0) return "";
  const CgroupV1Hierarchy& h = host.v1[host.v1_freezer];
  if (!h.writable || h.own_dir.empty()) return "";
  const std::string parent = h.own_dir + "/corral";
  const std::string dir = parent + "/" + session_group.substr(session_group.rfind('/') + 1);
  if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return "";
  return ::mkdir(dir.c_str(), 0755) == 0 ? dir : "";
}

// pid 1 is what keeps the session: an OOM of the session's own ceiling must
// pick an exec's process, never it (host root may lower it).
void protect_from_oom(pid_t pid) {
  UniqueFd fd(::open(("/proc/" + std::to_string(pid) + "/oom_score_adj").c_str(), O_WRONLY | O_CLOEXEC));
  if (fd) (void)!::write(fd.get(), "-1000", 5);
}

}  // namespace

void run_keeper(const SessionKey& key, const SessionSpec& spec, const std::string& id, const std::string& session_dir,
                int ready_fd) {
  auto report = [&](const std::string& text) {
    if (ready_fd < 0) return;
    (void)!::write(ready_fd, text.data(), text.size());
    ::close(ready_fd);
    ready_fd = -1;
  };
  auto fail = [&](const Error& e) {
    report(std::to_string(e.code()) + " " + e.message());
    ::_exit(1);
  };

  // Signals as a fresh process has them; TERM, INT, HUP are read from a
  // signalfd (dispose sends TERM).
  for (int sig = 1; sig < 32; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, sig);
  ::sigprocmask(SIG_SETMASK, &stop, nullptr);
  UniqueFd sigfd(::signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sigfd) fail(Error::from_errno(errno, "session keeper: signalfd"));

  UniqueFd lock(::open((session_dir + "/lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0)
    fail(Error::from_errno(errno, "session keeper: lock '" + session_dir + "/lock'"));

  HostFacts host = probe_host(true);
  if (!host.root) fail(Error(EPERM, "sessions need root (the sandbox's uid comes from the host-wide pool)"));
  // The per-exec cgroups (session_join.cpp) need the memory controller for
  // their ceilings and OOM accounting; on v2 the session's group hands
  // memory and pids to them (RunCgroup::hold_processes_in).
  const bool v1 = host.cgroups.backend == CgroupVersion::v1;
  const bool v2 = host.cgroups.backend == CgroupVersion::v2;
  if (!host.cgroup_memory || !(v1 || (v2 && host.cgroup_pids)))
    fail(Error(ENOTSUP, "sessions need a cgroup per exec: cgroup v1 with the memory controller, or cgroup v2 with "
                        "memory and pids delegated (this host: " + host.cgroup_summary + ")"));
  UidPool pool;
  pool.lock_host_wide();

  Request req = spec.base;
  req.tier = Tier::container;
  req.argv = kIdleArgv;
  req.id = id;
  req.session.clear();
  req.inputs.clear();
  req.outputs.clear();
  req.payload.reset();
  req.stdin_text.reset();
  req.secrets.clear();
  req.env.clear();
  req.artifact_root.reset();
  req.declared_outputs.clear();
  // A network namespace of the session's own (lo up): execs of different
  // sessions never share one, and the template (shared by runs) is not
  // entered, so pid 1 holds every namespace an exec joins.
  req.loopback = true;
  RunContext ctx{&pool, "", &host, nullptr, nullptr, ""};
  auto prep = prepare_run(std::move(req), ctx, id);
  if (!prep) fail(prep.error().context("session " + id));
  ContainerRun& c = *prep->container;
  // _exit skips destructors: what the preparation made is undone here.
  std::string freezer_group;  // set once made (make_freezer_group)
  auto undo = [&](const Pidfd* pid1) {
    if (pid1 && pid1->valid()) {
      kill_container(c, *pid1, SIGKILL);
      (void)wait_exit(*pid1, true);
    }
    if (c.cgroup) (void)c.cgroup->remove();
    if (!freezer_group.empty()) (void)::rmdir(freezer_group.c_str());
    if (prep->workspace) (void)prep->workspace->remove();
    prep->uid_lease.reset();
  };
  // v2: pid 1 goes to <session group>/init (placed there at clone,
  // CLONE_INTO_CGROUP), so the session's group holds no process and can
  // hand memory and pids to the exec groups; v1: nothing to do.
  if (!c.cgroup) {
    undo(nullptr);
    fail(Error(ENOTSUP, "session " + id + ": the container run made no cgroup (this host: " + host.cgroup_summary + ")"));
  }
  if (auto st = c.cgroup->hold_processes_in("init"); !st) {
    undo(nullptr);
    fail(st.error().context("session " + id + ": its cgroup"));
  }
  // pid 1 keeps the session: not at a run's 1000, where an OOM of the
  // session's own ceiling could take it as soon as an exec's process
  // (protect_from_oom below lowers it to -1000 where the host lets it:
  // CAP_SYS_RESOURCE). The execs are at 1000 (session_join.cpp).
  prep->plan->first_oom_victim = false;
  auto child = spawn_container(*prep->plan, c);
  if (!child) {
    undo(nullptr);
    fail(child.error().context("session " + id));
  }
  prep->plan.reset();
  if (child->report.stage != SpawnStage::none) {
    undo(nullptr);
    fail(Error(child->report.error, "session " + id + ": " + c.failure));
  }

  // The idle program's exec: its report pipe reaches EOF at the execve
  // (CLOEXEC) or when the child failed before it; events 0 waits for the hang-up only.
  struct pollfd hup = {c.exec_report.get(), 0, 0};
  if (::poll(&hup, 1, 10000) != 1) {
    undo(&child->pidfd);
    fail(Error(ETIMEDOUT, "session " + id + ": the sandbox did not start within 10 s"));
  }
  RunEnd end;
  read_container_exec_report(c, end);
  if (end.report.stage != SpawnStage::none) {
    undo(&child->pidfd);
    fail(Error(end.report.error, "session " + id + ": " + c.failure));
  }

  SessionInfo info;
  info.id = id;
  info.key = key;
  info.fingerprint = session_fingerprint(spec);
  info.keeper = ::getpid();
  info.pid1 = child->pidfd.pid();
  info.pidns_inode = pidns_inode(info.pid1);
  info.outside_uid = prep->uid_lease->uid();
  info.outside_gid = prep->uid_lease->gid();
  info.inside_uid = prep->request.user.value_or(kContainerDefaultUid);
  if (c.cgroup) info.cgroup_dirs = c.cgroup->dirs();
  // Last: the first hierarchy's group is where exec groups are locked.
  const std::string freezer = c.cgroup ? make_freezer_group(host.cgroups, c.cgroup->dirs().front()) : "";
  if (!freezer.empty()) info.cgroup_dirs.push_back(freezer_group = freezer);
  info.memory_bytes = prep->limits.get(Limit::memory_bytes);
  info.process_count = prep->limits.get(Limit::process_count);
  info.created = now_realtime();
  info.idle_seconds = spec.idle_seconds;
  info.max_lifetime_seconds = spec.max_lifetime_seconds;
  info.dir = session_dir;
  protect_from_oom(info.pid1);
  touch_active(session_dir);
  if (auto st = write(info); !st) {
    undo(&child->pidfd);
    fail(st.error());
  }
  // One exec group made ahead and left clean in the pool for the first exec.
  if (run_cgroups_reusable(host.cgroups))
    if (auto ahead = claim_exec_cgroup(host.cgroups, info.cgroup_dirs, info.memory_bytes, info.process_count, "exec"))
      (void)ahead->remove();
  report("ok\n");
  // What the set-up allocated is not needed again.
  ::malloc_trim(0);

  // Keep it until told, idle, too old, or its pid 1 is gone. Between execs
  // the keeper sleeps: it wakes at the idle or lifetime deadline, on
  // dispose (TERM), at pid 1's end, or when an exec starts (every exec
  // touches <dir>/active at its start and end, and an inotify watch on it
  // is readable then). From that wake on it looks every second while execs
  // come: what an exec whose owner died left (its leader died with the
  // owner, PDEATHSIG; a setsid child of it did not) is killed, clean groups
  // stay for the next execs, a few at most. Once a look finds no exec
  // group held and no exec came since the last, it sleeps again. Without
  // inotify (out of instances) it looks every second all along.
  const double created = info.created;
  const int pool_keep = run_cgroups_reusable(host.cgroups) ? kExecPoolKeep : 0;
  UniqueFd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (watch && ::inotify_add_watch(watch.get(), (session_dir + "/active").c_str(), IN_ATTRIB) < 0) watch.reset();
  bool looking = true;     // execs may come: look every second
  double last_held = 0;    // the last look that found an exec running
  for (;;) {
    const double now = now_realtime();
    double wait = -1;  // none: until an event
    auto until = [&](double seconds) { wait = wait < 0 ? seconds : std::min(wait, seconds); };
    if (spec.max_lifetime_seconds > 0) {
      if (now - created >= spec.max_lifetime_seconds) break;
      until(spec.max_lifetime_seconds - (now - created));
    }
    if (looking) {
      bool came = false;  // an exec started or ended since the last look
      char events[4096];
      while (watch && ::read(watch.get(), events, sizeof events) > 0) came = true;
      bool held = false;
      std::vector<std::string> problems;
      (void)sweep_unclaimed_execs(info.cgroup_dirs, pool_keep, problems, &held);
      if (held) last_held = now;
      looking = held || came || !watch;
      if (looking) until(1.0);
    }
    if (spec.idle_seconds > 0) {
      // A running exec is use: the idle clock starts at its end.
      double idle = now - std::max({active_mtime(session_dir), created, last_held});
      if (idle >= spec.idle_seconds) break;
      until(spec.idle_seconds - idle);
    }
    struct pollfd fds[3] = {{child->pidfd.fd(), POLLIN, 0}, {sigfd.get(), POLLIN, 0}, {watch.get(), POLLIN, 0}};
    // While looking, the watch is drained at each look, not polled: a
    // stream of execs costs one look a second, not one wake per exec.
    const nfds_t nfds = looking || !watch ? 2 : 3;
    // (At most a day per sleep: an int of milliseconds.)
    int n = ::poll(fds, nfds, wait < 0 ? -1 : static_cast<int>(std::clamp(wait, 0.01, 86400.0) * 1000));
    if (n > 0 && (fds[0].revents || fds[1].revents)) break;
    if (n > 0 && nfds == 3 && fds[2].revents) looking = true;
  }

  // The end: the sandbox (pid 1, so its whole pid namespace, execs of other
  // processes included), then the exec cgroups, the session's cgroup (its
  // subtree killed, v2 cgroup.kill, and its groups removed bottom-up), the
  // workspace, the uid (reaped before the pool hands it out again), the
  // host state.
  kill_container(c, child->pidfd, SIGKILL);
  (void)wait_exit(child->pidfd, true);
  std::vector<std::string> problems;
  remove_exec_cgroups(info.cgroup_dirs, problems);
  undo(nullptr);
  if (auto dirlock = lock_sessions_dir(session_dir.substr(0, session_dir.rfind('/')))) remove_files(session_dir);
  else remove_files(session_dir);
  ::_exit(0);
}

}  // namespace corral::session_state
