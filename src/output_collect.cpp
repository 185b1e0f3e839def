// The one output collector (output_collect.hpp). Runs in the parent only,
// after the program ended: everything below the workspace is hostile here.
#include "corral/output_collect.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "corral/glob.hpp"
#include "corral/names.hpp"
#include "corral/sink.hpp"
#include "workspace_fs.hpp"

namespace corral {
namespace {

std::string q(std::string_view s) { return quote_input(s); }

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// Beneath the workspace, no symlink anywhere, no magic link, no other mount.
constexpr std::uint64_t kResolve = wsfs::kResolveHostile;

Error open_error(int err, std::string_view name) {
  std::string why = err == ELOOP ? "a symlink is in the way (outputs follow none)"
                  : err == EXDEV ? "crosses a mount point"
                                 : std::strerror(err);
  return Error(err, "open " + q(name) + ": " + why);
}

Expected<UniqueFd> open_beneath(int root, std::string_view name, int flags) {
  int fd = wsfs::openat2_fd(root, std::string(name), static_cast<std::uint64_t>(flags | O_CLOEXEC), 0, kResolve);
  if (fd < 0) return open_error(errno, name);
  return UniqueFd(fd);
}

// A regular file read out of a workspace must be the program's own: a hard
// link may be a host file the program could not read itself.
Status check_single_link(const struct stat& st, std::string_view name) {
  if (st.st_nlink > 1)
    return Error(EPERM, q(name) + " is a hard link (st_nlink=" + std::to_string(st.st_nlink) +
                            "); outputs never read hard links out of a workspace");
  return {};
}

// The workspace as transfer() sees it, less the files a landing glob lists
// whose name holds a secret's value: landed, the name would put the secret
// on the host's disk in clear. They are withheld (and noted by the caller,
// masked) rather than renamed: a masked name could collide with another
// file, and would not be the name the program wrote. A consumed output
// touches no disk; its name is masked in the Result like any other.
class WithholdSecretNames final : public OutputSource {
 public:
  WithholdSecretNames(OutputSource& inner, const SecretSet* secrets, const std::vector<DeclaredOutput>& outputs)
      : inner_(inner), secrets_(secrets) {
    for (const auto& o : outputs)
      if (o.disposition == Disposition::land) landing_globs_.push_back(o.path);
  }

  Expected<std::vector<std::string>> list(std::string_view glob) override {
    auto listed = inner_.list(glob);
    if (!listed) return listed;
    const bool landing = secrets_ && contains(landing_globs_, std::string(glob));
    // A name that fails the lexical rules or lands on another output's
    // file is transfer()'s to skip (TransferResult::skipped()).
    if (landing)
      std::erase_if(*listed, [&](const std::string& name) {
        for (const auto& secret : secrets_->values())
          if (name.find(secret) != std::string::npos) {
            withheld_.push_back(name);
            return true;
          }
        return false;
      });
    return listed;
  }
  Expected<std::optional<std::uint64_t>> stat(std::string_view name) override { return inner_.stat(name); }
  Expected<std::unique_ptr<OutputReader>> open(std::string_view name) override { return inner_.open(name); }
  const std::vector<std::string>& withheld() const { return withheld_; }

