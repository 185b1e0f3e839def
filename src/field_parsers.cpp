// The parser of each request field (field_parsers.hpp).
#include "field_parsers.hpp"

#include <cstdlib>

#include "corral/container.hpp"
#include "corral/json.hpp"
#include "corral/names.hpp"

namespace corral::field_parsers {

namespace {

using Type = FieldValue::Type;

Error wrong_type(const FieldValue& v, std::string_view want) {
  return Error::invalid("must be " + std::string(want) + ", not " + type_name(v));
}

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// Text the kernel or the environment block will see: no NUL.
Expected<std::string> text_of(const FieldValue& v) {
  if (v.type != Type::text) return wrong_type(v, "a string");
  if (has_nul(v.text)) return Error::invalid("contains a NUL byte");
  return v.text;
}

// Any bytes (stdin, an input's bytes): a NUL is data.
Expected<std::string> bytes_of(const FieldValue& v) {
  if (v.type != Type::text) return wrong_type(v, "a string");
  return v.text;
}

Expected<std::string> path_of(const FieldValue& v) {
  auto text = text_of(v);
  if (text && text->empty()) return Error::invalid("empty path");
  return text;
}

Expected<bool> boolean_of(const FieldValue& v) {
  if (v.type != Type::boolean) return wrong_type(v, "true or false");
  return v.boolean;
}

Expected<std::string> variable_of(const FieldValue& v) {
  auto text = text_of(v);
  if (!text) return text;
  if (auto problem = variable_name_problem(*text); !problem.empty()) return Error::invalid(problem);
  return text;
}


// One optional path of the Request.
Status path_field(std::optional<std::string>& member, const FieldValue& v) {
  auto p = path_of(v);
  if (!p) return std::move(p).error();
  member = std::move(*p);
  return {};
}

Status bind_field(Job& j, const FieldValue& v, bool writable) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  auto b = parse_bind_spec(*text, writable);
  if (!b) return std::move(b).error();
  j.request.binds.push_back(std::move(*b));
  return {};
}

Status toggle_field(bool& member, const FieldValue& v) {
  auto b = boolean_of(v);
  if (!b) return std::move(b).error();
  member = *b;
  return {};
}

}  // namespace

// ---- one function per field (in table order) --------------------------------

Status tier(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  auto t = parse_tier(*text);
  if (!t) return std::move(t).error();
  j.request.tier = j.ask.given.tier.emplace(*t);
  return {};
}

Status provenance(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  auto p = parse_provenance(*text);
  if (!p) return std::move(p).error();
  j.ask.provenance = *p;
  return {};
}

// The one limit parser (limits.hpp) for every entry point: a number is
// written out as text first, so 0.25 and "0.25", 536870912 and "512MiB"
// mean the same.
Status limit(Job& j, const FieldValue& v, std::string_view name) {
  std::string text;
  if (v.type == Type::text || v.type == Type::integer) {
    text = v.text;
  } else if (v.type == Type::real) {
    auto known = limit_from_name(name);
    if (!known) return std::move(parse_limit_assignment(std::string(name) + "=0")).error();  // the unknown-name message
    auto raw = parse_limit_number(limit_info(*known), v.real);
    if (!raw) return std::move(raw).error();
    text = limit_value_text(limit_info(*known), *raw);
  } else {
    return wrong_type(v, "a number or a string such as \"512MiB\"");
  }
  auto parsed = parse_limit_assignment(std::string(name) + "=" + text);
  if (!parsed) return std::move(parsed).error();
  j.request.limits.set_raw(parsed->limit, parsed->raw);
  return {};
}

Status acknowledge(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  j.request.acknowledged.insert(std::move(*text));
  return {};
}

Status confine_writes(Job& j, const FieldValue& v, std::string_view) { return toggle_field(j.request.confine_writes, v); }

Status write_path(Job& j, const FieldValue& v, std::string_view) {
  auto p = path_of(v);
  if (!p) return std::move(p).error();
  j.request.write_paths.push_back(std::move(*p));
  return {};
}

Status net(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  if (*text == "none") j.request.net = NetworkAccess::none;
  else if (*text == "host") j.request.net = NetworkAccess::host;
  else return Error::invalid(quote_input(*text) + " is neither none nor host");
  j.ask.given.net = j.request.net;
  return {};
}

