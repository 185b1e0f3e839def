// The one description of a request's fields (request_fields.hpp): the same
// invalid value gives the same reason from a `corral run` flag (the real
// binary), a batch job field (job_from_json, what corral batch calls) and a
// routes file key (parse_routes); every field is accepted by each entry
// point the table says, and refused cleanly by the others.
#include "corral/request_fields.hpp"

#include <map>

#include "cli_runner.hpp"
#include "corral/json.hpp"
#include "corral/routes_file.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::contains;
using corral_test::run_cli;

namespace {

// `corral run [args] -- true`: the flag's message, or "" when it ran.
std::string flag_error(std::vector<std::string> args) {
  std::vector<std::string> all{"run", "--tier", "none"};
  all.insert(all.end(), args.begin(), args.end());
  all.insert(all.end(), {"--", "true"});
  auto ran = run_cli(all);
  cr_assert_eq(ran.code, 2, "corral %s: exit %d: %s", args.front().c_str(), ran.code, ran.err.c_str());
  return ran.err;
}

std::string job_error(const std::string& line) {
  auto job = job_from_json(line);
  cr_assert(!job.ok(), "accepted: %s", line.c_str());
  return job.error().message();
}

// One route with `body` added (name, provenance and tier unless the body sets them).
std::string route_text(const std::string& key, const std::string& body) {
  std::string text = "[[route]]\nname = \"x\"\n";
  if (key != "provenance") text += "provenance = \"trusted\"\n";
  if (key != "tier") text += "tier = \"os_process\"\n";
  return text + body + "\n";
}

std::string route_error(const std::string& key, const std::string& body) {
  auto file = parse_routes(route_text(key, body), "t.toml");
  cr_assert(!file.ok(), "accepted: %s", body.c_str());
  return file.error().message();
}

void assert_has(const std::string& text, const std::string& want, const char* where) {
  cr_assert(contains(text, want), "%s: '%s' not in: %s", where, want.c_str(), text.c_str());
}

}  // namespace

TestSuite(request_fields);

