#include "corral/route_run.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "corral/capture.hpp"
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

// The route's limits, each tightened by `asked`. The bound of a limit the
// route leaves unset is corral's default, which the route runs with.
Expected<Limits> tightened(const RouteSpec& spec, const Limits& asked, const std::string& who) {
  Limits out = spec.limits;
  Limits defaults = default_limits();
  for (const auto& info : all_limits()) {
    auto want = asked.raw(info.limit);
    if (!want) continue;
    auto own = spec.limits.raw(info.limit);
    auto bound = own ? own : defaults.raw(info.limit);
    if (bound && *want > *bound) {
      std::string name(info.name);
      return Error::invalid(who + "limit " + name + "=" + limit_value_text(info, *want) + " is looser than the route's " +
                            name + "=" + limit_value_text(info, *bound) +
                            (own ? "" : " (corral's default; the route sets none)") +
                            "; a route's limits may be tightened, never loosened");
    }
    out.set_raw(info.limit, *want);
  }
  return out;
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
  Expected<std::string> read(std::string_view name, std::uint64_t at_most) override {
    return inner_.read(name, at_most);
  }
  const std::vector<std::string>& withheld() const { return withheld_; }

 private:
  OutputSource& inner_;
  const SecretSet* secrets_;
  std::vector<std::string> landing_globs_;
  std::vector<std::string> withheld_;
};

}  // namespace

Expected<Request> request_for_route(const Route& route, Request base, const RouteOverrides& overrides) {
  const RouteSpec& spec = route.spec;
  const std::string who = "route " + q(spec.name) + ": ";
  auto refuse = [&](const std::string& why) { return Error::invalid(who + why); };

  auto tier = parse_tier(spec.tier);
  if (!tier) return refuse(tier.error().message());
  if (!spec.provenance) return refuse("provenance is missing (was the route built by a Router?)");
  if (overrides.tier && *overrides.tier != *tier)
    return refuse("runs in tier " + std::string(to_string(*tier)) + "; it cannot be run in tier " +
                  std::string(to_string(*overrides.tier)) + " (the route decides its tier)");

  Request request = std::move(base);
  request.tier = *tier;
  auto limits = tightened(spec, request.limits, who);
  if (!limits) return std::move(limits).error();
  request.limits = *limits;

  // The network follows the tier's egress level, as the gate saw it.
  if (!request.tcp_connect_ports.empty()) return refuse("egress belongs to the route (egress_allow), not to the caller");
  request.net = NetworkAccess::none;
  if (route.tier.egress == Egress::unrestricted) {
    request.net = NetworkAccess::host;  // the gate demanded acknowledge_network_egress
  } else if (route.tier.egress == Egress::allowlist) {
    for (const auto& entry : spec.egress_allow) {
      auto parsed = parse_egress_entry(spec.name, entry);
      if (!parsed) return std::move(parsed).error();
      if (std::find(request.tcp_connect_ports.begin(), request.tcp_connect_ports.end(), parsed->second) ==
          request.tcp_connect_ports.end())
        request.tcp_connect_ports.push_back(parsed->second);
    }
  }
  if (overrides.net == NetworkAccess::none) {
    request.net = NetworkAccess::none;
    request.tcp_connect_ports.clear();
  } else if (overrides.net == NetworkAccess::host && request.net != NetworkAccess::host) {
    return refuse("network host would open what the route closes (tier " + spec.tier + " gives egress " +
                  std::string(to_string(route.tier.egress)) + ", egress_allow " +
                  (spec.egress_allow.empty() ? std::string("empty") : "limited to its entries") + ")");
  }

  for (const auto& name : overrides.pass_env)
    if (!contains(spec.env_passthrough, name))
      return refuse("env passthrough " + q(name) + " is not in the route's env_passthrough");
  request.pass_env = spec.env_passthrough;

  for (const auto& ref : request.secrets)
    if (!contains(spec.secrets, ref.name))
      return refuse("secret " + q(ref.name) + " is not one of the route's secrets");
  for (const auto& name : spec.secrets) {
    bool given = std::any_of(request.secrets.begin(), request.secrets.end(),
                             [&](const SecretRef& ref) { return ref.name == name; });
    if (given) continue;
    SecretRef ref{name, name, {}};
    if (overrides.resolve_secret)
      ref.resolve = [resolve = overrides.resolve_secret, name] { return resolve(name); };
    request.secrets.push_back(std::move(ref));
  }

  // The route's kill stands; a caller's kill tightens a route that truncates.
  if (spec.kill_on_output_limit) request.on_output_limit = OutputLimitPolicy::kill;

  if (!request.acknowledged.empty())
    return refuse("acknowledgements belong to the route (acknowledged_unenforced), not to the caller: " +
                  q(*request.acknowledged.begin()));
  for (Limit limit : spec.acknowledged_unenforced) request.acknowledged.insert(std::string(limit_name(limit)));

  if (!request.outputs.empty())
    return refuse("declares its own outputs; " + q(request.outputs.front()) + " cannot be added to them");
  if (!spec.outputs.empty()) {
    std::string landing;
    for (const auto& out : spec.outputs)
      if (out.disposition == Disposition::land) landing += (landing.empty() ? "" : ", ") + q(out.landing_name());
    if (!landing.empty() && !request.artifact_root)
      return refuse("outputs " + landing + " land in a sink, and no artifact root was given (--artifact-root DIR)");
    auto previous = std::move(request.on_workspace);
    request.on_workspace = [outputs = spec.outputs, transfer = spec.transfer, root = request.artifact_root,
                            previous](const Workspace& workspace, Result& result, const SecretSet& secrets) {
      if (previous) previous(workspace, result, secrets);
      collect_route_outputs(outputs, transfer, root, workspace, result, &secrets);
    };
  }

  request.route = spec.name;
  request.provenance = std::string(to_string(*spec.provenance));
  return request;
}

