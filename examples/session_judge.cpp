// session_judge.cpp: a judge on corral's warm sandboxes (sessions).
//
// What it shows: compile once, run N tests against the same live sandbox.
// acquire_session() gets (or makes) the container-tier session of a key the
// host chose — here {"judge", submission, ""} —, session_put() places the
// source in its /workspace, one exec compiles it, then each test is an exec
// of its own with stdin and a deadline (a test that hangs is killed with
// everything it started; the session serves the next one), and
// dispose_scope() reclaims the judge's sessions at the end. The same calls
// serve an agent: acquire per tool call with the conversation as the scope,
// dispose_scope when the conversation ends.
//
// Build against an installed corral (root at run time):
//   c++ -std=c++20 -O2 -o session_judge session_judge.cpp $(pkg-config --cflags --libs corral-static)
//   sudo ./session_judge [TESTS]        # default 20 tests
#include <corral/session.hpp>
#include <corral/supervisor.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace corral;

static const char kSubmission[] =
    "#include <stdio.h>\n"
    "int main(void) { long a, b; if (scanf(\"%ld %ld\", &a, &b) != 2) return 2;\n"
    "  if (a == 13) for (;;) {}  /* a bug that hangs */\n"
    "  printf(\"%ld\\n\", a + b); return 0; }\n";

int main(int argc, char** argv) {
  const int tests = argc > 1 ? std::atoi(argv[1]) : 20;
  SessionSpec spec;
  spec.base.tier = Tier::container;
  spec.base.limits.set(Limit::memory_bytes, 512ull << 20);
  spec.idle_seconds = 60;
  auto session = acquire_session(SessionKey{"judge", "submission-1", ""}, spec);
  if (!session) {
    std::fprintf(stderr, "acquire: %s\n", session.error().message().c_str());
    return 1;
  }
  auto sup = Supervisor::create();
  if (!sup) return std::fprintf(stderr, "%s\n", sup.error().message().c_str()), 1;

  int rc = 0;
  if (auto st = session_put(session->id, "main.c", kSubmission); !st) {
    std::fprintf(stderr, "put: %s\n", st.error().message().c_str());
    rc = 1;
  }
  Request compile;
  compile.argv = {"cc", "-O2", "-o", "prog", "main.c"};
  auto built = (*sup)->run(session_exec_request(session->id, compile));
  if (rc == 0 && (!built || built->exit_code != 0)) {
    std::fprintf(stderr, "compile: %s\n", built ? built->stderr_capture.text.c_str() : built.error().message().c_str());
    rc = 1;
  }
  int passed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; rc == 0 && i < tests; ++i) {
    Request test;
    test.argv = {"./prog"};
    test.stdin_text = std::to_string(i) + " " + std::to_string(i * 2) + "\n";
    test.limits.set(Limit::wall_seconds, 1);
    test.grace_seconds = 0.1;
    auto r = (*sup)->run(session_exec_request(session->id, test));
    if (!r) {
      std::fprintf(stderr, "test %d: %s\n", i, r.error().message().c_str());
      rc = 1;
      break;
    }
    bool ok = r->outcome == Outcome::exited && r->stdout_capture.text == std::to_string(3 * i) + "\n";
    passed += ok;
    std::printf("test %2d: %-14s %s\n", i, std::string(to_string(r->outcome)).c_str(), ok ? "ok" : "WRONG");
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d/%d passed in %.3f s against one warm sandbox\n", passed, tests, took);
  std::printf("disposed %d session(s)\n", dispose_scope("judge"));
  return rc;
}