Status loopback(Job& j, const FieldValue& v, std::string_view) { return toggle_field(j.request.loopback, v); }

Status env(Job& j, const FieldValue& v, std::string_view name) {
  if (auto problem = variable_name_problem(name); !problem.empty()) return Error::invalid(problem);
  if (v.type != Type::text) return wrong_type(v, "a string");
  if (has_nul(v.text)) return Error::invalid("the value contains a NUL byte");
  j.request.env[std::string(name)] = v.text;
  return {};
}

Status pass_env(Job& j, const FieldValue& v, std::string_view) {
  auto name = variable_of(v);
  if (!name) return std::move(name).error();
  j.request.pass_env.push_back(*name);
  j.ask.given.pass_env.push_back(std::move(*name));
  return {};
}

Status secret_env(Job& j, const FieldValue& v, std::string_view) {
  auto name = variable_of(v);
  if (!name) return std::move(name).error();
  j.request.secrets.push_back(SecretRef{*name, *name, {}});
  return {};
}

// A flag's HOSTPATH[:NAME] (NAME defaults to the base name), or a job's
// {"name", "bytes" | "host_path"}.
Status input(Job& j, const FieldValue& v, std::string_view) {
  Input in;
  if (v.type == Type::text) {
    auto spec = text_of(v);
    if (!spec) return std::move(spec).error();
    auto colon = spec->rfind(':');
    in.host_path = colon == std::string::npos ? *spec : spec->substr(0, colon);
    std::string name = colon == std::string::npos ? *spec : spec->substr(colon + 1);
    auto slash = name.rfind('/');
    in.name = (colon == std::string::npos && slash != std::string::npos) ? name.substr(slash + 1) : name;
  } else if (v.type == Type::table) {
    bool named = false;
    for (const auto& [key, item] : v.entries) {
      if (key != "name" && key != "bytes" && key != "host_path")
        return Error::invalid("unknown field " + quote_input(key) + " (name, bytes, host_path)");
      Expected<std::string> text = key == "bytes" ? bytes_of(item) : path_of(item);
      if (!text) return text.error().context(key);
      if (key == "name") in.name = std::move(*text), named = true;
      else if (key == "bytes") in.bytes = std::move(*text);
      else in.host_path = std::move(*text);
    }
    if (!named) return Error::invalid("an input needs a string 'name'");
    if (in.bytes.has_value() == in.host_path.has_value())
      return Error::invalid("input " + quote_input(in.name) + ": give exactly one of 'bytes' and 'host_path'");
  } else {
    return wrong_type(v, "an object {name, bytes | host_path}");
  }
  if (in.name.empty() || (in.host_path && in.host_path->empty())) return Error::invalid("empty path");
  j.request.inputs.push_back(std::move(in));
  return {};
}

Status output(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  j.request.outputs.push_back(std::move(*text));
  return {};
}


Status artifact_root(Job& j, const FieldValue& v, std::string_view) { return path_field(j.request.artifact_root, v); }
Status cwd(Job& j, const FieldValue& v, std::string_view) { return path_field(j.request.cwd, v); }
Status chdir(Job& j, const FieldValue& v, std::string_view) { return path_field(j.request.chdir, v); }
Status rootfs(Job& j, const FieldValue& v, std::string_view) { return path_field(j.request.rootfs, v); }
Status ro_bind(Job& j, const FieldValue& v, std::string_view) { return bind_field(j, v, false); }
Status bind(Job& j, const FieldValue& v, std::string_view) { return bind_field(j, v, true); }
Status binary_output(Job& j, const FieldValue& v, std::string_view) { return toggle_field(j.request.binary_output, v); }
Status merge_output(Job& j, const FieldValue& v, std::string_view) { return toggle_field(j.request.merge_output, v); }

// A flag's decimal text or a job's integer; never 0, never 4294967295.
Status user(Job& j, const FieldValue& v, std::string_view) {
  if (v.type != Type::text && v.type != Type::integer) return wrong_type(v, "a uid (a positive integer)");
  auto uid = parse_run_user(v.text);
  if (!uid) return std::move(uid).error();
  j.request.user = *uid;
  return {};
}

