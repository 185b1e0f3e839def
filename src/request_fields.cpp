#include "corral/request_fields.hpp"

#include "corral/names.hpp"
#include "field_parsers.hpp"

namespace corral {

FieldValue FieldValue::of_text(std::string text) {
  FieldValue v;
  v.text = std::move(text);
  return v;
}

FieldValue FieldValue::of_boolean(bool value) {
  FieldValue v;
  v.type = Type::boolean;
  v.boolean = value;
  return v;
}

std::string type_name(const FieldValue& v) {
  switch (v.type) {
    case FieldValue::Type::text: return "a string";
    case FieldValue::Type::integer: return "an integer";
    case FieldValue::Type::real: return "a number with a fraction";
    case FieldValue::Type::boolean: return "a boolean";
    case FieldValue::Type::list: return "an array";
    case FieldValue::Type::table: return "a table (object)";
    case FieldValue::Type::other: return std::string(v.other.empty() ? "something else" : v.other);
  }
  return "something else";
}

namespace {

using Type = FieldValue::Type;

Error wrong_type(const FieldValue& v, std::string_view want) {
  return Error::invalid("must be " + std::string(want) + ", not " + type_name(v));
}

namespace p = field_parsers;

constexpr unsigned kAll = kFlag | kJobField | kRouteKey;
constexpr unsigned kCliJob = kFlag | kJobField;

// THE table. Every row: the job field (`name`), corral run's flag, the
// routes file's key, where it is accepted, how its values come, --help.
// tests/contracts/test_docs_agree.py reads the rows (`.name = "..."`,
// `.flag = "..."`, `.route_key = "..."`, `.entry_points = ...`, `.alias =
// "..."`, `.alias_at = ...`): keep one field per row, written this way.
constexpr RequestField kFields[] = {
    {.name = "tier", .flag = "tier", .short_flag = 't', .route_key = "tier", .entry_points = kAll,
     .value_name = "none|process|container",
     .help = "isolation tier (default: process). none: a\n"
             "plain child with the ceilings; process: + uid\n"
             "drop (root), no capabilities, no_new_privs,\n"
             "seccomp 'default', Landlock when asked;\n"
             "container: + user/pid/net/mount/ipc/uts/cgroup\n"
             "namespaces, a fresh read-only root with the\n"
             "workspace at /workspace, no network, a cgroup\n"
             "for memory_bytes and process_count, a non-root\n"
             "uid inside",
     .apply = p::tier},
    {.name = "provenance", .flag = "untrusted", .route_key = "provenance", .entry_points = kAll,
     .flag_sets = "untrusted",
     .help = "the program is untrusted: refused below\ncontainer (job field and routes key:\n\"trusted\" or \"untrusted\")",
     .apply = p::provenance},
    {.name = "limits", .flag = "limit", .short_flag = 'l', .route_key = "limits", .entry_points = kAll,
     .shape = FieldShape::table, .value_name = "NAME=VALUE",
     .help = "set a limit (repeatable; see the table below)", .apply = p::limit},
    {.name = "acknowledge", .flag = "acknowledge", .entry_points = kCliJob, .shape = FieldShape::list,
     .value_name = "NAME",
     .help = "run even though NAME (a limit or guarantee)\nis not enforceable here (see corral\nenforcement; repeatable)",
     .apply = p::acknowledge},
    {.name = "confine_writes", .flag = "confine-writes", .entry_points = kCliJob, .shape = FieldShape::toggle,
     .help = "Landlock: writes only to the workspace,\n--cwd and --write-path directories",
     .apply = p::confine_writes},
    {.name = "write_paths", .flag = "write-path", .entry_points = kCliJob, .shape = FieldShape::list,
     .value_name = "P", .help = "add P to the write set (implies\n--confine-writes; repeatable)",
     .apply = p::write_path},
    {.name = "net", .flag = "net", .entry_points = kCliJob, .value_name = "none|host",
     .help = "none: no sockets but AF_UNIX (default: host)", .apply = p::net},
    {.name = "loopback", .flag = "loopback", .entry_points = kCliJob, .shape = FieldShape::toggle,
     .help = "tier container: a network namespace of the\nrun's own with lo up (default as root: the\n"
             "shared template's, no loopback, sockets but\nAF_UNIX refused; ~0.7 ms more per run)",
     .apply = p::loopback},
    {.name = "env", .flag = "env", .short_flag = 'e', .entry_points = kCliJob, .shape = FieldShape::table,
     .value_name = "K=V", .help = "set a variable (repeatable; default: none)", .apply = p::env},
    {.name = "pass_env", .flag = "pass-env", .route_key = "pass_env", .entry_points = kAll,
     .alias = "env_passthrough", .alias_at = kRouteKey,
     .shape = FieldShape::list, .value_name = "K",
     .help = "pass corral's K through (repeatable;\nPATH is always passed but in tier container,\n"
             "whose PATH is /usr/local/bin:/usr/bin:/bin\nunless --env PATH=... sets it)",
     .apply = p::pass_env, .clear = p::clear_pass_env},
    {.name = "secret_env", .flag = "secret-env", .route_key = "secret_env", .entry_points = kAll,
     .alias = "secrets", .alias_at = kRouteKey,
     .shape = FieldShape::list, .value_name = "K",
     .help = "pass corral's K and mask its value as ***\nin output (repeatable)", .apply = p::secret_env},
    {.name = "inputs", .flag = "input", .entry_points = kCliJob, .shape = FieldShape::list,
     .value_name = "HOSTPATH[:NAME]",
     .help = "copy a host file or directory (recursively; a\nsymlink is skipped) into the workspace as NAME\n"
             "(default: its base name; repeatable)",
     .apply = p::input},
    {.name = "outputs", .flag = "output", .entry_points = kCliJob, .shape = FieldShape::list, .value_name = "GLOB",
     .help = "collect matching workspace files after the run\n(repeatable; default: none)", .apply = p::output},
    {.name = "artifact_root", .flag = "artifact-root", .entry_points = kCliJob, .value_name = "DIR",
     .help = "copy collected files to DIR/<run-id>/ (default:\nlisted with size and SHA-256, not kept)",
     .apply = p::artifact_root},
    {.name = "cwd", .flag = "cwd", .entry_points = kCliJob, .value_name = "DIR",
     .help = "run in DIR (default: the workspace); DIR joins\nthe write set under --confine-writes; tier\n"
             "container: host DIR is bound read-write at DIR",
     .apply = p::cwd},
    {.name = "chdir", .flag = "chdir", .entry_points = kCliJob, .value_name = "DIR",
     .help = "only the working directory: nothing bound, no\nwrite set (tier container: a path inside)",
     .apply = p::chdir},
    {.name = "user", .flag = "user", .entry_points = kCliJob, .value_name = "UID",
     .help = "run as UID and gid UID, never 0 (tier process,\nas root; default: a uid per run from\n"
             "200000-265535 when root, else the caller's uid);\ntier container: the uid inside (default 65534)",
     .apply = p::user},
    {.name = "rootfs", .flag = "rootfs", .entry_points = kCliJob, .value_name = "DIR",
     .help = "tier container: DIR's entries (read-only) instead\nof the host's /usr, /bin, /lib* and a minimal /etc",
     .apply = p::rootfs},
    {.name = "ro_binds", .flag = "ro-bind", .entry_points = kCliJob, .shape = FieldShape::list,
     .value_name = "SRC[:DST]", .help = "tier container: bind host SRC read-only at DST\n(repeatable)",
     .apply = p::ro_bind},
    {.name = "binds", .flag = "bind", .entry_points = kCliJob, .shape = FieldShape::list,
     .value_name = "SRC[:DST][:owner=UID:GID]",
     .help = "tier container: bind host SRC read-write at\nDST; as root what the program writes there is\n"
             "owned on the host by SRC's owner (or UID:GID),\nnever root (an idmapped mount; repeatable)",
     .apply = p::bind},
    {.name = "tmpfs", .flag = "tmpfs", .entry_points = kCliJob, .shape = FieldShape::list, .value_name = "PATH[:SIZE]",
     .help = "tier container: a tmpfs at PATH of SIZE bytes\n(K, M, G suffixes; default tmp_bytes), counted\n"
             "against memory_bytes (repeatable)",
     .apply = p::tmpfs},
    {.name = "dev_binds", .flag = "dev-bind", .entry_points = kCliJob, .shape = FieldShape::list, .value_name = "PATH",
     .help = "tier container: the host character device PATH\nat PATH; the device cgroup allows only these\n"
             "and /dev/{null,zero,full,random,urandom}\n(repeatable)",
     .apply = p::dev_bind},
    {.name = "grace_seconds", .flag = "grace-seconds", .entry_points = kCliJob, .alias = "grace", .alias_at = kFlag,
     .value_name = "SECONDS",
     .help = "SIGTERM to SIGKILL after the deadline, 0-3600,\nfractions allowed (default: 2; also --grace)", .apply = p::grace},
    {.name = "stdin_text", .flag = "stdin-text", .entry_points = kCliJob, .alias = "stdin", .alias_at = kJobField,
     .value_name = "TEXT",
     .help = "the program's stdin (default: /dev/null)", .apply = p::stdin_text},
    {.name = "binary_output", .flag = "binary-output", .entry_points = kCliJob, .shape = FieldShape::toggle,
     .help = "with --json: stdout_b64 and stderr_b64 too, the\nkept bytes exactly (secrets masked as ***)",
     .apply = p::binary_output},
    {.name = "on_output_limit", .flag = "on-output-limit", .route_key = "on_output_limit", .entry_points = kAll,
     .value_name = "truncate|kill",
     .help = "past stdout_bytes/stderr_bytes: keep the\nfirst bytes and go on (truncate, default), or\n"
             "end the run as killed_resource, exit 137 (kill)",
     .apply = p::on_output_limit},
    {.name = "merge_output", .flag = "merge-output", .entry_points = kCliJob, .shape = FieldShape::toggle,
     .help = "stderr goes to the stdout pipe (fd level)", .apply = p::merge_output},
    {.name = "route", .flag = "route", .entry_points = kCliJob, .value_name = "NAME",
     .help = "run through route NAME of --routes FILE: its\ntier, limits, network, env, secrets and outputs;\n"
             "--limit may tighten its limits, never loosen them",
     .apply = p::route},
    // Job fields only: a command line names its program as operands.
    {.name = "argv", .entry_points = kJobField, .shape = FieldShape::list, .apply = p::argv},
    {.name = "id", .entry_points = kJobField, .apply = p::id},
    {.name = "stdin_b64", .entry_points = kJobField, .apply = p::stdin_b64},
    {.name = "source", .entry_points = kJobField, .apply = p::source},
    {.name = "interpreter", .entry_points = kJobField, .shape = FieldShape::list, .apply = p::interpreter},
    // corral batch takes it off the line before the job parser sees it (batch_session.cpp).
    {.name = "session", .entry_points = kJobField, .apply = p::session},
};

}  // namespace

std::span<const RequestField> request_fields() { return kFields; }

namespace {
bool alias_is(const RequestField& f, EntryPoint at, std::string_view text) {
  return (f.alias_at & at) && !f.alias.empty() && f.alias == text;
}
}  // namespace

const RequestField* field_named(std::string_view name) {
  for (const auto& f : kFields)
    if (f.name == name || alias_is(f, kJobField, name)) return &f;
  return nullptr;
}

const RequestField* field_by_flag(std::string_view flag) {
  for (const auto& f : kFields)
    if (f.accepts(kFlag) && !f.flag.empty() && (f.flag == flag || alias_is(f, kFlag, flag))) return &f;
  return nullptr;
}

const RequestField* field_by_route_key(std::string_view key) {
  for (const auto& f : kFields)
    if (f.accepts(kRouteKey) && (f.route_key == key || alias_is(f, kRouteKey, key))) return &f;
  return nullptr;
}

std::string field_names(EntryPoint from, std::size_t width) {
  std::string out, line;
  for (const auto& f : kFields) {
    if (!f.accepts(from)) continue;
    std::string name = std::string(from == kRouteKey ? f.route_key : from == kFlag ? f.flag : f.name);
    if (!line.empty() && line.size() + name.size() + 2 > width) out += line + "\n", line.clear();
    line += (line.empty() ? "" : " ") + name + ",";
  }
  if (!line.empty()) line.pop_back();
  return out + line;
}

Status apply_flag(const RequestField& field, Job& job, const char* text) {
  FieldValue value;
  std::string key;
  if (field.shape == FieldShape::toggle) {
    value = FieldValue::of_boolean(true);
  } else if (!field.flag_sets.empty()) {
    value = FieldValue::of_text(std::string(field.flag_sets));
  } else if (field.shape == FieldShape::table) {
    std::string_view spec = text ? text : "";
    auto eq = spec.find('=');
    if (eq == std::string_view::npos)
      return Error::invalid("--" + std::string(field.flag) + ": expected " + std::string(field.value_name) +
                            ", got " + quote_input(spec));
    key = std::string(spec.substr(0, eq));
    value = FieldValue::of_text(std::string(spec.substr(eq + 1)));
  } else {
    value = FieldValue::of_text(text ? text : "");
  }
  Status st = field.apply(job, value, key);
  if (!st) return Error(st.error().code(), "--" + std::string(field.flag) + ": " + st.error().message());
  return {};
}

Status apply_value(const RequestField& field, Job& job, const FieldValue& value, const FieldErrorAt& where) {
  auto one = [&](std::string_view suffix, const FieldValue& node, std::string_view key) -> Status {
    Status st = field.apply(job, node, key);
    if (!st) return where(suffix, node, st.error());
    return {};
  };
  switch (field.shape) {
    case FieldShape::one:
    case FieldShape::toggle: return one("", value, "");
    case FieldShape::list:
      if (value.type != Type::list) return where("", value, wrong_type(value, "an array"));
      if (field.clear) field.clear(job);
      for (std::size_t i = 0; i < value.items.size(); ++i)
        if (Status st = one("[" + std::to_string(i + 1) + "]", value.items[i], ""); !st) return st;
      return {};
    case FieldShape::table:
      if (value.type != Type::table) return where("", value, wrong_type(value, "a table (object) of names and values"));
      if (field.clear) field.clear(job);
      for (const auto& [key, item] : value.entries)
        if (Status st = one("." + key, item, key); !st) return st;
      return {};
  }
  return {};
}

Status check_asked_network(const Request& request, const Ask& ask) {
  if (ask.given.net == NetworkAccess::host && request.tier == Tier::container && ask.route.empty())
    return Error::invalid(net_host_in_container());
  return {};
}

Status finish_job(Job& job) {
  Request& r = job.request;
  if (r.payload && r.payload->filename.empty()) return Error::invalid("field 'interpreter' needs 'source'");
  if (r.payload && r.payload->interpreter.empty()) return Error::invalid("field 'source' needs 'interpreter'");
  if (r.argv.empty() && !r.payload) return Error::invalid("field 'argv' is missing or empty");
  if (Status st = check_asked_network(r, job.ask); !st) return st;
  return validate_request(r);
}

}  // namespace corral