Expected<std::vector<std::string>> WorkspaceOutputSource::list(std::string_view glob) {
  // The one glob dialect (glob.hpp): "logs/**" is every file below logs,
  // as with --output.
  auto pattern = Glob::parse(glob, "list: glob");
  if (!pattern) return std::move(pattern).error();
  std::vector<std::string> found;
  std::uint64_t seen = 0;
  auto root = open_beneath(workspace_.dirfd(), ".", O_RDONLY | O_DIRECTORY);
  if (!root) return std::move(root).error();

  // Depth-first, one directory fd open per level; a directory is entered
  // only while the glob may still match below it.
  std::function<Status(int, const std::string&, const Glob::State&)> walk =
      [&](int dir, const std::string& prefix, const Glob::State& state) -> Status {
    auto entries = wsfs::list_dir(dir, static_cast<std::size_t>(max_walk_entries_ - seen + 1));
    if (!entries) return entries.error().context("list " + q(prefix.empty() ? "." : prefix));
    seen += entries->size();
    if (seen > max_walk_entries_)
      return Error(E2BIG, "list " + q(glob) + ": more than " + std::to_string(max_walk_entries_) +
                              " directory entries walked; giving up");
    for (const auto& entry : *entries) {
      Glob::State next = pattern->step(state, entry.name);
      unsigned char type = wsfs::entry_type(dir, entry);
      std::string path = prefix.empty() ? entry.name : prefix + "/" + entry.name;
      if (type == DT_REG) {
        if (pattern->matched(next)) found.push_back(std::move(path));
        continue;
      }
      if (type != DT_DIR || !pattern->may_descend(next)) continue;
      auto sub = open_beneath(dir, entry.name, O_RDONLY | O_DIRECTORY);
      if (!sub) {
        if (sub.error().code() == ENOENT) continue;  // gone since the listing
        return std::move(sub).error();
      }
      if (Status st = walk(sub->get(), path, next); !st) return st;
    }
    return {};
  };
  if (Status st = walk(root->get(), "", pattern->start()); !st) return st.error();
  return found;
}

Expected<std::optional<std::uint64_t>> WorkspaceOutputSource::stat(std::string_view name) {
  // O_PATH|O_NOFOLLOW: a trailing symlink yields an fd of the link itself
  // (openat2(2)), which fstat reports as a symlink: size unknown, never followed.
  auto fd = open_beneath(workspace_.dirfd(), name, O_PATH | O_NOFOLLOW);
  if (!fd) return std::move(fd).error();
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return Error::from_errno(errno, "fstat " + q(name));
  if (!S_ISREG(st.st_mode)) return std::optional<std::uint64_t>{};
  if (Status ok = check_single_link(st, name); !ok) return ok.error();
  return std::optional<std::uint64_t>{static_cast<std::uint64_t>(st.st_size)};
}

Expected<std::string> WorkspaceOutputSource::read(std::string_view name, std::uint64_t at_most) {
  // O_NONBLOCK: a fifo swapped in since stat() must not block the supervisor.
  auto fd = open_beneath(workspace_.dirfd(), name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (!fd) return std::move(fd).error();
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return Error::from_errno(errno, "fstat " + q(name));
  if (!S_ISREG(st.st_mode)) return Error(EPERM, q(name) + " is no longer a regular file");
  if (Status ok = check_single_link(st, name); !ok) return ok.error();
  std::string out;
  char buf[65536];
  while (out.size() < at_most) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(sizeof buf, at_most - out.size()));
    ssize_t n = ::read(fd->get(), buf, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno(errno, "read " + q(name));
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

void collect_route_outputs(const std::vector<DeclaredOutput>& outputs, const TransferLimits& limits,
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
  TransferResult moved = transfer(outputs, limits, source, sink ? &*sink : nullptr);
  for (const auto& name : source.withheld())
    result.artifact_notes.push_back(printable_name(name) + ": its name contains a secret's value; not delivered");
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

}  // namespace corral
