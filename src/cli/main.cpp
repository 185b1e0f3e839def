// corral CLI entry: dispatches to one file per verb (src/cli/<verb>.cpp).
// All behaviour lives in the library; the verbs parse arguments and print.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli.hpp"
#include "corral/session.hpp"

namespace {

const char kUsage[] =
    "usage: corral <command> [options]\n"
    "\n"
    "Run programs nobody reviewed, with limits that are enforced and said.\n"
    "\n"
    "commands:\n"
    "  run [options] [--] PROGRAM [ARGS...]  run one program in a tier (every option,\n"
    "                                        unit and default: corral run --help)\n"
    "  enforcement [--tier T] [--json]       what this host enforces, and how; T is\n"
    "                                        none|process|container (repeatable;\n"
    "                                        default: process); --json: one object\n"
    "  check --routes FILE                   build every route of a routes file through the gate\n"
    "  batch [options] [FILE]                run JSON jobs through the gate, results as JSON\n"
    "                                        lines (corral batch --help)\n"
    "  merge --jobs FILE RESULTS...          join corral batch --shard I/N results into\n"
    "                                        one (corral merge --help)\n"
    "  templates [--clear]                   the container tier's namespace templates\n"
    "  session open|exec|put|get|ls|rm|close|list ...\n"
    "                                        warm sandboxes: a live container session\n"
    "                                        keyed by scope (corral session --help)\n"
    "  conformance [--tier T]                attack a session, one line per probe\n"
    "  --version                             print the version\n"
    "  --help                                this text\n"
    "\n"
    "Options follow getopt_long: --opt=value or --opt value, short forms (-t, -l, -e,\n"
    "-j, -p), '--' before PROGRAM optional.\n"
    "\n"
    "Exit codes: the program's own; 128+signal when a signal ended it; 124 timeout;\n"
    "125 corral could not run it; 130 cancelled; 2 usage error or a limit corral\n"
    "refuses. man corral has the details.\n";

// A closed stdin/stdout/stderr is taken by /dev/null opened read-only:
// otherwise the next fd corral opens (a ring, a pidfd, a run's pipe) would
// become "stdout" and the Result would be written into it. Read-only, a
// write to a closed stdout still fails (EBADF) and is reported as lost.
// One poll(2) asks after the three (POLLNVAL: not open), not a fcntl each.
void hold_standard_fds() {
  pollfd fds[3] = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}};
  const bool polled = poll(fds, 3, 0) >= 0;
  for (int fd = 0; fd <= 2; ++fd) {
    const bool closed = polled ? (fds[fd].revents & POLLNVAL) != 0 : fcntl(fd, F_GETFD) < 0 && errno == EBADF;
    if (!closed) continue;
    int null = open("/dev/null", O_RDONLY);  // the lowest free number: fd itself
    if (null >= 0 && null != fd) {
      dup2(null, fd);
      close(null);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  hold_standard_fds();
  // This binary is the sessions' keeper (`session keep`): found through
  // the kernel's link to it, not PATH (session.hpp).
  corral::set_default_keeper_program("/proc/self/exe");
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string_view verb = argv[1];
  if (verb == "--version" || verb == "version") {
    std::printf("corral %s\n", CORRAL_VERSION);
    return 0;
  }
  if (verb == "--help" || verb == "-h" || verb == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  for (const auto& cmd : corral::cli::commands()) {
    if (verb == cmd.name) return cmd.main(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "corral: unknown command '%s' (try corral --help)\n", argv[1]);
  return 2;
}
