// A real single-node Slurm for the tests: munged with a private key and
// socket, slurmctld and slurmd on 127.0.0.1 at free ports, with a
// slurm.conf, state, spool and logs all under one temporary directory.
// Nothing is written to /etc or /run; every daemon is a child of the test
// process, started in the foreground, and stopped by its pid.
//
// Stopping is stop(), called from the test's .fini (Criterion runs it after
// a failed assertion too) and again from the destructor. The test process
// is a subreaper, so the slurmstepd processes slurmd leaves are its
// children too and are stopped by pid with the daemons; each daemon also
// has PR_SET_PDEATHSIG, so a test process that crashes takes them along.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace corral_test {

// The first of `names` not on PATH, "" when all are.
inline std::string missing_program(const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (system(("command -v " + n + " >/dev/null 2>&1").c_str()) != 0) return n;
  return "";
}

inline int free_port() {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (s >= 0 && bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (s >= 0) close(s);
  return port;
}

class SlurmCluster {
 public:
  static constexpr const char* kNode = "corraltest1";

  // Starts the three daemons and waits until the node is idle. "" on
  // success, else what failed (with the daemons' logs).
  std::string start(unsigned cpus) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    std::string d = dir_.path();
    chmod(d.c_str(), 0755);
    for (const char* sub : {"munge", "state", "spool", "log", "work"}) mkdir((dir_ / sub).c_str(), 0755);
    // munged refuses a key anyone else can read.
    std::string key = dir_ / "munge/munge.key";
    if (system(("head -c 1024 /dev/urandom > " + key + " && chmod 0400 " + key).c_str()) != 0)
      return "could not write a munge key";
    munge_socket_ = dir_ / "munge/munge.socket";
    munged_ = spawn({"munged", "--foreground", "--force", "--key-file=" + key, "--socket=" + munge_socket_,
                     "--pid-file=" + (dir_ / "munge/munged.pid"), "--log-file=" + (dir_ / "log/munged.log"),
                     "--seed-file=" + (dir_ / "munge/munged.seed"), "--origin=127.0.0.1"},
                    dir_ / "log/munged.out");
    if (!wait_for([&] { return access(munge_socket_.c_str(), F_OK) == 0; }, 10))
      return "munged did not create its socket: " + read_file(dir_ / "log/munged.out");
    ctld_port_ = free_port();
    slurmd_port_ = free_port();
    while (slurmd_port_ == ctld_port_) slurmd_port_ = free_port();
    conf_ = dir_ / "slurm.conf";
    write_file(conf_, config(cpus));
    ctld_ = spawn({"slurmctld", "-D", "-i", "-f", conf_}, dir_ / "log/slurmctld.out");
    slurmd_ = spawn({"slurmd", "-D", "-f", conf_, "-N", kNode}, dir_ / "log/slurmd.out");
    auto t0 = std::chrono::steady_clock::now();
    if (!wait_for([&] { return trim(command("sinfo -h -n " + std::string(kNode) + " -o %t")) == "idle"; }, 30))
      return "the node did not come up idle: " + command("sinfo") + "\n" + logs();
    up_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return "";
  }

  // Cancels what is queued, then stops slurmd, slurmctld, munged and every
  // other child left (slurmstepd) by pid: SIGTERM, then SIGKILL after 5 s.
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    if (ctld_ > 0 && !conf_.empty()) {
      command("scancel --user=root");
      wait_for([&] { return trim(command("squeue -h")).empty(); }, 5);
    }
    for (pid_t* p : {&slurmd_, &ctld_, &munged_}) end(*p);
    for (int round = 0; round < 2; ++round) {
      std::istringstream kids(children_of_self());
      std::vector<pid_t> left;
      for (pid_t pid; kids >> pid;) left.push_back(pid);
      for (pid_t& pid : left) {
        // Zombies are processes that ended (a job's slurmstepd, a batch's
        // guardian) and came to this subreaper to be reaped: not left over.
        std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
        auto paren = stat.rfind(')');
        if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') {
          waitpid(pid, nullptr, 0);
          continue;
        }
        leftovers_ += read_file("/proc/" + std::to_string(pid) + "/comm");
        end(pid);
      }
    }
  }
  ~SlurmCluster() { stop(); }

  // A shell command with this cluster's SLURM_CONF, its stdout+stderr.
  std::string command(const std::string& cmd, int* status = nullptr) {
    std::string full = "export SLURM_CONF=" + conf_ + "; { " + cmd + "; } 2>&1";
    FILE* p = popen(full.c_str(), "r");
    std::string out;
    if (!p) return out;
    char buf[4096];
    while (std::size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int rc = pclose(p);
    if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
    return out;
  }

  // The job's JobState once it has left the queue ("" after `seconds`).
  std::string wait_done(const std::string& job, double seconds) {
    std::string state;
    wait_for([&] {
      std::string s = command("scontrol -o show job " + job);
      auto at = s.find("JobState=");
      state = at == std::string::npos ? "" : s.substr(at + 9, s.find(' ', at) - at - 9);
      return !state.empty() && state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" &&
             state != "COMPLETING";
    }, seconds);
    return state;
  }

  std::string logs() {
    return read_file(dir_ / "log/slurmctld.out") + read_file(dir_ / "log/slurmd.out") +
           read_file(dir_ / "log/munged.out");
  }
  const std::string& conf() const { return conf_; }
  std::string work() const { return dir_ / "work"; }
  double up_seconds() const { return up_seconds_; }
  // The comm of children other than the daemons that stop() had to end.
  const std::string& leftovers() const { return leftovers_; }
  std::vector<pid_t> daemon_pids() const { return {munged_, ctld_, slurmd_}; }

  template <class F>
  static bool wait_for(F&& ready, double seconds) {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!ready()) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
  }

 private:
  static std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  std::string config(unsigned cpus) const {
    std::string d = dir_.path();
    std::ostringstream c;
    c << "ClusterName=corraltest\n"
      << "SlurmctldHost=localhost(127.0.0.1)\n"
      << "SlurmctldPort=" << ctld_port_ << "\nSlurmdPort=" << slurmd_port_ << "\n"
      << "SlurmUser=root\nSlurmdUser=root\n"
      << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << munge_socket_ << "\n"
      << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool\n"
      << "SlurmctldPidFile=" << d << "/slurmctld.pid\nSlurmdPidFile=" << d << "/slurmd.pid\n"
      << "SlurmctldLogFile=" << d << "/log/slurmctld.log\nSlurmdLogFile=" << d << "/log/slurmd.log\n"
      // corral makes its own cgroups and process groups: Slurm only tracks
      // the job's processes by their parentage and binds no task.
      << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
      << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
      << "JobCompType=jobcomp/none\nMpiDefault=none\nSwitchType=switch/none\n"
      << "SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
      // The node declares `cpus` whatever this host has, so the 4 tasks
      // of an array run at once on a 2-core machine.
      << "SlurmdParameters=config_overrides\nReturnToService=2\nMailProg=/bin/true\n"
      << "MinJobAge=600\n"
      << "NodeName=" << kNode << " NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=" << cpus << " State=UNKNOWN\n"
      << "PartitionName=corral Nodes=" << kNode << " Default=YES MaxTime=INFINITE State=UP\n";
    return c.str();
  }

  pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
      setenv("SLURM_CONF", conf_.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
    return pid;
  }

  // SIGTERM, up to 5 s, SIGKILL; reaped either way.
  static void end(pid_t& pid) {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    bool gone = wait_for([&] { return waitpid(pid, nullptr, WNOHANG) == pid; }, 5);
    if (!gone) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    pid = -1;
  }

  TempDir dir_;
  std::string conf_, munge_socket_, leftovers_;
  int ctld_port_ = 0, slurmd_port_ = 0;
  pid_t munged_ = -1, ctld_ = -1, slurmd_ = -1;
  double up_seconds_ = 0;
  bool stopped_ = false;
};

}  // namespace corral_test
