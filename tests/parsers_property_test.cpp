// The property every parser of untrusted text keeps: generated and mutated
// inputs (random bytes, truncations, deep nesting, huge numbers, NUL bytes,
// invalid UTF-8, overlong runs) give either a valid value or a clean error
// (property_support.hpp: printable, bounded, non-empty) — never a crash, a
// hang or an exception — and a malformed batch line costs only its own job.
//
// Fixed seeds and iteration counts: the same inputs on every run, well
// inside the 20 s the whole file may take (a Criterion timeout stands for a
// hang). A failure names the parser and the input, escaped.
#include <cmath>

#include "cli_runner.hpp"
#include "corral/container.hpp"
#include "corral/door.hpp"
#include "corral/json.hpp"
#include "corral/limits.hpp"
#include "corral/output_collect.hpp"
#include "corral/outputs.hpp"
#include "corral/routes_file.hpp"
#include "corral/workspace.hpp"
#include "property_support.hpp"

using namespace corral;
using namespace corral_test;

namespace {

// ---- limit strings -------------------------------------------------------

std::string limit_text(Rng& rng) {
  static const std::vector<std::string> values{
      "1", "0", "1_000", "1000000000", "1000000001", "9223372036854775807", "9223372036854775808", "-1",
      "", " 5 ", "1__0", "_1", "1_", "12x", "0001", "99999999999999999999999999"};
  std::string out;
  for (std::size_t n = 1 + rng.below(4); n > 0; --n) {
    if (!out.empty()) out += rng.percent(90) ? "," : " ";
    out += rng.percent(85) ? std::string(rng.pick(all_limits()).name) : rng.pick(nasty_pieces());
    if (rng.percent(90)) out += "=";
    out += rng.percent(70) ? rng.pick(values) : std::to_string(rng.next() >> rng.below(64));
  }
  return rng.percent(50) ? mutated(rng, out) : out;
}

void check_limit_value(const LimitInfo& info, std::uint64_t value, std::string_view input) {
  cr_assert(value <= info.max, "%s=%llu accepted above its maximum (input '%s')", std::string(info.name).c_str(),
            static_cast<unsigned long long>(value), shown(input).c_str());
  cr_assert(value > 0 || info.zero_allowed, "%s=0 accepted (input '%s')", std::string(info.name).c_str(),
            shown(input).c_str());
}

// ---- JSON job lines --------------------------------------------------------

std::string json_string(Rng& rng) {
  static const std::vector<std::string> words{
      "a", "/bin/true", "x.txt", "out/*.txt", "logs/**", "", "PATH", "HOME", "A=B", "\\u0000x", "a\\u0000",
      "\\ud800", "\\u00e9", "/etc", "/tmp", "/tmp:/mnt", "/etc/shadow", "../x", "a/../b", "none", "process",
      "container", "kill", "truncate", "trusted", "untrusted", "cpu_seconds", "\\n", "\\\\", "a\\\"b"};
  std::string s = rng.percent(90) ? rng.pick(words) : std::string(rng.below(3000), 'a');
  if (rng.percent(5)) s += rng.pick(nasty_pieces());  // raw bytes: most are not JSON
  return "\"" + s + "\"";
}

std::string json_number(Rng& rng) {
  static const std::vector<std::string> numbers{
      "0", "1", "-1", "2", "3600", "3601", "1.5", "-0.5", "1e999", "-1e999", "1e308", "18446744073709551615",
      "18446744073709551616", "9223372036854775807", "-9223372036854775809", "4294967295", "4294967294",
      "100000000000000000000000000000", "1e-400", "0.0"};
  return rng.pick(numbers);
}

std::string json_value(Rng& rng, int depth) {
  switch (rng.below(depth > 3 ? 4 : 6)) {
    case 0: return json_string(rng);
    case 1: return json_number(rng);
    case 2: return rng.percent(50) ? "true" : "false";
    case 3: return "null";
    case 4: {
      std::string out = "[";
      for (std::size_t n = rng.below(4); n > 0; --n) out += json_value(rng, depth + 1) + (n > 1 ? "," : "");
      return out + "]";
    }
    default: {
      std::string out = "{";
      for (std::size_t n = rng.below(4); n > 0; --n)
        out += json_string(rng) + ":" + json_value(rng, depth + 1) + (n > 1 ? "," : "");
      return out + "}";
    }
  }
}

std::string json_strings(Rng& rng) {
  std::string out = "[";
  for (std::size_t n = rng.below(4); n > 0; --n) out += json_string(rng) + (n > 1 ? "," : "");
  return out + "]";
}

// A job line: most fields with a plausible value, some with any value.
std::string job_line(Rng& rng) {
  using Gen = std::string (*)(Rng&);
  static const std::vector<std::pair<std::string, Gen>> fields{
      {"id", [](Rng& r) { return r.percent(50) ? json_string(r) : json_number(r); }},
      {"argv", [](Rng& r) { return "[\"/bin/true\"" + std::string(r.percent(50) ? "," + json_string(r) : "") + "]"; }},
      {"env", [](Rng& r) { return "{" + json_string(r) + ":" + json_string(r) + "}"; }},
      {"pass_env", json_strings},
      {"secret_env", json_strings},
      {"limits", [](Rng& r) {
         std::string name = r.percent(80) ? std::string(r.pick(all_limits()).name) : "bogus";
         return "{\"" + name + "\":" + (r.percent(70) ? json_number(r) : json_string(r)) + "}";
       }},
      {"tier", json_string},
      {"inputs", [](Rng& r) {
         return "[{\"name\":" + json_string(r) + ",\"" + (r.percent(50) ? "bytes" : "host_path") + "\":" +
                json_string(r) + "}]";
       }},
      {"outputs", json_strings},
      {"stdin", json_string},
      {"source", json_string},
      {"interpreter", json_strings},
      {"cwd", json_string},
      {"merge_output", [](Rng& r) { return std::string(r.percent(50) ? "true" : "false"); }},
      {"confine_writes", [](Rng& r) { return std::string(r.percent(50) ? "true" : "1"); }},
      {"write_paths", json_strings},
      {"net", json_string},
      {"acknowledge", json_strings},
      {"grace_seconds", json_number},
      {"on_output_limit", json_string},
      {"rootfs", json_string},
      {"binds", json_strings},
      {"ro_binds", json_strings},
      {"user", json_number},
      {"artifact_root", json_string},
      {"route", json_string},
      {"provenance", json_string},
      {"loopback", [](Rng& r) { return std::string(r.percent(50) ? "true" : "null"); }},
      {"bogus", [](Rng& r) { return json_value(r, 0); }},
  };
  std::string out = "{\"argv\":[\"/bin/true\"]";
  for (std::size_t n = rng.below(6); n > 0; --n) {
    const auto& [name, gen] = rng.pick(fields);
    out += ",\"" + name + "\":" + (rng.percent(85) ? gen(rng) : json_value(rng, 0));
  }
  out += "}";
  return rng.percent(40) ? mutated(rng, out) : out;
}

bool variable_name(const std::string& name) { return !name.empty() && name.find('=') == std::string::npos; }

// What every accepted job holds, whoever wrote the line.
void check_request(const Request& r, std::string_view input) {
  Status st = validate_request(r);
  cr_assert(st.ok(), "accepted a request validate_request refuses (%s): '%s'", st.error().message().c_str(),
            shown(input).c_str());
  cr_assert(!r.argv.empty() || r.payload, "accepted a job without a program: '%s'", shown(input).c_str());
  cr_assert(std::isfinite(r.grace_seconds) && r.grace_seconds >= 0 && r.grace_seconds <= 3600,
            "accepted grace_seconds %g: '%s'", r.grace_seconds, shown(input).c_str());
  for (const auto& s : r.secrets)
    cr_assert(variable_name(s.name) && variable_name(s.from_env), "accepted secret name '%s': '%s'",
              shown(s.name).c_str(), shown(input).c_str());
  for (const auto& p : r.pass_env)
    cr_assert(variable_name(p), "accepted pass_env name '%s': '%s'", shown(p).c_str(), shown(input).c_str());
}

// ---- routes files ----------------------------------------------------------

std::string toml_value(Rng& rng) {
  static const std::vector<std::string> values{
      "\"grader\"", "\"trusted\"", "\"untrusted\"", "\"process\"", "\"container\"", "\"none\"", "\"os_process\"",
      "\"\"", "\"a\\u0000b\"", "\"\\u001b[2J\"", "'lit'", "1", "0", "-1", "99999999999999999999", "1.5", "true",
      "[\"exec\", \"files_out\"]", "[\"*:443\"]", "[1, 2]", "[]", "{ cpu_seconds = 10 }", "{ wall_seconds = 0 }",
      "{ max_files = 8 }", "\"\"\"multi\nline\"\"\"", "1979-05-27T07:32:00Z", "inf", "nan", "0x7fffffffffffffff"};
  return rng.pick(values);
}

std::string route_block(Rng& rng) {
  static const std::vector<std::string> keys{
      "name", "provenance", "tier", "min_isolation", "requires", "egress_allow", "limits", "transfer",
      "env_passthrough", "secrets", "acknowledge_network_egress", "acknowledged_unenforced", "on_output_limit",
      "allow_host_paths", "bogus", "limits.cpu_seconds", "transfer.max_files"};
  std::string out = "[[route]]\nname = \"r" + std::to_string(rng.below(4)) + "\"\n";
  out += "provenance = \"" + std::string(rng.percent(70) ? "trusted" : "untrusted") + "\"\n";
  out += "tier = \"" + std::string(rng.percent(50) ? "process" : "container") + "\"\n";
  for (std::size_t n = rng.below(5); n > 0; --n) out += rng.pick(keys) + " = " + toml_value(rng) + "\n";
  if (rng.percent(40)) {
    out += "[[route.outputs]]\npath = \"" + std::string(rng.percent(70) ? "report.json" : "logs/*") + "\"\n";
    out += "media_type = \"application/json\"\n";
    if (rng.percent(50)) out += rng.pick(std::vector<std::string>{"name", "required", "disposition", "x"}) + " = " +
                                toml_value(rng) + "\n";
  }
  return out;
}

std::string routes_text(Rng& rng) {
  std::string out;
  if (rng.percent(30)) out += "[host]\nfloor = " + toml_value(rng) + "\n";
  for (std::size_t n = 1 + rng.below(3); n > 0; --n) out += route_block(rng);
  return rng.percent(50) ? mutated(rng, out) : out;
}

HostFacts rich_host() {
  HostFacts h;
  h.root = true;
  h.landlock_abi = 7;
  h.seccomp = h.io_uring = h.pidfd = h.user_namespaces = true;
  h.cgroup_memory = h.cgroup_pids = true;
  return h;
}

// ---- paths and globs -------------------------------------------------------

std::string path_text(Rng& rng) {
  static const std::vector<std::string> parts{"a", "b.txt", "..", ".", "", "*", "**", "?", "[a-z]", "[!x]", "[",
                                              "\\", "tmp", "home", "etc", "x y", "\xc3\xa9", "\xff"};
  std::string out = rng.percent(30) ? "/" : "";
  for (std::size_t n = 1 + rng.below(5); n > 0; --n) out += rng.pick(parts) + (n > 1 ? "/" : "");
  return rng.percent(30) ? mutated(rng, out) : out;
}

}  // namespace

