// The non-template half of MockTier: its messages, in one place.
#include "corral/mock_tier.hpp"

namespace corral::mock_detail {
namespace {

std::string prefix(std::string_view tier, std::string_view route) {
  return "mock tier '" + std::string(tier) + "': route '" + std::string(route) + "'";
}

}  // namespace

Error unprogrammed(std::string_view tier, std::string_view route,
                   const std::vector<std::string>& programmed) {
  std::string known;
  for (const auto& name : programmed) known += (known.empty() ? "'" : ", '") + name + "'";
  return Error(ENOENT, prefix(tier, route) + " is not programmed (programmed: " +
                           (known.empty() ? std::string("none") : known) +
                           "); a mock never invents a result");
}

Error no_capabilities(std::string_view tier, std::string_view route) {
  return Error(ENODATA, prefix(tier, route) +
                            " was programmed without the capabilities of a real tier; program it "
                            "with the tier it stands in for to build a Router with it");
}

Status check_program(std::string_view tier, std::string_view route, bool has_handler) {
  if (route.empty())
    return Error::invalid("mock tier '" + std::string(tier) + "': cannot program an empty route name");
  if (!has_handler) return Error::invalid(prefix(tier, route) + ": the handler is empty");
  return {};
}

}  // namespace corral::mock_detail
