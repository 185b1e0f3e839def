// Shared test support: skipping with a reason, running code in a forked
// child, reading /proc, temporary directories, locating helper programs.
// Tests observe effects on real children; nothing here fakes the kernel.
#pragma once

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "corral/isolation.hpp"
#include "corral/route.hpp"

namespace corral_test {

#define CORRAL_SKIP_UNLESS_ROOT()                                                 \
  do {                                                                            \
    if (geteuid() != 0) cr_skip_test("needs root (running as uid %d)", (int)geteuid()); \
  } while (0)

// How a forked child ended.
struct ChildEnd {
  bool exited = false;
  int code = -1;    // exit status when exited
  int signal = 0;   // terminating signal otherwise
};

// Fork; the child runs fn and _exits with its return value. fn may apply
// irreversible restrictions: they die with the child.
inline ChildEnd run_in_child(const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) _exit(fn());
  ChildEnd end;
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return end;
  if (WIFEXITED(status)) {
    end.exited = true;
    end.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    end.signal = WTERMSIG(status);
  }
  return end;
}

// run_in_child as `uid` (gid the same, no supplementary groups) when we are
// root, so a test sees what a run's program would see; as another user, as
// ourselves. A child that cannot change ids ends with 90.
inline ChildEnd run_in_child_as(uid_t uid, const std::function<int()>& fn) {
  return run_in_child([&] {
    if (geteuid() == 0 &&
        (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0))
      return 90;
    return fn();
  });
}

// The child ran to its end and returned 0.
inline void expect_child_ok(const ChildEnd& end) {
  cr_assert(end.exited && end.code == 0, "child: exited=%d code=%d signal=%d", end.exited, end.code, end.signal);
}

// run_in_child, plus what the child wrote to the fd it is given (a pipe
// read by the parent until every holder closed it, then the child reaped).
struct ChildReport {
  ChildEnd end;
  std::string output;
};
inline ChildReport run_in_child_reporting(const std::function<int(int report_fd)>& fn) {
  ChildReport report;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return report;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    _exit(fn(p[1]));
  }
  close(p[1]);
  char buf[4096];
  ssize_t n;
  while (pid > 0 && ((n = read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)))
    if (n > 0) report.output.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return report;
  if (WIFEXITED(status)) {
    report.end.exited = true;
    report.end.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    report.end.signal = WTERMSIG(status);
  }
  return report;
}

// For a forked test child: write a string to a report fd.
inline void report(int fd, const std::string& text) {
  for (size_t off = 0; off < text.size();) {
    ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

// The test's process into a mount namespace of its own, nothing shared
// back: what it mounts then is its alone (Criterion runs each test in a
// process of its own), and the other tests of its binary never see it.
inline void enter_own_mount_namespace() {
  cr_assert(::unshare(CLONE_NEWNS) == 0, "unshare(CLONE_NEWNS): %s", strerror(errno));
  cr_assert(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, "make / private: %s",
            strerror(errno));
}

// A shell command that ends once `path` is a file with something in it, or
// after 5 s: the barrier a script waits at for what a process it put in the
// background writes (a pid), where a fixed sleep can be outlasted on a
// loaded host. No '$' or '"' in it: it goes into JSON and double quotes as is.
inline std::string wait_for_file_sh(const std::string& path) {
  return "timeout 5 sh -c 'until [ -s " + path + " ]; do sleep 0.02; done'";
}

// Every entry name below dir, recursively (relative paths).
inline std::vector<std::string> tree_of(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec))
    out.push_back(std::filesystem::relative(it->path(), dir).string());
  return out;
}

// The value of one "Key:\tvalue" line of /proc/<who>/status ("self" or a pid).
inline std::string proc_status_field(const std::string& who, const std::string& key) {
  std::istringstream in(read_file("/proc/" + who + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + ":") == 0) {
      auto v = line.substr(key.size() + 1);
      auto start = v.find_first_not_of(" \t");
      return start == std::string::npos ? "" : v.substr(start);
    }
  }
  return "";
}

// How many fds this process has open (for leak checks).
inline std::size_t open_fd_count() {
  std::size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = d ? readdir(d) : nullptr) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