TestSuite(parsers_property, .timeout = 60);

Test(parsers_property, limit_strings) {
  Rng rng(0x11d17);
  for (int i = 0; i < 10000; ++i) {
    std::string text = limit_text(rng);
    no_throw("parse_limit_assignment", text, [&] {
      auto one = parse_limit_assignment(text);
      if (one) {
        const LimitInfo& info = limit_info(one->limit);
        check_limit_value(info, one->raw / info.scale + (one->raw % info.scale != 0), text);
      }
      else assert_clean_error("parse_limit_assignment", text, one.error());
    });
    no_throw("parse_limit_list", text, [&] {
      auto list = parse_limit_list(text);
      if (!list) return assert_clean_error("parse_limit_list", text, list.error());
      for (const auto& info : all_limits())
        if (auto v = list->get(info.limit)) check_limit_value(info, *v, text);
      auto again = parse_limit_list(list->describe());
      cr_assert(again.ok() && *again == *list, "'%s' does not read back as it describes itself: '%s'",
                shown(text).c_str(), list->describe().c_str());
    });
    no_throw("parse_limit_value", text, [&] {
      auto v = parse_limit_value("x", text);
      if (!v) assert_clean_error("parse_limit_value", text, v.error());
    });
  }
}

Test(parsers_property, job_lines) {
  Rng rng(0xba7c4);
  for (int i = 0; i < 2500; ++i) {
    std::string line = job_line(rng);
    no_throw("job_from_json", line, [&] {
      auto job = job_from_json(line);
      if (job) check_request(job->request, line);
      else assert_clean_error("job_from_json", line, job.error());
    });
    no_throw("request_from_json", line, [&] {
      auto r = request_from_json(line);
      if (r) check_request(*r, line);
      else assert_clean_error("request_from_json", line, r.error());
    });
    no_throw("job_id_of", line, [&] { (void)job_id_of(line); });
  }
  // The shapes that broke other parsers, whole: a million brackets, a NUL,
  // a 2 MB string, raw invalid UTF-8, nothing at all.
  for (const std::string& line : {std::string(1000000, '['), std::string(1000000, '{'),
                                  "{\"argv\":[\"/bin/true\"],\"id\":\"" + std::string(2 << 20, 'x') + "\x01\"}",
                                  std::string("{\"argv\":[\"a\0b\"]}", 16), std::string("\xff\xfe{}"),
                                  std::string(), std::string("{\"argv\":[\"") + std::string(100000, '\xc0') + "\"]}"}) {
    no_throw("job_from_json", line, [&] {
      auto job = job_from_json(line);
      cr_assert(!job.ok(), "accepted '%s'", shown(line).c_str());
      assert_clean_error("job_from_json", line, job.error());
    });
  }
}

