// src/core/launch_record.hpp - the test-only launch recorder: when a test installs one, every
// kernel launch of the library (src/cuda/launch.cuh, launch_kernel) reports the kernel's host
// function pointer to it before launching. tests/test_engine.cpp uses it to check that every
// kernel a variant launches is in the warmed kernel list (src/cuda/kernel_list.cuh). Null (the
// default) costs one load and a branch per launch. Not part of the public API.
#pragma once

namespace mhc::detail {

/// Called with the kernel's host function pointer (the same pointer the kernel list holds) and
/// the `user` pointer given to set_launch_recorder. Runs on the launching thread.
using LaunchRecorder = void (*)(const void* kernel, void* user);

/// Installs `recorder` (null: none) for every later launch in the process. Not thread-safe
/// against concurrent launches: install before, remove after.
void set_launch_recorder(LaunchRecorder recorder, void* user);

/// The installed recorder and its user pointer (launch_kernel reads them).
struct LaunchRecorderSlot {
  LaunchRecorder recorder = nullptr;
  void* user = nullptr;
};
extern LaunchRecorderSlot g_launch_recorder;

}  // namespace mhc::detail