 private:
  OutputSource& inner_;
  const SecretSet* secrets_;
  std::vector<std::string> landing_globs_;
  std::vector<std::string> withheld_;
};

}  // namespace

Expected<std::vector<std::string>> WorkspaceOutputSource::list(std::string_view glob) {
  // The one glob dialect (glob.hpp): "logs/**" is every file below logs,
  // as with --output.
  auto pattern = Glob::parse(glob, "list: glob");
  if (!pattern) return std::move(pattern).error();
  std::vector<std::string> found;
  std::uint64_t seen = 0;
  auto root = open_beneath(workspace_.dirfd(), ".", O_RDONLY | O_DIRECTORY);
  if (!root) return std::move(root).error();

  // Depth-first in name order, one directory fd open per level; a
  // directory is entered only while the glob may still match below it.
  // Iterative, with the levels on an explicit stack: the program chose the
  // depth, and a recursion 20,000 directories deep overflowed the
  // supervisor's stack. The stack is capped at kMaxWalkDepth levels, which
  // bounds the fds held (one per level) and the memory (the entries of each
  // level; the path is one string, grown and cut back as the walk moves).
  struct Level {
    UniqueFd fd;  // owned; the root level's is `root`
    std::vector<wsfs::Entry> entries;
    std::size_t next = 0;
    Glob::State state;
    std::size_t prefix_len;  // the length of this directory's path in `prefix`
  };
  std::string prefix;  // the current directory, relative to the root; "" at the root
  std::vector<Level> stack;
  bool capped = false;  // a directory past kMaxWalkDepth was left out (noted once)
  auto enter = [&](UniqueFd fd, Glob::State state) -> Status {
    auto entries = wsfs::list_dir(fd.get(), static_cast<std::size_t>(max_walk_entries_ - seen + 1));
    if (!entries) return entries.error().context("list " + q(prefix.empty() ? "." : prefix));
    seen += entries->size();
    if (seen > max_walk_entries_)
      return Error(E2BIG, "list " + q(glob) + ": more than " + std::to_string(max_walk_entries_) +
                              " directory entries walked; giving up");
    stack.push_back({std::move(fd), std::move(*entries), 0, std::move(state), prefix.size()});
    return {};
  };
  if (Status st = enter(std::move(*root), pattern->start()); !st) return st.error();
  while (!stack.empty()) {
    Level& top = stack.back();
    if (top.next == top.entries.size()) {
      stack.pop_back();
      if (!stack.empty()) prefix.resize(stack.back().prefix_len);
      continue;
    }
    const wsfs::Entry& entry = top.entries[top.next++];
    // home/ and tmp/ hold the run's HOME and TMPDIR: only a glob that
    // names them literally looks inside.
    if (stack.size() == 1 && (entry.name == "home" || entry.name == "tmp") &&
        pattern->segments().front() != entry.name)
      continue;
    Glob::State next = pattern->step(top.state, entry.name);
    unsigned char type = wsfs::entry_type(top.fd.get(), entry);
    if (type != DT_DIR) {
      // Listed whatever it is: stat() says why a symlink, fifo or device
      // is not delivered, and transfer() notes it.
      if (pattern->matched(next)) found.push_back(prefix.empty() ? entry.name : prefix + "/" + entry.name);
      continue;
    }
    if (!pattern->may_descend(next)) continue;
    if (stack.size() > kMaxWalkDepth) {
      // Left out with a note, not a failure: the run's other outputs (and
      // this glob's shallower matches) are still delivered.
      if (!capped) {
        capped = true;
        std::string dir = prefix + "/" + entry.name;
        if (dir.size() > 120) dir = dir.substr(0, 60) + "..." + dir.substr(dir.size() - 60);
        notes_.push_back("output " + q(glob) + ": directories more than " + std::to_string(kMaxWalkDepth) +
                         " levels deep are not searched (the first: " + q(dir) +
                         "); files below them are not delivered");
      }
      continue;
    }
    auto sub = open_beneath(top.fd.get(), entry.name, O_RDONLY | O_DIRECTORY);
    if (!sub) {
      if (sub.error().code() == ENOENT) continue;  // gone since the listing
      return std::move(sub).error();
    }
    // `top` is not used past here: enter() may move the stack.
    if (!prefix.empty()) prefix += '/';
    prefix += entry.name;
    if (Status st = enter(std::move(*sub), std::move(next)); !st) return st.error();
  }
  return found;
}

Expected<std::optional<std::uint64_t>> WorkspaceOutputSource::stat(std::string_view name) {
  // O_PATH|O_NOFOLLOW: a trailing symlink yields an fd of the link itself
  // (openat2(2)), which fstat reports as a symlink: refused, never followed.
  auto fd = open_beneath(workspace_.dirfd(), name, O_PATH | O_NOFOLLOW);
  if (!fd) return std::move(fd).error();
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return Error::from_errno(errno, "fstat " + q(name));
  if (S_ISLNK(st.st_mode)) return Error(EPERM, q(name) + " is a symlink; outputs follow none");
  if (!S_ISREG(st.st_mode)) return std::optional<std::uint64_t>{};
  if (Status ok = check_single_link(st, name); !ok) return ok.error();
  return std::optional<std::uint64_t>{static_cast<std::uint64_t>(st.st_size)};
}

namespace {

// A workspace file opened by WorkspaceOutputSource::open: the fd that was
// checked, read as it is (the transfer's buffer bounds what it holds).
class FdReader final : public OutputReader {
 public:
  FdReader(UniqueFd fd, std::string name) : fd_(std::move(fd)), name_(std::move(name)) {}
  Expected<std::size_t> read(std::span<char> buf) override {
    for (;;) {
      ssize_t n = ::read(fd_.get(), buf.data(), buf.size());
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno != EINTR) return Error::from_errno(errno, "read " + q(name_));
    }
  }

 private:
  UniqueFd fd_;
  std::string name_;
};

}  // namespace