// How many of them hold an IPC namespace or the mount of one's mqueue
// filesystem: a supervisor keeps, each with its mount, up to
// SpawnThread::kKeptIpcNamespaces that finished runs left empty, and its
// spawn thread holds the one for its next child (ipc_namespace.hpp).
inline std::size_t held_ipc_namespace_fds() {
  constexpr long kMqueueMagic = 0x19800202;  // ipc/mqueue.c's MQUEUE_MAGIC: no uapi header has it
  std::size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] == '.') continue;
    char target[64] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    struct statfs fs {};
    if (readlink(link.c_str(), target, sizeof target - 1) > 0 && std::strncmp(target, "ipc:[", 5) == 0) ++n;
    else if (statfs(link.c_str(), &fs) == 0 && fs.f_type == kMqueueMagic) ++n;
  }
  if (d) closedir(d);
  return n;
}

// The pids of process `pid`'s children, zombies included, as the kernel
// lists them: every thread's list (a child is listed under the thread that
// made it, and a supervisor need not make its children from the thread
// that called it), space-separated.
inline std::string children_of(pid_t pid) {
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  std::string out;
  DIR* d = opendir(tasks.c_str());
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] == '.') continue;
    std::string kids = read_file(tasks + "/" + e->d_name + "/children");
    if (!out.empty() && !kids.empty() && out.back() != ' ') out += ' ';
    out += kids;
  }
  if (d) closedir(d);
  return out;
}

inline std::string children_of_self() { return children_of(getpid()); }

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/corral-test-XXXXXX";
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    if (path_.empty()) return;
    nftw(path_.c_str(),
         [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p), 0; },
         64, FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The build directory the tests were built in (scripts/run-tests exports it).
inline std::string build_dir() {
  const char* b = std::getenv("CORRAL_BUILD");
  return b && *b ? b : "build";
}

// Path of a helper program from tests/helpers/.
inline std::string helper(const std::string& name) { return build_dir() + "/helpers/" + name; }

// ---- text checks shared by every test file ----------------------------------

inline bool contains(const std::string& text, std::string_view word) { return text.find(word) != std::string::npos; }

// Every word is in text; the failure names the missing word and the text.
inline void assert_mentions(const std::string& text, std::initializer_list<std::string_view> words) {
  for (auto word : words)
    cr_assert(contains(text, word), "'%.*s' not in: %s", (int)word.size(), word.data(), text.c_str());
}

// Compares through a named copy: no pointer into a temporary reaches the
// assertion macro (sanitizer builds catch that).
inline void expect_text(const std::string& got, const std::string& want) { cr_assert_str_eq(got.c_str(), want.c_str()); }

// ---- a flood of empty files ------------------------------------------------------------------

// Shell text for a run: in each of `dirs`, empty files until the kernel
// refuses one or `cap` are made, then "DIR MADE" on a line. Empty files
// cost a tmpfs inodes and no size: what its nr_inodes bounds.
inline std::string empty_files_until_refused(const std::vector<std::string>& dirs, int cap) {
  std::string script;
  for (const auto& dir : dirs)
    script += "i=0; while [ $i -lt " + std::to_string(cap) + " ] && { true > \"" + dir +
              "/f$i\"; } 2>/dev/null; do i=$((i+1)); done; echo \"" + dir + " $i\"; ";
  return script;
}

// What empty_files_until_refused printed, by directory.
inline std::map<std::string, unsigned long> empty_files_made(const std::string& out) {
  std::map<std::string, unsigned long> made;
  std::istringstream lines(out);
  std::string dir;
  unsigned long n = 0;
  while (lines >> dir >> n) made[dir] = n;
  return made;
}

// Workspaces on tmpfs when there is one: this host's ext4 takes about a
// millisecond per mkdir, which would make a soak a disk benchmark. False
// when there is no writable /dev/shm.
inline bool prefer_tmpfs() {
  struct stat st {};
  if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode) || access("/dev/shm", W_OK) != 0) return false;
  return setenv("TMPDIR", "/dev/shm", 1) == 0;
}

// An enforcement view that calls every limit "hard" on every corral tier:
// route tests that are about routing, not about what this host enforces.
inline corral::MapEnforcementView all_hard_view() {
  corral::MapEnforcementView view;
  for (const auto& t : corral::corral_tiers()) view.set_all(std::string(t.name), "hard");
  return view;
}

// Alive and not a zombie (a zombie answers kill(pid, 0) too); reaps it if
// it is a child of ours that died.
inline bool alive(pid_t pid) {
  if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

// The byte a uid pool keeps for `uid` in its lock file (uid_lock.hpp), 0
// where none was written.
inline char uid_lock_byte(const std::string& path, uid_t uid) {
  char b = 0;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (pread(fd, &b, 1, static_cast<off_t>(uid)) != 1) b = 0;
    close(fd);
  }
  return b;
}

}  // namespace corral_test
