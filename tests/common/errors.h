#pragma once
// Test helpers for the error contract: every bad input throws mmsparse::Error with the right code
// and a message naming the argument.

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "mmsparse/status.h"

namespace mmsparse::testing {

// Runs `function` and returns the mmsparse::Error it throws; records a failure when it throws none.
template <class Function>
Error capture_error(Function&& function) {
  try {
    function();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "expected an mmsparse::Error";
  return Error(ErrorCode::kBackendError, "no error was thrown");
}

// Checks that `action` throws Error(code) whose message contains every fragment.
template <class Action>
void expect_error(Action&& action, ErrorCode code, std::initializer_list<std::string> fragments) {
  try {
    action();
    ADD_FAILURE() << "expected an error mentioning " << *fragments.begin();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), code) << error.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos)
          << "message \"" << error.what() << "\" lacks \"" << fragment << "\"";
    }
  }
}

}  // namespace mmsparse::testing
