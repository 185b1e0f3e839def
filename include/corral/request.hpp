// A Request: what to run and under which limits. Plain data; nothing here
// touches the kernel. plan.hpp turns it into a child plan.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "corral/limits.hpp"
#include "corral/outputs.hpp"
#include "corral/status.hpp"

namespace corral {

// corral's tiers. The CLI says `process` for os_process.
enum class Tier { none, os_process, container };
std::string_view to_string(Tier tier);
// Accepts "none", "process", "os_process", "container".
Expected<Tier> parse_tier(std::string_view text);

enum class NetworkAccess { host, none };

// The one check of a run's pinned identity (Request::user; its gid is the
// same number), shared by the CLI's --user, a job's "user" field and
// prepare_run: uid 0 is refused (root, and gid 0 root's group: a run is
// never root, in either tier), and so is 4294967295, which set*id reads as
// "unchanged". The error names the value.
Status check_run_user(std::uint64_t uid);
// `--user` text: decimal digits only ("0:0", "root", "1k", "-1" are
// errors), then check_run_user.
Expected<uid_t> parse_run_user(std::string_view text);

// What a stdout_bytes/stderr_bytes overrun does. truncate: the first bytes
// are kept and the stream's `truncated` flag set; the run goes on. kill:
// the run ends at once (SIGKILL to the group) as killed_resource with
// resource stdout_bytes or stderr_bytes — a verdict, for judges that treat
// an output flood as a failure. Names: "truncate", "kill".
enum class OutputLimitPolicy { truncate, kill };
std::string_view to_string(OutputLimitPolicy policy);
Expected<OutputLimitPolicy> parse_output_limit_policy(std::string_view text);

// A file placed into the workspace before the child starts: bytes given by
// the caller, or a copy of a host file.
struct Input {
  std::string name;                      // relative path inside the workspace
  std::optional<std::string> bytes;      // exactly one of bytes / host_path
  std::optional<std::string> host_path;
  unsigned mode = 0644;
  // Set by the door (door.hpp) once host_path is a resolved path it
  // checked: staging then follows no symlink (openat2 RESOLVE_NO_SYMLINKS),
  // so a link swapped in after the check cannot lead elsewhere.
  bool resolved = false;
};

// A secret by reference: the child sees `name` in its environment with the
// resolved value; every byte of captured and streamed output has the value
// replaced by ***. Resolved at spawn, never stored in a Request or a
// Result. Plain data: where the value is, not code that fetches it.
struct SecretRef {
  std::string name;       // variable name in the child
  std::string from_env;   // corral's own variable (default: name)
  // Or a file holding the value (a mounted secret, e.g. /run/secrets/x),
  // read at spawn: a regular file of at most 64 KiB, its bytes as they are
  // (one trailing newline dropped). Used instead of from_env when set.
  std::string from_file{};
};

// Source text run by an interpreter: written into the workspace as
// `filename`, then argv = interpreter + [filename] + request argv.
struct ProgramPayload {
  std::string source;
  std::vector<std::string> interpreter;  // e.g. {"python3"}
  std::string filename = "program";
};

// Tier container: a host path bound into the sandbox's filesystem
// (read-only unless `writable`). `target` is absolute inside.
struct MountBind {
  std::string source;
  std::string target;
  bool writable = false;
  // A writable bind's files land on the host owned by this uid:gid (an
  // idmapped mount; container.hpp). Unset: the source directory's owner.
  // Never 0: a run never writes as host root.
  std::optional<uid_t> owner_uid{};
  std::optional<gid_t> owner_gid{};
  // Set by the door once `source` is a resolved path it checked: the mount
  // tree opens it with no symlink followed (MountTreeSpec::Bind::resolved).
  bool resolved = false;
};

// Tier container: a tmpfs of the run's own at `path` (absolute inside),
// `bytes` in size (default: tmp_bytes). Its pages count against
// memory_bytes.
struct TmpfsMount {
  std::string path;
  std::optional<std::uint64_t> bytes;
};

struct Request {
  std::string id;                          // caller's label (batch jobs)
  std::vector<std::string> argv;           // never a shell string
  std::map<std::string, std::string> env;  // named variables
  std::vector<std::string> pass_env{"PATH"};
  std::vector<SecretRef> secrets;
  std::vector<Input> inputs;
  // Globs relative to the workspace (--output, a job's "outputs"): each an
  // optional glob output of declared_outputs' kind, landing under its own
  // path in <artifact_root>/<run_id>/ (listed only, without an artifact
  // root). Collected with the route's outputs by one collector
  // (output_collect.hpp): the same caps, skips and notes.
  std::vector<std::string> outputs;
  // Declared outputs (outputs.hpp): a route's, set by request_for_route.
  std::vector<DeclaredOutput> declared_outputs;
  // Caps on every collected output beyond the limits' artifact_bytes,
  // artifact_total_bytes and artifact_count (a route's transfer caps); the
  // stricter of the two wins. Unset: the limits alone.
  std::optional<TransferLimits> output_caps;
  std::optional<ProgramPayload> payload;
  // The program's stdin, any bytes (a memfd: the program may seek it). When
  // neither this nor stdin_fd is given, stdin is /dev/null.
  std::optional<std::string> stdin_text;
  // Or an fd of the caller's (e.g. a pipe's read end corral run feeds from
  // its own stdin): duplicated when the run is prepared, so the caller may
  // close its copy once submit() returns. -1: none.
  int stdin_fd = -1;
  // The Result's JSON also carries stdout_b64/stderr_b64: the kept bytes
  // exactly (secrets masked), where stdout/stderr replace invalid UTF-8.
  bool binary_output = false;
  Limits limits;                           // merged over the defaults
  Tier tier = Tier::os_process;
  std::optional<std::string> cwd;          // run here instead of the workspace (container: bound read-write)
  // The working directory and nothing else: no bind, no write set. In tier
  // container a path inside the sandbox; elsewhere a host directory.
  std::optional<std::string> chdir;
  bool merge_output = false;               // stderr folded into stdout (fd level)
  bool confine_writes = false;             // Landlock: writes only to the workspace + write_paths
  std::vector<std::string> write_paths;
  NetworkAccess net = NetworkAccess::host;
  // With net none on os_process: TCP connect(2) is allowed to these ports
  // and nothing else leaves (Landlock TCP rules, ABI >= 4, plus a seccomp
  // profile that keeps sockets to AF_UNIX and TCP). Ignored on other tiers.
  std::vector<std::uint16_t> tcp_connect_ports;
  // Tier container: a network namespace of the run's own with lo up. Off,
  // a root supervisor runs it in the shared namespace template
  // (ns_template.hpp): no loopback, sockets but AF_UNIX refused.
  bool loopback = false;
  std::optional<uid_t> user;               // pin the run's uid (root only); in tier
                                           // container: the uid inside (default 65534)
  std::optional<std::string> rootfs;       // tier container: a prepared root instead of the host's /usr...
  std::vector<MountBind> binds;            // tier container: extra binds (--ro-bind, --bind)
  std::vector<TmpfsMount> tmpfs;           // tier container: extra tmpfs mounts (--tmpfs)
  // Tier container: host character devices bound at the same path inside,
  // and the only devices besides /dev/{null,zero,full,random,urandom} the
  // run's device cgroup lets it open (--dev-bind).
  std::vector<std::string> dev_binds;
  std::optional<std::string> artifact_root;
  std::set<std::string> acknowledged;      // limits/guarantees the caller accepts as unenforced
  double grace_seconds = 2.0;              // SIGTERM → SIGKILL
  OutputLimitPolicy on_output_limit = OutputLimitPolicy::truncate;
  // Set by request_for_route (route_run.hpp): which route the run went
  // through and its provenance ("trusted"/"untrusted"), for the audit line.
  std::string route;
  std::string provenance;
  // Run inside this live session (session.hpp) instead of a sandbox of its
  // own; tier container. Set by session_exec_request.
  std::string session{};
};

// The request's own consistency, whoever built it (prepare_run calls it;
// the door too): no NUL byte in argv, env, paths or names (the kernel
// would cut the string there); no empty path (cwd, write_paths, rootfs,
// binds, artifact_root, an input's name or host_path); argv[0] not empty;
// every limit within its maximum (limits.hpp). The message names the
// field as a batch job spells it.
Status validate_request(const Request& request);

// The one rule for a variable name (env, pass_env, secret_env, a route's
// env_passthrough and secrets, whoever names them): not empty, no '=', no
// NUL or other control character. A name with '=' would read another
// variable's value out of corral's environment (getenv stops at '=') and
// write a different one into the program's. The reason it fails, or ""
// when it passes.
std::string variable_name_problem(std::string_view name);

// The one message for `net host` asked of tier container.
std::string net_host_in_container();

// The limits a run gets when the request does not say: generous enough for
// real work, small enough that a runaway cannot take the worker down.
Limits default_limits();

}  // namespace corral
