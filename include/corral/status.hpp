// Errors of the toolkit itself (not of the program it runs): an errno plus
// a message that names the step that failed and why. Each layer wraps the
// message with its own context, so a caller reads
// "run 'build': landlock: open write path '/nope': No such file or directory".
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace corral {

class Error {
 public:
  Error() = default;
  Error(int code, std::string message) : code_(code), message_(std::move(message)) {}

  // "step: strerror(err)". err is a positive errno.
  static Error from_errno(int err, std::string_view step);
  // A bad argument from the caller: EINVAL with the message as given.
  static Error invalid(std::string message) { return Error(EINVAL, std::move(message)); }

  int code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

  // A copy whose message reads "outer: <message>".
  Error context(std::string_view outer) const;

 private:
  int code_ = 0;
  std::string message_;
};

// A value or the Error that prevented it (std::expected is C++23).
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Expected(Error error) : v_(std::in_place_index<1>, std::move(error)) {}

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Expected<void> {
 public:
  Expected() = default;
  Expected(Error error) : error_(std::move(error)), ok_(false) {}

  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Expected<void>;

}  // namespace corral
