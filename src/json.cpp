#include "corral/json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "corral/capture.hpp"
#include "corral/door.hpp"
#include "corral/names.hpp"
#include "corral/request_fields.hpp"

namespace corral {
namespace {

using nlohmann::json;

// A JSON value as the field table takes it (request_fields.hpp). Strings
// are moved out of the tree, so a job's bytes are held once more only
// while its field is applied, as before the table.
FieldValue field_value(json& v) {
  FieldValue out;
  using Type = FieldValue::Type;
  switch (v.type()) {
    case json::value_t::string: out.text = std::move(v.get_ref<std::string&>()); break;
    case json::value_t::number_unsigned:
      out.type = Type::integer;
      out.text = std::to_string(v.get<std::uint64_t>());
      break;
    case json::value_t::number_integer:
      out.type = Type::integer;
      out.text = std::to_string(v.get<long long>());
      break;
    case json::value_t::number_float:
      out.type = Type::real;
      out.real = v.get<double>();
      break;
    case json::value_t::boolean: out = FieldValue::of_boolean(v.get<bool>()); break;
    case json::value_t::array:
      out.type = Type::list;
      for (auto& item : v) out.items.push_back(field_value(item));
      break;
    case json::value_t::object:
      out.type = Type::table;
      for (auto& [key, item] : v.items()) out.entries.emplace_back(key, field_value(item));
      break;
    case json::value_t::null:
      out.type = Type::other;
      out.other = "null";
      break;
    default:
      out.type = Type::other;
      out.other = "a binary value";
      break;
  }
  return out;
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

// A key given twice in one object. nlohmann keeps the last; another reader
// of the same line (a reviewer's tool, a policy check before corral) may
// keep the first, so one line could ask that reader for tier container and
// us for tier none. Refused whole, naming the key. Fed nlohmann's parse
// events; `duplicate` is the dotted name of the first key given twice.
class DuplicateKeys {
 public:
  bool on(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        path_.push_back(std::exchange(key_, {}));
        seen_.emplace_back();
        break;
      case json::parse_event_t::array_start:
        path_.push_back(std::exchange(key_, {}));
        break;
      case json::parse_event_t::object_end:
        seen_.pop_back();
        path_.pop_back();
        break;
      case json::parse_event_t::array_end:
        path_.pop_back();
        break;
      case json::parse_event_t::key:
        key_ = parsed.get<std::string>();
        if (!seen_.empty() && !seen_.back().insert(key_).second && duplicate.empty()) {
          for (const auto& part : path_)
            if (!part.empty()) duplicate += part + ".";
          duplicate += key_;
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;  // keep everything: the check only looks
  }
  std::string duplicate;

 private:
  std::vector<std::string> path_;              // the key each open object or array was given under
  std::vector<std::set<std::string>> seen_;    // the keys of each open object so far
  std::string key_;                            // the key of the value that comes next
};

// nlohmann's parse_error carries the byte offset of the fault; its what()
// starts "[json.exception.parse_error.101] parse error at line L, column C: ".
Expected<json> parse_json(std::string_view text) {
  if (Status st = check_json_depth(text); !st) return st.error();
  try {
    DuplicateKeys keys;
    json j = json::parse(text, [&](int, json::parse_event_t event, json& parsed) { return keys.on(event, parsed); });
    if (!keys.duplicate.empty())
      return Error::invalid("field " + quote_input(keys.duplicate) + " is given twice (a key may appear once in an object)");
    return j;
  } catch (const json::parse_error& e) {
    std::string why = e.what();
    if (auto colon = why.find(": "); colon != std::string::npos) why = why.substr(colon + 2);
    return Error::invalid("not valid JSON at byte " + std::to_string(e.byte) + ": " + shown(why));
  } catch (const json::exception& e) {  // a number too large for any type: 406
    return Error::invalid(std::string("not valid JSON: ") + shown(e.what()));
  }
}

// Every key goes through the field table: the same parser, and the same
// reason text, as the flag and the routes key of the same field.
Expected<Job> parse_job(std::string_view text, bool door_fields) {
  auto parsed = parse_json(text);
  if (!parsed) return std::move(parsed).error();
  json& j = *parsed;
  if (!j.is_object()) return Error::invalid("a job must be a JSON object");
  Job job;
  for (auto& [key, v] : j.items()) {
    const RequestField* field = field_named(key);
    // route and provenance ask something of the door: job_from_json only.
    bool door_field = key == "route" || key == "provenance";
    if (!field || !field->accepts(kJobField) || (door_field && !door_fields))
      return Error::invalid("unknown field " + quote_input(key));
    Status st = apply_value(*field, job, field_value(v), [&](std::string_view suffix, const FieldValue&, const Error& why) {
      return Error(why.code(), "field " + quote_input(key + std::string(suffix)) + ": " + why.message());
    });
    if (!st) return st.error();
  }
  if (Status st = finish_job(job); !st) return st.error();
  return job;
}

}  // namespace

Expected<Job> job_from_json(std::string_view text) { return parse_job(text, true); }

std::optional<Job> job_as_read(std::string_view text) {
  auto parsed = parse_json(text);
  if (!parsed || !parsed->is_object()) return std::nullopt;
  Job job;
  for (auto& [key, v] : parsed->items())
    if (const RequestField* field = field_named(key); field && field->accepts(kJobField))
      (void)apply_value(*field, job, field_value(v), [](std::string_view, const FieldValue&, const Error& why) { return why; });
  return job;
}

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
namespace {

// result_to_json's object with the streams' values empty: ResultJson fills
// them in as it writes.
std::string result_skeleton(const Result& r, long line) {
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
    // to_utf8_lossy(c.text), made by ResultJson a part at a time.
    j[n] = "";
    // The kept bytes exactly (secrets already masked as ***), for a judge
    // that compares bytes: the text above replaces invalid UTF-8.
    if (r.binary_output) j[n + "_b64"] = "";
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
  j["refused_syscalls"] = r.refused_syscalls;
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

// How much of a stream one part takes: 64 KiB is at most 384 KiB of JSON
// (every byte a NUL, \u0000).
constexpr std::size_t kPartBytes = 64 * 1024;

// Where a part of `text` from `from` may end: not inside a character
// to_utf8_lossy would read whole. A byte that is not a continuation byte
// (10xxxxxx) always starts what to_utf8_lossy reads next; failing one in the
// last four bytes, no character (at most four bytes) spans the cut.
std::size_t cut_at(std::string_view text, std::size_t from, std::size_t want) {
  std::size_t end = from + want;
  if (end >= text.size()) return text.size();
  for (std::size_t back = 0; back < 4 && end - back > from; ++back)
    if ((static_cast<unsigned char>(text[end - back]) & 0xC0) != 0x80) return end - back;
  return end;
}

}  // namespace

ResultJson::ResultJson(const Result& r, long line, bool borrow,
                       const std::function<std::string(std::string_view)>& tag)
    : skeleton_(result_skeleton(r, line)) {
  if (tag) skeleton_ = tag(skeleton_);
  const CapturedStream* streams[2] = {&r.stdout_capture, &r.stderr_capture};
  for (int i = 0; i < 2; ++i) {
    if (borrow) {
      text_[i] = streams[i]->text;
    } else {
      owned_[i] = streams[i]->text;
      text_[i] = owned_[i];
    }
  }
  // A key's `"name":""` with raw quotes occurs once: inside a string value
  // every quote is escaped, and these keys are top-level keys of ours.
  auto place = [&](const char* key, int stream, bool base64) {
    std::string pattern = std::string("\"") + key + "\":\"\"";
    auto at = skeleton_.find(pattern);
    if (at != std::string::npos) slots_.push_back({at + pattern.size() - 1, stream, base64});
  };
  place("stdout", 0, false);
  place("stderr", 1, false);
  if (r.binary_output) {
    place("stdout_b64", 0, true);
    place("stderr_b64", 1, true);
  }
  std::sort(slots_.begin(), slots_.end(), [](const Slot& a, const Slot& b) { return a.at < b.at; });
}

std::string ResultJson::part(const Slot& slot, std::size_t from, std::size_t& next_from) const {
  std::string_view text = text_[slot.stream];
  if (slot.base64) {
    // Whole groups of three bytes until the last part: the parts' base64 is
    // the whole's.
    std::size_t take = std::min(kPartBytes - kPartBytes % 3, text.size() - from);
    next_from = from + take;
    return base64_encode(text.substr(from, take));
  }
  next_from = cut_at(text, from, kPartBytes);
  std::string escaped = json(to_utf8_lossy(text.substr(from, next_from - from)))
                            .dump(-1, ' ', false, json::error_handler_t::replace);
  return escaped.substr(1, escaped.size() - 2);  // the quotes are the skeleton's
}

std::string ResultJson::next() {
  while (slot_ < slots_.size()) {
    const Slot& slot = slots_[slot_];
    if (skeleton_pos_ < slot.at) {
      std::string out = skeleton_.substr(skeleton_pos_, slot.at - skeleton_pos_);
      skeleton_pos_ = slot.at;
      return out;
    }
    if (text_pos_ < text_[slot.stream].size()) {
      std::size_t next_from = 0;
      std::string out = part(slot, text_pos_, next_from);
      text_pos_ = next_from;
      if (!out.empty()) return out;
      continue;
    }
    ++slot_;
    text_pos_ = 0;
  }
  std::string out = skeleton_.substr(std::min(skeleton_pos_, skeleton_.size()));
  skeleton_pos_ = skeleton_.size();
  return out;
}

std::uint64_t ResultJson::size() const {
  std::uint64_t total = skeleton_.size();
  for (const Slot& slot : slots_)
    for (std::size_t from = 0, next_from = 0; from < text_[slot.stream].size(); from = next_from)
      total += part(slot, from, next_from).size();
  return total;
}

std::string result_to_json(const Result& r, long line) {
  ResultJson made(r, line, /*borrow=*/true);
  std::string out;
  for (std::string part = made.next(); !part.empty(); part = made.next()) out += part;
  return out;
}

Status check_json_depth(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return Error::invalid("nested deeper than " + std::to_string(kMaxJsonDepth) + " objects and arrays (at byte " +
                              std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's to refuse
    }
  }
  return {};
}

Status refuse_duplicate_keys(std::string_view text) {
  auto parsed = parse_json(text);
  if (!parsed) return std::move(parsed).error();
  return {};
}

std::string job_id_of(std::string_view text) {
  auto parsed = parse_json(text);  // a malformed line has no id, nor one that gives keys twice
  if (!parsed) return "";
  const json& j = *parsed;
  if (!j.is_object() || !j.contains("id")) return "";
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
