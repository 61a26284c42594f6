#pragma once
// A test fixture with its own CUDA stream (not the legacy default one), synchronised and destroyed
// after the test, so that work queued on it is checked on a stream a caller would pass.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "device_buffer.h"

namespace mmsparse::test {

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override { expect_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  void TearDown() override {
    expect_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    expect_cuda(cudaStreamDestroy(stream_), "cudaStreamDestroy");
  }
  cudaStream_t stream_ = nullptr;
};

}  // namespace mmsparse::test
