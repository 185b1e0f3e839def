#include "corral/json.hpp"

#include <nlohmann/json.hpp>

#include "corral/capture.hpp"
#include "corral/container.hpp"
#include "corral/door.hpp"
#include "corral/names.hpp"

namespace corral {
namespace {

using nlohmann::json;

Expected<std::vector<std::string>> strings(const json& v, const char* field) {
  if (!v.is_array()) return Error::invalid(std::string("field '") + field + "' must be an array of strings");
  std::vector<std::string> out;
  for (const auto& item : v) {
    if (!item.is_string()) return Error::invalid(std::string("field '") + field + "' must be an array of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

// Each value goes through the one limit parser (limits.hpp): a number is
// written out as text first, so 0.25 and "0.25", 536870912 and "512MiB"
// mean the same.
Status parse_limits(const json& v, Limits& limits) {
  if (!v.is_object()) return Error::invalid("field 'limits' must be an object of NAME: number or \"text\"");
  for (const auto& [name, value] : v.items()) {
    std::string text;
    if (value.is_number_unsigned()) text = std::to_string(value.get<std::uint64_t>());
    else if (value.is_number_integer()) text = std::to_string(value.get<long long>());
    else if (value.is_string()) text = value.get<std::string>();
    else if (!value.is_number_float())
      return Error::invalid("limit " + quote_input(name) + ": value must be a number or a string such as \"512MiB\"");
    if (value.is_number_float()) {
      auto limit = limit_from_name(name);
      if (!limit) return std::move(parse_limit_assignment(name + "=0")).error();  // the unknown-name message
      auto raw = parse_limit_number(limit_info(*limit), value.get<double>());
      if (!raw) return std::move(raw).error();
      text = limit_value_text(limit_info(*limit), *raw);
    }
    auto parsed = parse_limit_assignment(name + "=" + text);
    if (!parsed) return std::move(parsed).error();
    limits.set_raw(parsed->limit, parsed->raw);
  }
  return {};
}

// nlohmann's message repeats the bad token, raw and whole ("last read:
// '...'": a megabyte string cut by a control byte is all of it; a number
// too large for any type, every digit): shown escaped and cut, like every
// input a message repeats.
std::string shown(std::string_view why) {
  constexpr std::size_t kMax = 300;
  std::string out = printable_name(why.substr(0, kMax));
  if (why.size() > kMax) out += "... (" + std::to_string(why.size()) + " bytes)";
  return out;
}

// nlohmann's parse_error carries the byte offset of the fault; its what()
// starts "[json.exception.parse_error.101] parse error at line L, column C: ".
Expected<json> parse_json(std::string_view text) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    std::string why = e.what();
    if (auto colon = why.find(": "); colon != std::string::npos) why = why.substr(colon + 2);
    return Error::invalid("not valid JSON at byte " + std::to_string(e.byte) + ": " + shown(why));
  } catch (const json::exception& e) {  // a number too large for any type: 406
    return Error::invalid(std::string("not valid JSON: ") + shown(e.what()));
  }
}

Expected<Job> parse_job(std::string_view text, bool door_fields) {
  auto parsed = parse_json(text);
  if (!parsed) return std::move(parsed).error();
  const json& j = *parsed;
  if (!j.is_object()) return Error::invalid("a job must be a JSON object");
  Job job;
  Request& r = job.request;
  Ask& ask = job.ask;
  std::optional<std::string> source;
  std::vector<std::string> interpreter;
  for (const auto& [key, v] : j.items()) {
    Status st;
    if (key == "id") {
      if (v.is_string()) r.id = v.get<std::string>();
      else if (v.is_number_integer()) r.id = std::to_string(v.get<long long>());
      else st = Error::invalid("field 'id' must be a string or an integer");
    } else if (key == "argv") {
      auto s = strings(v, "argv");
      if (!s) return std::move(s).error();
      r.argv = std::move(*s);
    } else if (key == "env") {
      if (!v.is_object()) return Error::invalid("field 'env' must be an object of strings");
      for (const auto& [k, val] : v.items()) {
        if (!val.is_string()) return Error::invalid("env " + quote_input(k) + ": value must be a string");
        r.env[k] = val.get<std::string>();
      }
    } else if (key == "pass_env") {
      auto s = strings(v, "pass_env");
      if (!s) return std::move(s).error();
      r.pass_env = *s;
      ask.given.pass_env = std::move(*s);
    } else if (key == "secret_env") {
      auto s = strings(v, "secret_env");
      if (!s) return std::move(s).error();
      for (auto& name : *s) r.secrets.push_back(SecretRef{name, name, {}});
    } else if (key == "limits") {
      st = parse_limits(v, r.limits);
    } else if (key == "tier") {
      if (!v.is_string()) return Error::invalid("field 'tier' must be a string");
      auto t = parse_tier(v.get<std::string>());
      if (!t) return std::move(t).error();
      r.tier = *t;
      ask.given.tier = *t;
    } else if (key == "inputs") {
      if (!v.is_array()) return Error::invalid("field 'inputs' must be an array");
      for (const auto& in : v) {
        if (!in.is_object() || !in.contains("name") || !in["name"].is_string())
          return Error::invalid("each input needs a string 'name'");
        Input input;
        input.name = in["name"].get<std::string>();
        for (const auto& [ik, iv] : in.items()) {
          if (ik == "name") continue;
          if (ik == "bytes" && iv.is_string()) input.bytes = iv.get<std::string>();
          else if (ik == "host_path" && iv.is_string()) input.host_path = iv.get<std::string>();
          else return Error::invalid("input " + quote_input(input.name) + ": unknown or mistyped field " + quote_input(ik));
        }
        if (input.bytes.has_value() == input.host_path.has_value())
          return Error::invalid("input " + quote_input(input.name) + ": give exactly one of 'bytes' and 'host_path'");
        r.inputs.push_back(std::move(input));
      }
    } else if (key == "outputs") {
      auto s = strings(v, "outputs");
      if (!s) return std::move(s).error();
      r.outputs = std::move(*s);
    } else if (key == "stdin" || key == "stdin_b64") {
      if (!v.is_string()) return Error::invalid("field '" + key + "' must be a string");
      if (r.stdin_text) return Error::invalid("give one of 'stdin' (text) and 'stdin_b64' (bytes, base64), not both");
      if (key == "stdin") {
        r.stdin_text = v.get<std::string>();
      } else {
        auto bytes = base64_decode(v.get<std::string>());
        if (!bytes) return std::move(bytes).error().context("field 'stdin_b64'");
        r.stdin_text = std::move(*bytes);
      }
    } else if (key == "binary_output") {
      if (!v.is_boolean()) return Error::invalid("field 'binary_output' must be true or false");
      r.binary_output = v.get<bool>();
    } else if (key == "source") {
      if (!v.is_string()) return Error::invalid("field 'source' must be a string");
      source = v.get<std::string>();
    } else if (key == "interpreter") {
      auto s = strings(v, "interpreter");
      if (!s) return std::move(s).error();
      interpreter = std::move(*s);
    } else if (key == "cwd" || key == "chdir") {
      if (!v.is_string()) return Error::invalid("field '" + key + "' must be a string");
      (key == "cwd" ? r.cwd : r.chdir) = v.get<std::string>();
    } else if (key == "tmpfs") {
      auto s = strings(v, "tmpfs");
      if (!s) return std::move(s).error();
      for (const auto& spec : *s) {
        auto t = parse_tmpfs_spec(spec);
        if (!t) return std::move(t).error();
        r.tmpfs.push_back(std::move(*t));
      }
    } else if (key == "dev_binds") {
      auto s = strings(v, "dev_binds");
      if (!s) return std::move(s).error();
      r.dev_binds = std::move(*s);
    } else if (key == "merge_output" || key == "confine_writes" || key == "loopback") {
      if (!v.is_boolean()) return Error::invalid("field '" + key + "' must be true or false");
      (key == "merge_output" ? r.merge_output : key == "loopback" ? r.loopback : r.confine_writes) = v.get<bool>();
    } else if (key == "write_paths") {
      auto s = strings(v, "write_paths");
      if (!s) return std::move(s).error();
      r.write_paths = std::move(*s);
    } else if (key == "net") {
      if (v == "none") r.net = NetworkAccess::none;
      else if (v == "host") r.net = NetworkAccess::host;
      else return Error::invalid("field 'net' must be \"none\" or \"host\"");
      ask.given.net = r.net;
    } else if (door_fields && key == "route") {
      if (!v.is_string() || v.get<std::string>().empty()) return Error::invalid("field 'route' must be a route's name");
      ask.route = v.get<std::string>();
    } else if (door_fields && key == "provenance") {
      if (!v.is_string()) return Error::invalid("field 'provenance' must be \"trusted\" or \"untrusted\"");
      auto p = parse_provenance(v.get<std::string>());
      if (!p) return std::move(p).error().context("field 'provenance'");
      ask.provenance = *p;
    } else if (key == "acknowledge") {
      auto s = strings(v, "acknowledge");
      if (!s) return std::move(s).error();
      r.acknowledged.insert(s->begin(), s->end());
    } else if (key == "grace_seconds") {
      if (!v.is_number()) return Error::invalid("field 'grace_seconds' must be a number");
      r.grace_seconds = v.get<double>();
    } else if (key == "on_output_limit") {
      if (!v.is_string()) return Error::invalid("field 'on_output_limit' must be \"truncate\" or \"kill\"");
      auto p = parse_output_limit_policy(v.get<std::string>());
      if (!p) return std::move(p).error();
      r.on_output_limit = *p;
    } else if (key == "rootfs") {
      if (!v.is_string()) return Error::invalid("field 'rootfs' must be a string");
      r.rootfs = v.get<std::string>();
    } else if (key == "ro_binds" || key == "binds") {
      auto s = strings(v, key.c_str());
      if (!s) return std::move(s).error();
      for (const auto& spec : *s) {
        auto b = parse_bind_spec(spec, key == "binds");
        if (!b) return std::move(b).error();
        r.binds.push_back(std::move(*b));
      }
    } else if (key == "user") {
      if (!v.is_number_unsigned()) return Error::invalid("field 'user' must be a uid (a positive integer)");
      if (auto ok = check_run_user(v.get<std::uint64_t>()); !ok) return ok.error().context("field 'user'");
      r.user = static_cast<uid_t>(v.get<std::uint64_t>());
    } else if (key == "artifact_root") {
      if (!v.is_string()) return Error::invalid("field 'artifact_root' must be a string");
      r.artifact_root = v.get<std::string>();
    } else {
      return Error::invalid("unknown field " + quote_input(key));
    }
    if (!st) return st.error();
  }
  if (source) {
    if (interpreter.empty()) return Error::invalid("field 'source' needs 'interpreter'");
    r.payload = ProgramPayload{*source, interpreter, "program"};
  } else if (!interpreter.empty()) {
    return Error::invalid("field 'interpreter' needs 'source'");
  }
  if (r.argv.empty() && !r.payload) return Error::invalid("field 'argv' is missing or empty");
  if (ask.given.net == NetworkAccess::host && r.tier == Tier::container && ask.route.empty())
    return Error::invalid(net_host_in_container());
  if (Status st = validate_request(r); !st) return st.error();
  return job;
}

}  // namespace

Expected<Job> job_from_json(std::string_view text) { return parse_job(text, true); }

Expected<Request> request_from_json(std::string_view text) {
  auto job = parse_job(text, false);
  if (!job) return std::move(job).error();
  return std::move(job->request);
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto at = [&](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
  for (; i + 3 <= bytes.size(); i += 3) {
    std::uint32_t v = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], kAlphabet[v & 63]};
  }
  if (std::size_t rest = bytes.size() - i; rest > 0) {
    std::uint32_t v = at(i) << 16 | (rest == 2 ? at(i + 1) << 8 : 0);
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], rest == 2 ? kAlphabet[(v >> 6) & 63] : '=', '='};
  }
  return out;
}