// The reason comes from the field's one parser; each entry point only says
// where: "--limit: ", "field 'limits.wall_seconds': ", "t.toml:4: route
// 'x': key 'limits.wall_seconds': ".
Test(request_fields, the_same_invalid_value_gives_the_same_reason_from_a_flag_a_job_field_and_a_routes_key) {
  // A malformed limit.
  std::string limit = parse_limit_assignment("wall_seconds=abc").error().message();
  assert_has(flag_error({"--limit", "wall_seconds=abc"}), "corral: --limit: " + limit, "flag");
  assert_has(job_error(R"({"argv":["true"],"limits":{"wall_seconds":"abc"}})"), "field 'limits.wall_seconds': " + limit, "job");
  assert_has(route_error("limits", "limits = { wall_seconds = \"abc\" }"),
             "t.toml:5: route 'x': key 'limits.wall_seconds': " + limit, "route");

  // A secret's name that is not a variable name (a NUL cannot be in argv).
  std::string name = variable_name_problem("A=B");
  cr_assert(!name.empty());
  assert_has(flag_error({"--secret-env", "A=B"}), "corral: --secret-env: " + name, "flag");
  assert_has(job_error(R"({"argv":["true"],"secret_env":["A=B"]})"), "field 'secret_env[1]': " + name, "job");
  assert_has(route_error("secret_env", "secret_env = [\"A=B\"]"), "route 'x': key 'secret_env[1]': " + name, "route");
  // The old routes key, an alias: the same reason, the key as written.
  assert_has(route_error("secrets", "secrets = [\"A=B\"]"), "route 'x': key 'secrets[1]': " + name, "route");
  // And a NUL in one, from the two entry points that can carry it.
  assert_has(job_error(R"({"argv":["true"],"secret_env":["A\u0000B"]})"), "field 'secret_env[1]': contains a NUL byte", "job");
  assert_has(route_error("secrets", "secrets = [\"A\\u0000B\"]"), "key 'secrets[1]': contains a NUL byte", "route");

  // An unknown tier, output policy, passthrough name.
  std::string tier = parse_tier("vm").error().message();
  assert_has(flag_error({"--tier=vm"}), "corral: --tier: " + tier, "flag");
  assert_has(job_error(R"({"argv":["true"],"tier":"vm"})"), "field 'tier': " + tier, "job");
  assert_has(route_error("tier", "tier = \"vm\""), "route 'x': key 'tier': " + tier, "route");
  std::string policy = parse_output_limit_policy("stop").error().message();
  assert_has(flag_error({"--on-output-limit", "stop"}), "corral: --on-output-limit: " + policy, "flag");
  assert_has(job_error(R"({"argv":["true"],"on_output_limit":"stop"})"), "field 'on_output_limit': " + policy, "job");
  assert_has(route_error("on_output_limit", "on_output_limit = \"stop\""), "key 'on_output_limit': " + policy, "route");
  std::string pass = variable_name_problem("");
  assert_has(flag_error({"--pass-env="}), "corral: --pass-env: " + pass, "flag");
  assert_has(job_error(R"({"argv":["true"],"pass_env":[""]})"), "field 'pass_env[1]': " + pass, "job");
  assert_has(route_error("env_passthrough", "env_passthrough = [\"\"]"), "key 'env_passthrough[1]': " + pass, "route");

  // A wrong type says the same in JSON and TOML.
  assert_has(job_error(R"({"argv":["true"],"tier":3})"), "field 'tier': must be a string, not an integer", "job");
  assert_has(route_error("tier", "tier = 3"), "key 'tier': must be a string, not an integer", "route");
  assert_has(job_error(R"({"argv":["true"],"provenance":"maybe"})"),
             "field 'provenance': " + parse_provenance("maybe").error().message(), "job");
  assert_has(route_error("provenance", "provenance = \"maybe\""),
             "key 'provenance': " + parse_provenance("maybe").error().message(), "route");

  // A bad user, net host in tier container, an empty path: flags and jobs
  // (a route sets none of them).
  std::string root = parse_run_user("0").error().message();
  assert_has(flag_error({"--user", "0"}), "corral: --user: " + root, "flag");
  assert_has(job_error(R"({"argv":["true"],"user":0})"), "field 'user': " + root, "job");
  assert_has(job_error(R"({"argv":["true"],"user":4294967295})"), parse_run_user("4294967295").error().message(), "job");
  assert_has(flag_error({"--tier", "container", "--net", "host"}), "corral: " + net_host_in_container(), "flag");
  assert_has(job_error(R"({"argv":["true"],"tier":"container","net":"host"})"), net_host_in_container(), "job");
  for (const char* flag : {"cwd", "chdir", "rootfs", "artifact-root", "write-path", "dev-bind", "input"}) {
    const RequestField* field = field_by_flag(flag);
    cr_assert(field, "--%s", flag);
    assert_has(flag_error({std::string("--") + flag + "="}), std::string("corral: --") + flag + ": empty path", flag);
    std::string value = field->shape == FieldShape::list ? "[\"\"]" : "\"\"";
    if (field->name == "inputs") value = R"([{"name":"x","host_path":""}])";
    std::string line = R"({"argv":["true"],")" + std::string(field->name) + "\":" + value + "}";
    assert_has(job_error(line), "empty path", line.c_str());
  }
}

// A valid value of every field, as a flag's text (nullptr: a toggle), a
// JSON value and a TOML value. A field added to the table without a sample
// here fails below.
struct Sample {
  const char* flag;
  const char* json;
  const char* toml;
};

