// The policy layer's RunPolicy (run_policy.hpp): the enforcement map
// (enforcement.hpp) decides what a run may ask and what it had applied,
// the audit (audit.hpp) writes its line. The run and supervisor layers
// call it through default_run_policy() unless their caller installed
// another.
#include "corral/audit.hpp"
#include "corral/enforcement.hpp"
#include "corral/run_policy.hpp"

namespace corral {
namespace {

class EnforcementPolicy final : public RunPolicy {
 public:
  Status check(const HostFacts& host, const Request& request, const Limits& defaults,
               std::vector<std::string>& warnings) const override {
    return check_enforceable(host, request, defaults, warnings);
  }
  std::map<std::string, std::string> host_enforcement(const HostFacts& host, Tier tier) const override {
    return enforcement_summary(host, tier);
  }
  std::map<std::string, std::string> run_enforcement(const std::map<std::string, std::string>& host,
                                                     const Request& request, const Limits& in_force) const override {
    return corral::run_enforcement(host, request, in_force);
  }
  void finished(const Request& request, Result& result, std::span<const std::string> secrets,
                AuditSink* audit) const override {
    if (!audit) return;
    if (Status st = audit->record(audit_record(request, result), secrets); !st)
      result.warnings.push_back("audit line not written: " + st.error().message());
  }
  Status refused(const Request& asked, const std::string& reason, long line, std::span<const std::string> secrets,
                 AuditSink* audit) const override {
    if (!audit) return {};
    return audit->record(audit_refusal(reason, &asked, nullptr, line), secrets);
  }
};

}  // namespace

const RunPolicy& default_run_policy() {
  static const EnforcementPolicy policy;
  return policy;
}

}  // namespace corral
