// Conformance probes against sessions (conformance.hpp). Parent side: a
// session, a supervisor for its execs, and the session's file calls.
#include "corral/conformance.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <functional>

#include "corral/session.hpp"
#include "corral/supervisor.hpp"

namespace corral {
namespace {

struct Prober {
  std::string id;
  Supervisor& sup;
  std::vector<ProbeResult> out;

  // A probe returns "" when it held, else what happened.
  void probe(const char* suite, const char* name, const std::function<std::string()>& body) {
    ProbeResult r;
    r.suite = suite;
    r.name = name;
    std::string why = body();
    r.status = why.empty() ? ProbeResult::Status::passed : ProbeResult::Status::failed;
    r.why = why;
    out.push_back(std::move(r));
  }

  // The workload's own step (planting a layout): exit 0 expected.
  Expected<Result> exec(std::vector<std::string> argv, double wall = 10) {
    Request r;
    r.argv = std::move(argv);
    r.limits.set(Limit::wall_seconds, static_cast<std::uint64_t>(wall));
    return sup.run(session_exec_request(id, std::move(r)));
  }
  std::string plant(const std::string& script) {
    auto r = exec({"/bin/sh", "-c", script});
    if (!r) return "planting: " + r.error().message();
    if (r->outcome != Outcome::exited || r->exit_code != 0) return "planting '" + script + "' failed: " + r->detail;
    return "";
  }
};

std::string refused(const Status& st, const char* what) {
  return st ? std::string(what) + " was allowed" : "";
}
template <class T>
std::string refused(const Expected<T>& e, const char* what) {
  return e ? std::string(what) + " was allowed" : "";
}

void files_out(Prober& p) {
  p.probe("files-out", "symlink_planted", [&] {
    if (auto w = p.plant("ln -s /etc/passwd /workspace/planted"); !w.empty()) return w;
    return refused(session_get(p.id, "planted"), "get of a symlink to /etc/passwd");
  });
  p.probe("files-out", "symlinked_parent", [&] {
    if (auto w = p.plant("ln -s /etc /workspace/etcdir"); !w.empty()) return w;
    return refused(session_get(p.id, "etcdir/passwd"), "get through a symlinked parent");
  });
  p.probe("files-out", "hard_link_to_host_file", [&] {
    // The work dir is a mount of its own: the link cannot be made; if it
    // were, get must still not hand out a file the session does not own.
    auto r = p.exec({"/bin/ln", "/etc/passwd", "/workspace/hard"});
    if (!r) return "exec: " + r.error().message();
    if (r->exit_code == 0) return refused(session_get(p.id, "hard"), "get of a hard link to /etc/passwd");
    return std::string();
  });
}

void files_in(Prober& p) {
  p.probe("files-in", "byte_fidelity", [&] {
    std::string bytes;
    for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
    bytes += bytes;
    if (auto st = session_put(p.id, "bytes.bin", bytes); !st) return st.error().message();
    auto r = p.exec({"/usr/bin/sha256sum", "/workspace/bytes.bin"});
    auto back = session_get(p.id, "bytes.bin");
    if (!back) return back.error().message();
    if (*back != bytes) return std::string("the bytes read back differ");
    if (!r || r->stdout_capture.text.size() < 64) return std::string("the sandbox could not read the file");
    return std::string();
  });
  p.probe("files-in", "overwrite_replaces", [&] {
    if (auto st = session_put(p.id, "over.txt", "a long first version"); !st) return st.error().message();
    if (auto st = session_put(p.id, "over.txt", "short"); !st) return st.error().message();
    auto r = p.exec({"/bin/cat", "/workspace/over.txt"});
    if (!r) return r.error().message();
    return r->stdout_capture.text == "short" ? std::string() : "the sandbox read '" + r->stdout_capture.text + "'";
  });
  p.probe("files-in", "implicit_parents", [&] {
    if (auto st = session_put(p.id, "a/b/c/d.txt", "deep"); !st) return st.error().message();
    auto r = p.exec({"/bin/cat", "/workspace/a/b/c/d.txt"});
    if (!r) return r.error().message();
    return r->stdout_capture.text == "deep" ? std::string() : std::string("the file is not where it was put");
  });
  p.probe("files-in", "write_path_confinement", [&] {
    if (auto w = refused(session_put(p.id, "../escape", "x"), "put at ../escape"); !w.empty()) return w;
    if (auto w = p.plant("mkdir -p /workspace/real && ln -s /tmp /workspace/tmplink"); !w.empty()) return w;
    if (auto w = refused(session_put(p.id, "tmplink/escape", "x"), "put through a symlinked parent"); !w.empty()) return w;
    auto r = p.exec({"/bin/sh", "-c", "test ! -e /tmp/escape"});
    if (!r || r->exit_code != 0) return std::string("a file was written through the link");
    return std::string();
  });
}

void exec_suite(Prober& p) {
  p.probe("exec", "exit_code_fidelity", [&] {
    for (int code : {0, 1, 42, 255}) {
      auto r = p.exec({"/bin/sh", "-c", "exit " + std::to_string(code)});
      if (!r) return r.error().message();
      if (r->outcome != Outcome::exited || r->exit_code != code)
        return "exit " + std::to_string(code) + " came back as " + std::to_string(r->exit_code);
    }
    return std::string();
  });
  p.probe("exec", "argv_quoting", [&] {
    std::vector<std::string> args{"a b", "'q'", "\"dq\"", "$HOME", "*", "", "semi;colon", "new\nline"};
    std::vector<std::string> argv{"/usr/bin/printf", "[%s]"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = p.exec(argv);
    if (!r) return r.error().message();
    std::string want;
    for (const auto& a : args) want += "[" + a + "]";
    return r->stdout_capture.text == want ? std::string() : "got '" + r->stdout_capture.text + "'";
  });
  p.probe("exec", "working_directory", [&] {
    auto r = p.exec({"/bin/pwd"});
    if (!r) return r.error().message();
    return r->stdout_capture.text == "/workspace\n" ? std::string() : "cwd is '" + r->stdout_capture.text + "'";
  });
  p.probe("exec", "timeout_bound", [&] {
    auto t0 = std::chrono::steady_clock::now();
    Request req;
    req.argv = {"/bin/sleep", "60"};
    req.limits.set(Limit::wall_seconds, 1);
    req.grace_seconds = 1;
    auto r = p.sup.run(session_exec_request(p.id, std::move(req)));
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r) return r.error().message();
    if (r->outcome != Outcome::killed_timeout) return "outcome " + std::string(to_string(r->outcome));
    if (took > 5) return "ended after " + std::to_string(took) + " s (bound 1 s + 1 s grace)";
    return std::string();
  });
}

void files_delete(Prober& p) {
  p.probe("files-delete", "link_removed_not_followed", [&] {
    if (auto w = p.plant("echo keep > /workspace/target && ln -s /workspace/target /workspace/link"); !w.empty()) return w;
    if (auto st = session_remove(p.id, "link", false); !st) return st.error().message();
    auto r = p.exec({"/bin/cat", "/workspace/target"});
    return r && r->stdout_capture.text == "keep\n" ? std::string() : std::string("the link's target went too");
  });
  p.probe("files-delete", "recursive_link_not_followed", [&] {
    if (auto w = p.plant("mkdir -p /workspace/outside /workspace/tree/sub && echo keep > /workspace/outside/f && "
                         "ln -s /workspace/outside /workspace/tree/sub/link");
        !w.empty())
      return w;
    if (auto st = session_remove(p.id, "tree", true); !st) return st.error().message();
    auto r = p.exec({"/bin/sh", "-c", "cat /workspace/outside/f && test ! -e /workspace/tree"});
    return r && r->exit_code == 0 ? std::string() : std::string("a link inside the tree was followed");
  });
  p.probe("files-delete", "recursive_only_when_said", [&] {
    if (auto w = p.plant("mkdir -p /workspace/full && echo x > /workspace/full/f"); !w.empty()) return w;
    return refused(session_remove(p.id, "full", false), "removing a directory without recursive");
  });
  p.probe("files-delete", "work_dir_refused", [&] {
    for (const char* root : {"", ".", "/", "/workspace", "a/.."}) {
      if (auto w = refused(session_remove(p.id, root, true), "removing the work dir"); !w.empty())
        return w + " ('" + root + "')";
    }
    return std::string();
  });
}

}  // namespace

std::string describe(const ProbeResult& r) {
  const char* s = r.status == ProbeResult::Status::passed ? "passed" : r.status == ProbeResult::Status::skipped ? "skipped" : "failed";
  std::string line = std::string(s) + " " + r.suite + "/" + r.name;
  if (!r.why.empty()) line += ": " + r.why;
  return line;
}

Expected<std::vector<ProbeResult>> run_conformance(Tier tier) {
  if (tier != Tier::container)
    return Error::invalid("conformance: tier " + std::string(to_string(tier)) +
                          " has no sessions to attack (exec and files against a live sandbox are tier container's)");
  unsigned char rnd[6];
  if (getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd)) return Error::from_errno(errno, "conformance: getrandom");
  std::string tag;
  for (unsigned char b : rnd) tag += "0123456789abcdef"[b >> 4], tag += "0123456789abcdef"[b & 0xf];
  SessionSpec spec;
  spec.base.tier = Tier::container;
  spec.idle_seconds = 300;
  const std::string scope = "corral-conformance-" + tag;
  auto session = acquire_session(SessionKey{scope, "probes", ""}, spec);
  if (!session) return std::move(session).error().context("conformance");
  auto sup = Supervisor::create();
  if (!sup) {
    (void)dispose_session(session->id);
    return std::move(sup).error().context("conformance");
  }
  Prober p{session->id, **sup, {}};
  files_out(p);
  files_in(p);
  exec_suite(p);
  files_delete(p);
  (void)dispose_session(session->id);
  return std::move(p.out);
}

}  // namespace corral