const std::map<std::string, Sample>& samples() {
  static const std::map<std::string, Sample> s{
      {"tier", {"none", "\"none\"", "\"os_process\""}},
      {"provenance", {nullptr, "\"trusted\"", "\"trusted\""}},
      {"limits", {"wall_seconds=5", "{\"wall_seconds\":5}", "{ wall_seconds = 5 }"}},
      {"acknowledge", {"process_count", "[\"process_count\"]", "[\"process_count\"]"}},
      {"confine_writes", {nullptr, "true", "true"}},
      {"write_paths", {"/tmp", "[\"/tmp\"]", "[\"/tmp\"]"}},
      {"net", {"none", "\"none\"", "\"none\""}},
      {"loopback", {nullptr, "true", "true"}},
      {"env", {"A=1", "{\"A\":\"1\"}", "{ A = \"1\" }"}},
      {"pass_env", {"HOME", "[\"HOME\"]", "[\"HOME\"]"}},
      {"secret_env", {"TOKEN", "[\"TOKEN\"]", "[\"TOKEN\"]"}},
      {"inputs", {"/etc/hostname", "[{\"name\":\"x\",\"bytes\":\"y\"}]", "[\"/etc/hostname\"]"}},
      {"outputs", {"*.txt", "[\"*.txt\"]", "[\"*.txt\"]"}},
      {"artifact_root", {"/tmp", "\"/tmp\"", "\"/tmp\""}},
      {"cwd", {"/tmp", "\"/tmp\"", "\"/tmp\""}},
      {"chdir", {"/tmp", "\"/tmp\"", "\"/tmp\""}},
      {"user", {"1000", "1000", "1000"}},
      {"rootfs", {"/srv/root", "\"/srv/root\"", "\"/srv/root\""}},
      {"ro_binds", {"/data:/in", "[\"/data:/in\"]", "[\"/data:/in\"]"}},
      {"binds", {"/out", "[\"/out\"]", "[\"/out\"]"}},
      {"tmpfs", {"/scratch:1M", "[\"/scratch:1M\"]", "[\"/scratch:1M\"]"}},
      {"dev_binds", {"/dev/null", "[\"/dev/null\"]", "[\"/dev/null\"]"}},
      {"grace_seconds", {"0.5", "0.5", "0.5"}},
      {"stdin_text", {"hello", "\"hello\"", "\"hello\""}},
      {"binary_output", {nullptr, "true", "true"}},
      {"on_output_limit", {"kill", "\"kill\"", "\"kill\""}},
      {"merge_output", {nullptr, "true", "true"}},
      {"route", {"grader", "\"grader\"", "\"grader\""}},
      {"argv", {"true", "[\"true\"]", "[\"true\"]"}},
      {"id", {"j1", "\"j1\"", "\"j1\""}},
      {"stdin_b64", {"aGk=", "\"aGk=\"", "\"aGk=\""}},
      {"source", {"print(1)", "\"print(1)\"", "\"print(1)\""}},
      {"interpreter", {"python3", "[\"python3\"]", "[\"python3\"]"}},
      {"session", {"x", "{\"scope\":\"s\",\"thread\":\"t\"}", "{ scope = \"s\" }"}},
  };
  return s;
}

Test(request_fields, every_field_is_accepted_where_the_table_says_and_refused_cleanly_elsewhere) {
  for (const RequestField& f : request_fields()) {
    std::string name(f.name);
    auto sample = samples().find(name);
    cr_assert(sample != samples().end(), "field %s has no sample in this test: add one", name.c_str());
    const Sample& s = sample->second;

    // Job field: the whole job parses (source needs interpreter); "session"
    // is corral batch's, taken off the line before the parser.
    std::string line = "{\"" + name + "\":" + s.json;
    if (name != "argv" && name != "source" && name != "interpreter") line += R"(,"argv":["true"])";
    if (name == "source") line += R"(,"interpreter":["python3"])";
    if (name == "interpreter") line += R"x(,"source":"print(1)")x";
    line += "}";
    auto job = job_from_json(line);
    if (f.accepts(kJobField) && name != "session") {
      cr_assert(job.ok(), "job field %s refused: %s", name.c_str(), job.ok() ? "" : job.error().message().c_str());
    } else {
      cr_assert(!job.ok(), "job field %s accepted though the table does not say so", name.c_str());
    }

    // Flag: `corral run --flag[=value] --help` parses the flag, then prints help.
    std::string flag = f.flag.empty() ? "--" + name : "--" + std::string(f.flag);
    for (char& c : flag) c = c == '_' ? '-' : c;
    std::vector<std::string> args{"run", s.flag && f.flag_takes_value() ? flag + "=" + s.flag : flag, "--help"};
    auto ran = run_cli(args);
    if (f.accepts(kFlag) && !f.flag.empty()) {
      cr_assert_eq(ran.code, 0, "%s refused: %s", args[1].c_str(), ran.err.c_str());
    } else {
      cr_assert_eq(ran.code, 2, "%s: exit %d", args[1].c_str(), ran.code);
      assert_has(ran.err, "unknown option " + flag, name.c_str());
    }

    // Routes key: the route parses, or the key is refused by name.
    std::string key = f.route_key.empty() ? name : std::string(f.route_key);
    auto routes = parse_routes(route_text(key, key + " = " + s.toml), "t.toml");
    if (f.accepts(kRouteKey)) {
      cr_assert(routes.ok(), "routes key %s refused: %s", key.c_str(), routes.ok() ? "" : routes.error().message().c_str());
    } else {
      // Refused by name: unknown, or (outputs) a route's own key of another shape.
      cr_assert(!routes.ok(), "routes key %s accepted though the table does not say so", key.c_str());
      assert_has(routes.error().message(), "key '" + key, key.c_str());
    }
  }
}

