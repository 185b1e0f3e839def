// bench capture: a child (gib_writer) writes BYTES to stdout; corral
// captures it through the supervisor (non-blocking pipe, io_uring poll,
// SHA-256 of the whole stream, one secret masked, the default 16 MiB kept)
// against a plain loop in this process: posix_spawn the same writer on the
// same kind of pipe, read() into a buffer of the supervisor's size and feed
// SHA-256 (OpenSSL EVP, as corral does). Rounds interleave; medians.
//
//   capture WRITER [BYTES=1GiB] [ROUNDS=3]
#include <fcntl.h>
#include <openssl/evp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "corral/supervisor.hpp"

extern char** environ;

namespace {

const char kSecret[] = "hunter2-swordfish";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds for the plain loop; checks every byte arrived.
double plain(const std::string& writer, long long bytes) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) std::abort();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  std::string count = std::to_string(bytes);
  std::string env_secret = std::string("CORRAL_BENCH_SECRET=") + kSecret;
  char* argv[] = {const_cast<char*>(writer.c_str()), count.data(), nullptr};
  char* envp[] = {env_secret.data(), nullptr};
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid;
  if (posix_spawn(&pid, writer.c_str(), &fa, nullptr, argv, envp) != 0) std::abort();
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  std::vector<char> buf(256 * 1024);  // the supervisor's scratch size
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  long long got = 0;
  for (ssize_t n; (n = read(p[0], buf.data(), buf.size())) != 0;) {
    if (n < 0) continue;  // EINTR
    EVP_DigestUpdate(ctx, buf.data(), static_cast<std::size_t>(n));
    got += n;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  close(p[0]);
  waitpid(pid, nullptr, 0);
  double took = seconds_since(t0);
  long long want = bytes + static_cast<long long>(sizeof "token=\n" - 1 + sizeof kSecret - 1);
  if (got != want) {
    std::fprintf(stderr, "bench capture: plain loop read %lld of %lld bytes\n", got, want);
    std::exit(1);
  }
  return took;
}

double through_corral(corral::Supervisor& sup, const std::string& writer, long long bytes) {
  corral::Request r;
  r.tier = corral::Tier::none;
  r.argv = {writer, std::to_string(bytes)};
  // The secret comes from corral's own environment, as a caller's would.
  setenv("CORRAL_BENCH_SECRET", kSecret, 1);
  r.secrets.push_back(corral::SecretRef{"CORRAL_BENCH_SECRET", ""});
  auto t0 = std::chrono::steady_clock::now();
  auto res = sup.run(std::move(r));
  double took = seconds_since(t0);
  if (!res) {
    std::fprintf(stderr, "bench capture: %s\n", res.error().message().c_str());
    std::exit(1);
  }
  const corral::CapturedStream& out = res->stdout_capture;
  if (res->outcome != corral::Outcome::exited || out.text.rfind("token=***\n", 0) != 0 ||
      out.bytes != static_cast<std::uint64_t>(bytes) + sizeof "token=\n" - 1 + sizeof kSecret - 1)
  {
    std::fprintf(stderr, "bench capture: unexpected result: %s, %llu bytes, starts '%.20s'\n", res->detail.c_str(),
                 static_cast<unsigned long long>(out.bytes), out.text.c_str());
    std::exit(1);
  }
  return took;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: capture WRITER [BYTES] [ROUNDS]\n");
    return 2;
  }
  char* abs = realpath(argv[1], nullptr);  // the run's cwd is its workspace
  if (abs == nullptr) {
    std::fprintf(stderr, "bench capture: %s: not found\n", argv[1]);
    return 1;
  }
  std::string writer = abs;
  free(abs);
  long long bytes = argc > 2 ? std::atoll(argv[2]) : 1LL << 30;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  auto sup = corral::Supervisor::create();
  if (!sup) {
    std::fprintf(stderr, "bench capture: %s\n", sup.error().message().c_str());
    return 1;
  }
  std::vector<double> base, mine;
  for (int i = 0; i < rounds; ++i) {
    base.push_back(plain(writer, bytes));
    mine.push_back(through_corral(**sup, writer, bytes));
  }
  double mib = static_cast<double>(bytes) / (1 << 20);
  double c = mib / median(mine), b = mib / median(base);
  std::printf("bench capture corral=%.0f baseline=%.0f ratio=%.2f unit=MiB_per_s\n", c, b, c / b);
  return 0;
}