Test(parsers_property, routes_files) {
  Rng rng(0x70b15);
  HostFacts host = rich_host();
  HostFacts bare;
  for (int i = 0; i < 1500; ++i) {
    std::string text = routes_text(rng);
    no_throw("parse_routes", text, [&] {
      auto file = parse_routes(text, "p.toml");
      if (!file) return assert_clean_error("parse_routes", text, file.error());
      for (const HostFacts* h : {&host, &bare}) {
        auto router = build_routes(*file, *h);
        if (!router) assert_clean_error("build_routes", text, router.error());
      }
    });
  }
  for (const std::string& text :
       {std::string(300000, '['), "a = " + std::string(300000, '['), "a = " + std::string(100000, '{'),
        "a = {" + std::string(50000, 'a') + "=1}", std::string(300000, 'a'), "[" + std::string(200000, '.') + "]",
        "a = \"" + std::string(1 << 20, 'x'), std::string("a = 99999999999999999999999999999"),
        std::string("a = \"\0\"", 7), std::string("[[route]]\nname = \"\xc0\xaf\"\n"),
        // toml++ asserted (SIGABRT) on a header whose name starts with neither
        // a key character nor a quote.
        std::string("[[[route]]\nname = \"r\"\n"), std::string("[ =]\n"), std::string("[[\xc3\xa9]]\n")}) {
    no_throw("parse_routes", text, [&] {
      auto file = parse_routes(text, "p.toml");
      cr_assert(!file.ok(), "accepted '%s'", shown(text).c_str());
      assert_clean_error("parse_routes", text, file.error());
    });
  }
}