// A list from a job or a route replaces the field's default; flags add to
// it, as before the table: --pass-env HOME keeps PATH, "pass_env":
// ["HOME"] does not.
Test(request_fields, a_list_replaces_the_default_and_flags_add_to_it) {
  auto job = job_from_json(R"({"argv":["true"],"pass_env":["HOME"]})");
  cr_assert(job.ok());
  cr_assert(job->request.pass_env == std::vector<std::string>{"HOME"});
  Job flags;
  cr_assert(apply_flag(*field_by_flag("pass-env"), flags, "HOME").ok());
  cr_assert(flags.request.pass_env == (std::vector<std::string>{"PATH", "HOME"}));
  cr_assert(flags.ask.given.pass_env == std::vector<std::string>{"HOME"});
  auto file = parse_routes(route_text("pass_env", "pass_env = [\"HOME\"]"), "t.toml");
  cr_assert(file.ok());
  cr_assert(file->routes[0].env_passthrough == std::vector<std::string>{"HOME"});
  auto plain = parse_routes(route_text("", ""), "t.toml");
  cr_assert(plain.ok());
  cr_assert(plain->routes[0].env_passthrough == std::vector<std::string>{"PATH"});
}

// Every row is well formed: a flag field has help text and a value name
// when it takes a value, a routes key only where the route accepts it,
// and names are unique per entry point.
Test(request_fields, the_table_is_well_formed) {
  std::map<std::string, int> names, flags, keys;
  for (const RequestField& f : request_fields()) {
    cr_assert(f.apply, "%.*s has no parser", (int)f.name.size(), f.name.data());
    cr_assert_eq(++names[std::string(f.name)], 1, "job field %.*s twice", (int)f.name.size(), f.name.data());
    if (f.accepts(kFlag) && !f.flag.empty()) {
      cr_assert_eq(++flags[std::string(f.flag)], 1, "flag --%.*s twice", (int)f.flag.size(), f.flag.data());
      cr_assert(!f.help.empty(), "--%.*s has no help", (int)f.flag.size(), f.flag.data());
      cr_assert(!f.flag_takes_value() || !f.value_name.empty(), "--%.*s has no value name", (int)f.flag.size(),
                f.flag.data());
    }
    cr_assert_eq(f.accepts(kRouteKey), !f.route_key.empty(), "%.*s: route key and entry points disagree",
                 (int)f.name.size(), f.name.data());
    if (f.accepts(kRouteKey)) cr_assert_eq(++keys[std::string(f.route_key)], 1);
  }
}

// One name per field: the job field and the routes key are the field's
// name, the flag is that name with '-' (its singular for a repeatable flag
// of a list or table; a toggle that sets a value may read as it likes).
// Before, --grace was grace_seconds, --stdin-text was stdin, secrets was
// secret_env and env_passthrough was pass_env.
Test(request_fields, a_field_has_one_name_at_every_entry_point) {
  for (const RequestField& f : request_fields()) {
    std::string name(f.name);
    if (f.accepts(kRouteKey))
      cr_assert(f.route_key == f.name, "field %s: routes key %.*s", name.c_str(), (int)f.route_key.size(),
                f.route_key.data());
    if (!f.accepts(kFlag) || f.flag.empty() || !f.flag_sets.empty()) continue;
    std::string flag(f.flag);
    for (char& c : flag) c = c == '-' ? '_' : c;
    bool singular = (f.shape == FieldShape::list || f.shape == FieldShape::table) && flag + "s" == name;
    cr_assert(flag == name || singular, "field %s: flag --%.*s", name.c_str(), (int)f.flag.size(), f.flag.data());
  }
}

