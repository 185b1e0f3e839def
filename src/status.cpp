#include "corral/status.hpp"

#include <cstring>

namespace corral {

Error Error::from_errno(int err, std::string_view step) {
  std::string msg(step);
  msg += ": ";
  msg += std::strerror(err);
  return Error(err, std::move(msg));
}

Error Error::context(std::string_view outer) const {
  std::string msg(outer);
  msg += ": ";
  msg += message_;
  return Error(code_, std::move(msg));
}

}  // namespace corral
