// run_policy: what the policy layer decides about one run, asked by the
// run and supervisor layers through this interface (they include no policy
// header; DESIGN.md "Layers"). Before a run: is what it asks enforceable
// here. While it is prepared: what enforces each limit and guarantee of its
// tier on this host. When it ends: what was applied to it (the Result's
// `enforcement`) and the audit line; when it gets no run, the audit line
// of its refusal. The policy layer implements it
// (src/enforcement_policy.cpp: the enforcement map and the audit sink);
// a caller may install its own (RunContext::policy, SupervisorOptions::policy).
//
// Parent side. An implementation is called from the supervisor's thread and
// must not block it longer than an audit append does.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "corral/host.hpp"
#include "corral/limits.hpp"
#include "corral/request.hpp"
#include "corral/result.hpp"
#include "corral/status.hpp"

namespace corral {

class AuditSink;  // audit.hpp (policy layer)

class RunPolicy {
 public:
  virtual ~RunPolicy() = default;

  // The request's explicit asks against what the host enforces: an Error
  // names one it cannot and how to get it; defaults the host cannot enforce
  // go into `warnings` (prepare_run, before anything is made).
  virtual Status check(const HostFacts& host, const Request& request, const Limits& defaults,
                       std::vector<std::string>& warnings) const = 0;
  // Every limit and guarantee of `tier` on this host, name -> how. The run
  // layer keeps one copy per tier (MechanismCache::enforcement).
  virtual std::map<std::string, std::string> host_enforcement(const HostFacts& host, Tier tier) const = 0;
  // What was applied to one run, from `host` (host_enforcement of its tier):
  // the Result's `enforcement` (finish_run).
  virtual std::map<std::string, std::string> run_enforcement(const std::map<std::string, std::string>& host,
                                                             const Request& request, const Limits& in_force) const = 0;
  // A run's final Result, before its caller sees it: `audit`, when set, gets
  // its line with `secrets` scrubbed; a failure is a warning on the Result.
  virtual void finished(const Request& request, Result& result, std::span<const std::string> secrets,
                        AuditSink* audit) const = 0;
  // A request that got no run (submit() returned an Error: refused, or
  // corral's own failure before a child existed): `audit`, when set, gets
  // its line, outcome "error" with `reason`, `line` the caller's (a batch
  // job's line number; 0: none), with `secrets` scrubbed. The Error of a
  // failed append is returned: there is no Result to carry a warning.
  virtual Status refused(const Request& asked, const std::string& reason, long line,
                         std::span<const std::string> secrets, AuditSink* audit) const = 0;
};

// The policy a run gets when its caller installs none: the enforcement map
// (enforcement.hpp) and the audit line (audit.hpp). Defined by the policy
// layer (src/enforcement_policy.cpp), so the run and supervisor layers
// reach it through this declaration without including a policy header.
const RunPolicy& default_run_policy();

}  // namespace corral