// Each old spelling stays accepted where it was, with the same effect.
Test(request_fields, the_old_spellings_are_aliases_with_the_same_effect) {
  cr_assert_eq(field_by_flag("grace"), field_named("grace_seconds"));
  cr_assert_eq(field_by_flag("grace-seconds"), field_named("grace_seconds"));
  cr_assert_eq(field_named("stdin"), field_named("stdin_text"));
  cr_assert_eq(field_by_route_key("secrets"), field_named("secret_env"));
  cr_assert_eq(field_by_route_key("env_passthrough"), field_named("pass_env"));
  cr_assert_null(field_by_flag("stdin"), "--stdin is corral run's own (a file), not the text field");
  cr_assert_null(field_by_route_key("grace_seconds"), "an alias is accepted only where its field is");

  auto old_job = job_from_json(R"({"argv":["cat"],"stdin":"hi"})");
  auto new_job = job_from_json(R"({"argv":["cat"],"stdin_text":"hi"})");
  cr_assert(old_job.ok() && new_job.ok());
  cr_assert(old_job->request.stdin_text == new_job->request.stdin_text);
  for (const char* both : {R"({"argv":["cat"],"stdin_text":"hi","stdin_b64":"aGk="})",
                           R"({"argv":["cat"],"stdin":"hi","stdin_b64":"aGk="})"})
    assert_has(job_error(both), "give one of 'stdin_text'", "job");

  for (const char* key : {"secrets", "secret_env"}) {
    auto file = parse_routes(route_text(key, std::string(key) + " = [\"TOKEN\"]"), "t.toml");
    cr_assert(file.ok(), "%s: %s", key, file.ok() ? "" : file.error().message().c_str());
    cr_assert(file->routes[0].secrets == std::vector<std::string>{"TOKEN"});
  }
  for (const char* key : {"env_passthrough", "pass_env"}) {
    auto file = parse_routes(route_text(key, std::string(key) + " = [\"HOME\"]"), "t.toml");
    cr_assert(file.ok(), "%s", key);
    cr_assert(file->routes[0].env_passthrough == std::vector<std::string>{"HOME"});
  }
  for (const char* flag : {"--grace=0.25", "--grace-seconds=0.25"}) {
    auto ran = run_cli({"run", "--tier", "none", flag, "--json", "--", "true"});
    cr_assert_eq(ran.code, 0, "%s: %s", flag, ran.err.c_str());
  }
}

// A key given twice in one object: our parser would keep the last, another
// reader of the job line (a reviewer's tool, a policy check in front of
// corral) may keep the first. The line is refused, naming the key, at any
// depth; the same key in two different objects is no repeat.
Test(request_fields, a_key_given_twice_in_one_object_is_refused_by_name) {
  const std::pair<const char*, const char*> lines[] = {
      {R"({"argv":["true"],"tier":"container","tier":"none"})", "'tier'"},
      {R"({"argv":["true"],"id":"a","id":"b"})", "'id'"},
      {R"({"argv":["true"],"limits":{"wall_seconds":1,"wall_seconds":900}})", "'limits.wall_seconds'"},
      {R"({"argv":["true"],"inputs":[{"name":"a","text":"1","name":"b"}]})", "'inputs.name'"},
      {R"({"argv":["true"],"env":{"A":"1","A":"2"}})", "'env.A'"},
  };
  for (const auto& [line, key] : lines) {
    std::string why = job_error(line);
    cr_expect(contains(why, key) && contains(why, "given twice"), "%s: %s", line, why.c_str());
    cr_expect_eq(job_id_of(line), "", "%s: an id was read from a line that gives keys twice", line);
  }
  auto fine = job_from_json(
      R"({"argv":["true"],"id":"x","inputs":[{"name":"a","bytes":"1"},{"name":"b","bytes":"2"}],"env":{"name":"n"}})");
  cr_assert(fine.ok(), "%s", fine.ok() ? "" : fine.error().message().c_str());
  cr_expect_eq(job_id_of(R"({"argv":["true"],"id":"x"})"), "x");
}

// The field values were walked recursively: 20,000 brackets under "env" in
// a 40 KB line overflowed the stack and ended the batch (SIGSEGV on the old
// code). Nesting past the cap is refused by name; a string full of
// brackets is no nesting.
Test(request_fields, a_line_nested_past_the_cap_is_refused_not_walked) {
  for (const char* field : {"env", "argv", "limits"}) {
    std::string line = std::string(R"({"argv":["true"],")") + field + "\":" + std::string(20000, '[') +
                       std::string(20000, ']') + "}";
    if (std::string_view(field) == "argv") line = R"({"argv":)" + std::string(20000, '[') + std::string(20000, ']') + "}";
    std::string why = job_error(line);
    cr_expect(contains(why, "nested deeper than 64"), "%s: %s", field, why.c_str());
    cr_expect_eq(job_id_of(line), "");
  }
  std::string brackets = R"({"argv":["echo",")" + std::string(5000, '[') + R"("],"id":"b"})";
  auto fine = job_from_json(brackets);
  cr_assert(fine.ok(), "%s", fine.ok() ? "" : fine.error().message().c_str());
  cr_expect_eq(fine->request.argv[1].size(), 5000u);
  cr_expect_eq(job_id_of(R"({"argv":["true"],"id":"q\"[[[","limits":{}})"), "q\"[[[");
}