Expected<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return Error::invalid("not base64: the length is not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    int pad = (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=');
    if (pad > 0 && i + 4 != text.size()) return Error::invalid("not base64: '=' before the end");
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      int d = k >= 4 - pad ? 0 : value(text[i + static_cast<std::size_t>(k)]);
      if (d < 0) return Error::invalid("not base64: byte " + std::to_string(i + static_cast<std::size_t>(k) + 1));
      v = v << 6 | static_cast<std::uint32_t>(d);
    }
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

// Every key is present in every Result (schema/result.schema.json): one that
// does not apply to this outcome is null, a list with nothing in it is [].
std::string result_to_json(const Result& r, long line) {
  json j;
  j["schema_version"] = kResultSchemaVersion;
  j["id"] = r.id.empty() ? json(nullptr) : json(r.id);
  j["line"] = line > 0 ? json(line) : json(nullptr);
  j["run_id"] = r.run_id;
  j["outcome"] = std::string(to_string(r.outcome));
  j["exit_code"] = r.outcome == Outcome::exited ? json(r.exit_code) : json(nullptr);
  j["signal"] = r.signal > 0 ? json(r.signal) : json(nullptr);
  // The limit that ended the run: killed_resource always names one,
  // killed_oom memory_bytes.
  bool limited = r.outcome == Outcome::killed_resource || (r.outcome == Outcome::killed_oom && !r.resource.empty());
  j["resource"] = limited ? json(r.resource) : json(nullptr);
  bool failed = r.outcome == Outcome::spawn_failed;
  j["spawn_stage"] = failed ? json(r.spawn_stage) : json(nullptr);
  j["spawn_errno"] = failed ? json(r.spawn_errno) : json(nullptr);
  // The reason, without the limits the detail goes on to list.
  j["error"] = failed ? json(to_utf8_lossy(r.detail.substr(0, r.detail.find("; ")))) : json(nullptr);
  auto stream = [&](const char* name, const CapturedStream& c) {
    std::string n(name);
    j[n] = to_utf8_lossy(c.text);
    // The kept bytes exactly (secrets already masked as ***), for a judge
    // that compares bytes: the text above replaces invalid UTF-8.
    if (r.binary_output) j[n + "_b64"] = base64_encode(c.text);
    j[n + "_bytes"] = c.bytes;
    j[n + "_truncated"] = c.truncated;
    j[n + "_sha256"] = c.sha256;
  };
  stream("stdout", r.stdout_capture);
  stream("stderr", r.stderr_capture);
  j["wall_seconds"] = r.wall_seconds;
  j["cpu_seconds"] = r.cpu_seconds;
  j["cpu_wait_seconds"] = r.cpu_wait_seconds ? json(*r.cpu_wait_seconds) : json(nullptr);
  j["cpu_starved"] = r.cpu_starved();
  j["kill_confirmed"] = r.kill_confirmed ? json(*r.kill_confirmed) : json(nullptr);
  j["max_rss_bytes"] = r.max_rss_bytes;
  json arts = json::array();
  for (const auto& a : r.artifacts)
    arts.push_back(json{{"name", a.name}, {"bytes", a.bytes}, {"sha256", a.sha256},
                        {"path", a.path.empty() ? json(nullptr) : json(a.path)}});
  j["artifacts"] = std::move(arts);
  j["artifact_notes"] = r.artifact_notes;
  json limits = json::object();
  for (const auto& info : all_limits())
    if (auto v = r.limits.raw(info.limit)) {
      // Whole values stay integers (what readers of "wall_seconds": 600
      // expect); a fraction is a number of seconds (0.25).
      if (*v % info.scale == 0) limits[std::string(info.name)] = *v / info.scale;
      else limits[std::string(info.name)] = *r.limits.seconds(info.limit);
    }
  j["limits"] = std::move(limits);
  j["enforcement"] = r.enforcement;
  j["tier"] = r.tier;
  j["env_path"] = r.env_path;
  j["detail"] = r.detail;
  json timings = json::object();
  for (const auto& [name, seconds] : timing_fields(r.timings)) timings[name] = seconds;
  if (!r.timings.exec) timings["exec"] = nullptr;  // tier container: not measured
  j["timings"] = std::move(timings);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string job_id_of(std::string_view text) {
  json j = json::parse(text, nullptr, false);  // a malformed line has no id
  if (j.is_discarded() || !j.is_object() || !j.contains("id")) return "";
  const json& id = j["id"];
  if (id.is_string()) return id.get<std::string>();
  if (id.is_number_integer()) return std::to_string(id.get<long long>());
  return "";
}

std::string error_to_json(std::string_view id, long line, std::string_view message) {
  json j;
  j["schema_version"] = kResultSchemaVersion;
  j["id"] = id.empty() ? json(nullptr) : json(std::string(id));
  j["line"] = line;
  j["outcome"] = "error";
  j["error"] = to_utf8_lossy(message);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace corral
