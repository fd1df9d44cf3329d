// src/core/launch_record.cpp - the test-only launch recorder's slot (src/core/launch_record.hpp).
#include "src/core/launch_record.hpp"

namespace mhc::detail {

LaunchRecorderSlot g_launch_recorder;

void set_launch_recorder(LaunchRecorder recorder, void* user) {
  g_launch_recorder.user = user;
  g_launch_recorder.recorder = recorder;
}

}  // namespace mhc::detail
