// A mock tier for the tests of applications built on corral: a registry of
// route -> function(Request) -> Result. It executes nothing. A route nobody
// programmed is refused, never answered with an invented result.
//
// A route may be programmed with the capabilities of the real tier it stands
// in for; build the application's Router with capabilities(route), and the
// gate refuses under test exactly where it would in production.
//
// A template over the request and result types, so it serves the run
// layer's Request/Result and an application's own types alike. Not
// thread-safe: program it before the test calls it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "corral/isolation.hpp"
#include "corral/status.hpp"

namespace corral {

namespace mock_detail {
Error unprogrammed(std::string_view tier, std::string_view route,
                   const std::vector<std::string>& programmed);
Error no_capabilities(std::string_view tier, std::string_view route);
Status check_program(std::string_view tier, std::string_view route, bool has_handler);
}  // namespace mock_detail

template <class Req, class Res>
class MockTier {
 public:
  using Handler = std::function<Res(const Req&)>;

  // `name` appears in messages ("mock tier 'payments': ...").
  explicit MockTier(std::string name = "mock") : name_(std::move(name)) {}

  // Programs (or reprograms) `route`. `stands_in_for` is the declaration of
  // the real tier the route would run in; without it, capabilities(route)
  // refuses rather than guess.
  Status program(std::string route, Handler handler,
                 std::optional<TierCapabilities> stands_in_for = std::nullopt) {
    if (Status s = mock_detail::check_program(name_, route, static_cast<bool>(handler)); !s) return s;
    entries_[std::move(route)] = Entry{std::move(handler), stands_in_for, 0};
    return {};
  }

  // The programmed answer, or an error naming the unprogrammed route.
  Expected<Res> call(std::string_view route, const Req& request) {
    auto it = entries_.find(route);
    if (it == entries_.end()) return mock_detail::unprogrammed(name_, route, routes());
    ++it->second.calls;
    return it->second.handler(request);
  }

  // The capabilities `route` was programmed to stand in for.
  Expected<TierCapabilities> capabilities(std::string_view route) const {
    auto it = entries_.find(route);
    if (it == entries_.end()) return mock_detail::unprogrammed(name_, route, routes());
    if (!it->second.stands_in_for) return mock_detail::no_capabilities(name_, route);
    return *it->second.stands_in_for;
  }

  bool programmed(std::string_view route) const { return entries_.find(route) != entries_.end(); }
  // How many times call() answered for `route`.
  std::size_t calls(std::string_view route) const {
    auto it = entries_.find(route);
    return it == entries_.end() ? 0 : it->second.calls;
  }
  std::vector<std::string> routes() const {
    std::vector<std::string> out;
    for (const auto& [route, entry] : entries_) out.push_back(route);
    return out;
  }
  const std::string& name() const { return name_; }

 private:
  struct Entry {
    Handler handler;
    std::optional<TierCapabilities> stands_in_for;
    std::size_t calls = 0;
  };
  std::string name_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace corral