Test(parsers_property, paths_and_globs) {
  Rng rng(0x9a7b5);
  auto ws = Workspace::create();
  cr_assert(ws.ok(), "%s", ws.ok() ? "" : ws.error().message().c_str());
  for (const char* dir : {"a", "a/b", "logs", "tmp"}) mkdirat(ws->dirfd(), dir, 0700);
  for (const char* file : {"a/x.txt", "a/b/deep.txt", "logs/top.txt", "b.txt", "tmp/t"}) {
    int fd = openat(ws->dirfd(), file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  }
  for (int i = 0; i < 3000; ++i) {
    std::string text = path_text(rng);
    no_throw("validate_relative_name", text, [&] {
      if (Status st = validate_relative_name(text, "name"); !st)
        assert_clean_error("validate_relative_name", text, st.error());
    });
    no_throw("collision_key", text, [&] {
      if (auto key = collision_key(text); !key) assert_clean_error("collision_key", text, key.error());
    });
    no_throw("parse_bind_spec", text, [&] {
      auto b = parse_bind_spec(text, rng.percent(50));
      if (!b) return assert_clean_error("parse_bind_spec", text, b.error());
      cr_assert(!b->source.empty() && !b->target.empty() && b->target.front() == '/',
                "bind '%s' gave source '%s' target '%s'", shown(text).c_str(), shown(b->source).c_str(),
                shown(b->target).c_str());
    });
    no_throw("resolve_allowed_path", text, [&] {
      auto p = resolve_allowed_path("input", text, {"/tmp"});
      if (!p) return assert_clean_error("resolve_allowed_path", text, p.error());
      cr_assert(p->rfind("/tmp", 0) == 0, "'%s' allowed under /tmp as '%s'", shown(text).c_str(), p->c_str());
    });
    no_throw("validate_declaration", text, [&] {
      DeclaredOutput out{text, "text/plain", false, rng.percent(50) ? "" : path_text(rng), Disposition::land};
      if (Status st = validate_declaration({out}, true); !st)
        assert_clean_error("validate_declaration", text, st.error());
    });
    if (i % 4 == 0)
      no_throw("collect_run_outputs", text, [&] {
        Request r;
        r.outputs = {text};
        Result res;
        collect_run_outputs(r, default_limits(), *ws, res, nullptr);
        for (const auto& a : res.artifacts)
          cr_assert(relative_name_problem(a.name).empty(), "collected '%s' for glob '%s'", shown(a.name).c_str(),
                    shown(text).c_str());
      });
  }
}

// ---- CLI option values and batch lines (the real binary) -------------------

namespace {

std::vector<std::string> run_args(Rng& rng) {
  static const std::vector<std::string> options{
      "--tier", "-t", "--limit", "-l", "--env", "-e", "--net", "--pass-env", "--secret-env", "--input", "--output",
      "--cwd", "--user", "--grace", "--on-output-limit", "--acknowledge", "--write-path", "--ro-bind", "--route",
      "--stdin-text", "--bogus"};
  static const std::vector<std::string> flags{"--json", "-j", "--merge-output", "--confine-writes", "--loopback"};
  static const std::vector<std::string> values{
      "none", "process", "container", "host", "kill", "truncate", "wall_seconds=5", "cpu_seconds=1_0",
      "memory_bytes=9223372036854775807", "K=V", "=V", "K", "PATH", "A=B", "/etc/hostname", "/etc/hostname:x",
      "x.txt", "*", "/", "1000", "0", "4294967295", "0.5", "nan", "1e999", "-1", "/tmp:/mnt", "", "\xff\xfe",
      "\x1b[2J", "--", "-"};
  std::vector<std::string> args{"run"};
  for (std::size_t n = rng.below(5); n > 0; --n) {
    if (rng.percent(20)) {
      args.push_back(rng.pick(flags));
      continue;
    }
    std::string opt = rng.pick(options);
    std::string value = rng.percent(80) ? rng.pick(values) : mutated(rng, rng.pick(values));
    if (value.find('\0') != std::string::npos) value = value.substr(0, value.find('\0'));
    value = value.substr(0, 60000);  // execve refuses one argument over 128 KiB
    if (rng.percent(40) && opt.rfind("--", 0) == 0) args.push_back(opt + "=" + value);
    else args.insert(args.end(), {opt, value});
  }
  args.insert(args.end(), {"--tier", "none"});
  if (rng.percent(80)) args.push_back("--");
  args.push_back("/bin/true");
  return args;
}

std::string joined(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += (out.empty() ? "" : " ") + shown(a, 60);
  return out;
}

}  // namespace

// Every bad option value is a usage error on a "corral:" line; nothing kills
// corral itself. The program is /bin/true in tier none, so an accepted line
// costs a spawn.
Test(parsers_property, cli_option_values) {
  Rng rng(0xc11);
  for (int i = 0; i < 40; ++i) {
    std::vector<std::string> args = run_args(rng);
    std::vector<std::string> env;
    if (rng.percent(15)) env.push_back("CORRAL_LIMITS=" + limit_text(rng));
    for (auto& e : env)
      if (e.find('\0') != std::string::npos) e.resize(e.find('\0'));
    CliRun run = run_cli(args, env);
    cr_assert(run.code >= 0 && run.code < 128, "corral %s: exit %d\n%s", joined(args).c_str(), run.code,
              run.err.c_str());
    if (run.code == 0) continue;
    cr_assert(!run.err.empty(), "corral %s: exit %d with nothing said", joined(args).c_str(), run.code);
    std::size_t at = 0;
    while (at < run.err.size()) {
      std::size_t nl = run.err.find('\n', at);
      std::string line = run.err.substr(at, nl - at);
      cr_assert(line.rfind("corral:", 0) == 0, "corral %s: stderr line '%s'", joined(args).c_str(),
                shown(line).c_str());
      cr_assert(printable_name(line) == line, "corral %s: unprintable stderr line '%s'", joined(args).c_str(),
                shown(line).c_str());
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }
}

// Good jobs interleaved with mutated lines, random bytes and a line over the
// cap: every good job runs and exits 0, every bad line is one error result
// of its own line, and nothing else is lost.
Test(parsers_property, batch_bad_lines_cost_only_themselves) {
  Rng rng(0xba7);
  TempDir dir;
  std::string jobs;
  std::size_t good = 0, lines = 0;
  const std::string good_line = "{\"id\":\"good-ID\",\"argv\":[\"/bin/true\"],\"tier\":\"none\"}";
  for (int i = 0; i < 60; ++i) {
    std::string line;
    if (i % 3 == 0) {
      line = good_line;
      line.replace(line.find("ID"), 2, std::to_string(good++));
    } else if (i == 7) {
      line = std::string(9000, 'x');  // over --max-line-bytes
    } else {
      line = rng.percent(30) ? random_bytes(rng, 300) : mutated(rng, job_line(rng));
      for (auto& c : line)
        if (c == '\n') c = ' ';
      // A bad line must not be good by chance: make it refer to an id of its own.
      if (line.find("good-") != std::string::npos) line = "{bad";
      if (line.find_first_not_of(" \t\r") == std::string::npos) line = "{blank}";
      line = line.substr(0, 8000);
    }
    jobs += line + "\n";
    ++lines;
  }
  write_file(dir / "jobs.jsonl", jobs);
  CliRun run = run_cli({"batch", "--parallel", "4", "--max-line-bytes", "8192", "--allow-host-path", "/tmp",
                        dir / "jobs.jsonl"});
  cr_assert(run.code == 0 || run.code == 1, "batch exit %d\n%s", run.code, run.err.c_str());
  std::size_t results = 0, good_ok = 0;
  std::size_t at = 0;
  while (at < run.out.size()) {
    std::size_t nl = run.out.find('\n', at);
    std::string line = run.out.substr(at, nl - at);
    ++results;
    if (line.find("\"id\":\"good-") != std::string::npos) {
      cr_assert(line.find("\"outcome\":\"exited\"") != std::string::npos &&
                    line.find("\"exit_code\":0") != std::string::npos,
                "a good job did not run cleanly: %s", line.c_str());
      ++good_ok;
    }
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  cr_assert_eq(good_ok, good, "%zu of %zu good jobs reported\n%s", good_ok, good, run.out.c_str());
  cr_assert_eq(results, lines, "%zu results for %zu lines\n%s", results, lines, run.err.c_str());
}
