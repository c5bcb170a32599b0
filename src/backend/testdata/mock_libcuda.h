// What the mock libcuda (mock_libcuda.cc) records, shared with the test that
// loads it. Plain data only: no library types cross the boundary.
#pragma once

#include <cstdint>

struct MockLibcudaState {
  // Set by the test.
  uint64_t reserve_shift = 0;  // cuMemAddressReserve grants addr + shift
  // Recorded by the mock.
  int proc_version = 0;
  uint64_t proc_flags = 0;
  int ctx_retains = 0, ctx_releases = 0, ctx_syncs = 0;
  int syncs_at_last_unmap = 0;
  bool unmap_after_sync = false;
  int prop_handle_types = 0;
  uint64_t freed_address = 0;
  uint64_t next_handle = 0;
  int last_access_flags = 0;
  int maps = 0, access_calls = 0;
  uint64_t last_access_addr = 0, last_access_bytes = 0;
  uint64_t last_stream = ~0ull, last_dst = 0, last_bytes = 0;
  unsigned launch_grid[3] = {}, launch_block[3] = {}, launch_smem = 0;
  bool launch_had_params = false, launch_extra = false, launch_buffer_aligned = false;
  char launch_buffer[1024] = {};
  uint64_t launch_buffer_size = 0;
  // Contexts (cuCtxCreate and after): the current one, as cuCtxSetCurrent,
  // cuCtxCreate and cuCtxPopCurrent leave it.
  uint64_t current_ctx = 0, below_created = 0, limits_ctx = 0, last_destroyed = 0;
  int ctx_created = 0, ctx_destroyed = 0, ctx_pops = 0, limits_set = 0;
};

extern "C" MockLibcudaState* smolvm_mock_state();