Status tmpfs(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  auto t = parse_tmpfs_spec(*text);
  if (!t) return std::move(t).error();
  j.request.tmpfs.push_back(std::move(*t));
  return {};
}

Status dev_bind(Job& j, const FieldValue& v, std::string_view) {
  auto p = path_of(v);
  if (!p) return std::move(p).error();
  j.request.dev_binds.push_back(std::move(*p));
  return {};
}

// SIGTERM to SIGKILL: a timer armed from a double (NaN, infinities and
// huge values do not convert to a timespec).
Status grace(Job& j, const FieldValue& v, std::string_view) {
  double g = v.real;
  if (v.type == Type::text || v.type == Type::integer) {
    char* end = nullptr;
    g = std::strtod(v.text.c_str(), &end);
    if (v.text.empty() || *end != '\0') return Error::invalid(quote_input(v.text) + " is not a number of seconds");
  } else if (v.type != Type::real) {
    return wrong_type(v, "a number of seconds");
  }
  if (!(g >= 0 && g <= 3600)) return Error::invalid("must be between 0 and 3600 seconds");
  j.request.grace_seconds = g;
  return {};
}

constexpr const char* kOneStdin = "give one of 'stdin_text' (text; also 'stdin') and 'stdin_b64' (bytes, base64), not both";

// --stdin-text given twice: the last one counts, as for every one-value flag.
Status stdin_text(Job& j, const FieldValue& v, std::string_view) {
  auto text = bytes_of(v);
  if (!text) return std::move(text).error();
  if (j.stdin_from == "stdin_b64") return Error::invalid(kOneStdin);
  j.request.stdin_text = std::move(*text);
  j.stdin_from = "stdin_text";
  return {};
}

// A job's keys come in sorted order (nlohmann's object): "stdin" before
// "stdin_b64" before "stdin_text"; the later of two finds the first's mark.
Status stdin_b64(Job& j, const FieldValue& v, std::string_view) {
  auto text = bytes_of(v);
  if (!text) return std::move(text).error();
  if (!j.stdin_from.empty()) return Error::invalid(kOneStdin);
  auto bytes = base64_decode(*text);
  if (!bytes) return std::move(bytes).error();
  j.request.stdin_text = std::move(*bytes);
  j.stdin_from = "stdin_b64";
  return {};
}

Status on_output_limit(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  auto p = parse_output_limit_policy(*text);
  if (!p) return std::move(p).error();
  j.request.on_output_limit = *p;
  return {};
}

Status route(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  if (text->empty()) return Error::invalid("must be a route's name, not empty");
  j.ask.route = std::move(*text);
  return {};
}

Status id(Job& j, const FieldValue& v, std::string_view) {
  if (v.type == Type::integer) {
    j.request.id = v.text;
    return {};
  }
  if (v.type != Type::text) return wrong_type(v, "a string or an integer");
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  j.request.id = std::move(*text);
  return {};
}

Status argv(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  j.request.argv.push_back(std::move(*text));
  return {};
}

namespace {
// source and interpreter fill one payload; finish_job checks that both
// came (a payload made by interpreter alone has no filename yet).
ProgramPayload& payload(Job& j) {
  if (!j.request.payload) j.request.payload = ProgramPayload{"", {}, ""};
  return *j.request.payload;
}
}  // namespace

Status source(Job& j, const FieldValue& v, std::string_view) {
  auto text = bytes_of(v);
  if (!text) return std::move(text).error();
  payload(j).source = std::move(*text);
  payload(j).filename = "program";
  return {};
}

Status interpreter(Job& j, const FieldValue& v, std::string_view) {
  auto text = text_of(v);
  if (!text) return std::move(text).error();
  payload(j).interpreter.push_back(std::move(*text));
  return {};
}

Status session(Job&, const FieldValue&, std::string_view) {
  return Error::invalid("is read by corral batch (a job in a warm session), not by the job parser");
}

void clear_pass_env(Job& j) {
  j.request.pass_env.clear();
  j.ask.given.pass_env.clear();
}

}  // namespace corral::field_parsers