Expected<std::unique_ptr<OutputReader>> WorkspaceOutputSource::open(std::string_view name) {
  // O_NONBLOCK: a fifo swapped in since stat() must not block the supervisor.
  auto fd = open_beneath(workspace_.dirfd(), name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (!fd) return std::move(fd).error();
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return Error::from_errno(errno, "fstat " + q(name));
  if (!S_ISREG(st.st_mode)) return Error(EPERM, q(name) + " is no longer a regular file");
  if (Status ok = check_single_link(st, name); !ok) return ok.error();
  return std::unique_ptr<OutputReader>(std::make_unique<FdReader>(std::move(*fd), std::string(name)));
}

void collect_declared_outputs(const std::vector<DeclaredOutput>& outputs, const TransferLimits& limits,
                              const std::optional<std::string>& artifact_root, const Workspace& workspace,
                              Result& result, const SecretSet* secrets) {
  if (outputs.empty()) return;
  WorkspaceOutputSource workspace_source(workspace);
  WithholdSecretNames source(workspace_source, secrets, outputs);
  bool lands = std::any_of(outputs.begin(), outputs.end(),
                           [](const DeclaredOutput& o) { return o.disposition == Disposition::land; });
  std::optional<FilesystemSink> sink;
  std::string dir;
  if (lands && artifact_root) {
    // The artifact root is the operator's (trusted); the run's own
    // directory below it is new, and the sink follows nothing beneath it.
    dir = *artifact_root + "/" + (result.run_id.empty() ? std::string("run") : result.run_id);
    if (::mkdir(dir.c_str(), 0755) != 0) {
      result.artifact_notes.push_back("outputs: create " + q(dir) + ": " + std::strerror(errno));
      return;
    }
    auto opened = FilesystemSink::open(dir);
    if (!opened) {
      result.artifact_notes.push_back("outputs: " + opened.error().message());
      ::rmdir(dir.c_str());
      return;
    }
    sink.emplace(std::move(*opened));
  }
  auto record = [&](const std::vector<Delivered>& delivered) {
    for (const auto& d : delivered)
      result.artifacts.push_back({d.name, d.bytes, d.sha256, d.landed ? d.landed->location : std::string()});
  };
  // Streamed: a file costs the transfer's buffer, not its size; a consumed
  // output is listed with its size and digest, its bytes are not kept.
  TransferResult moved = transfer(outputs, limits, source, sink ? &*sink : nullptr, Consumed::digest_only);
  for (const auto& name : source.withheld())
    result.artifact_notes.push_back("outputs: " + printable_name(name) + ": its name contains a secret's value; not delivered");
  for (const auto& note : workspace_source.notes()) result.artifact_notes.push_back("outputs: " + note);
  for (const auto& skipped : moved.skipped()) result.artifact_notes.push_back("outputs: " + skipped.note);
  if (!moved) {
    const TransferError& error = moved.error();
    record(error.delivered_before);
    result.artifact_notes.push_back("outputs refused (" + std::string(to_string(error.kind)) +
                                    "): " + error.message());
    if (error.delivered_before.empty() && !dir.empty()) ::rmdir(dir.c_str());
    return;
  }
  record(*moved);
  if (moved->empty() && !dir.empty()) ::rmdir(dir.c_str());
}

bool workspace_has_file_of(const Workspace& workspace, std::uint64_t bytes, std::uint64_t max_walk_entries) {
  if (workspace.released()) return false;
  WorkspaceOutputSource source(workspace, max_walk_entries);
  for (const char* glob : {"**", "home/**", "tmp/**"}) {
    auto listed = source.list(glob);
    if (!listed) continue;
    for (const auto& name : *listed) {
      auto fd = open_beneath(workspace.dirfd(), name, O_PATH | O_NOFOLLOW);
      struct stat st {};
      if (fd && ::fstat(fd->get(), &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) >= bytes)
        return true;
    }
  }
  return false;
}

TransferLimits output_caps_for(const Request& request, const Limits& limits) {
  TransferLimits caps = request.output_caps.value_or(
      TransferLimits{UINT64_MAX, UINT64_MAX, UINT64_MAX});
  auto lower = [&](std::uint64_t& cap, Limit limit) {
    if (auto v = limits.get(limit)) cap = std::min(cap, *v);
  };
  lower(caps.max_bytes_per_file, Limit::artifact_bytes);
  lower(caps.max_total_bytes, Limit::artifact_total_bytes);
  lower(caps.max_files, Limit::artifact_count);
  return caps;
}

std::vector<DeclaredOutput> outputs_of(const Request& request) {
  std::vector<DeclaredOutput> all = request.declared_outputs;
  for (const auto& glob : request.outputs) {
    DeclaredOutput o;
    o.path = glob;
    o.media_type = "application/octet-stream";
    o.disposition = request.artifact_root ? Disposition::land : Disposition::consume;
    all.push_back(std::move(o));
  }
  return all;
}

void collect_run_outputs(const Request& request, const Limits& limits, const Workspace& workspace, Result& result,
                         const SecretSet* secrets) {
  if (request.outputs.empty() && request.declared_outputs.empty()) return;
  if (workspace.released()) {
    result.artifact_notes.push_back("outputs: the workspace's fd is released; nothing collected (reacquire() first)");
    return;
  }
  collect_declared_outputs(outputs_of(request), output_caps_for(request, limits), request.artifact_root, workspace,
                           result, secrets);
}

}  // namespace corral
