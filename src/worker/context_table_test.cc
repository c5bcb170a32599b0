// ContextTable alone: ids, the cap, the current context (invalid after an
// unknown one), what a context takes along when it is removed, and which
// ops a created context may run.
#include "worker/context_table.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include "proto/messages.h"

namespace smolvm {
namespace {

TEST(ContextTableTest, IdsAreCheckedAndCapped) {
  ContextTable t;
  EXPECT_EQ(t.CheckNew(0).code(), CUDA_ERROR_INVALID_VALUE);  // the primary
  for (uint64_t id = 1; id <= ContextTable::kMaxContexts; ++id) {
    ASSERT_TRUE(t.CheckNew(id).ok()) << id;
    t.Add(id, 0x1000 + id);
  }
  EXPECT_EQ(t.CheckNew(3).code(), CUDA_ERROR_INVALID_VALUE);  // in use
  Status over = t.CheckNew(100);
  EXPECT_EQ(over.code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(over.message().find("at most 8 contexts of its own"), std::string::npos) << over.message();
  EXPECT_EQ(t.Backend(4).value(), 0x1004u);
  EXPECT_EQ(t.Backend(0).value(), 0u);
  EXPECT_EQ(t.Backend(77).status().code(), CUDA_ERROR_INVALID_CONTEXT);
  t.Remove(2);
  EXPECT_TRUE(t.CheckNew(100).ok());
}

TEST(ContextTableTest, AnUnknownCurrentContextIsInvalidUntilAValidOne) {
  ContextTable t;
  t.Add(5, 0x50);
  EXPECT_FALSE(t.in_created());
  ASSERT_TRUE(t.Select(5).ok());
  EXPECT_EQ(t.current(), 5u);
  EXPECT_TRUE(t.in_created());
  EXPECT_EQ(t.Select(6).code(), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_FALSE(t.valid());
  EXPECT_TRUE(t.in_created());  // checked op by op
  t.Remove(5);  // the last valid one destroyed meanwhile: still invalid
  EXPECT_FALSE(t.valid());
  ASSERT_TRUE(t.Select(0).ok());
  EXPECT_TRUE(t.valid());
  EXPECT_FALSE(t.in_created());
}

TEST(ContextTableTest, RemoveHandsBackItsAllocationsAndInstancesAndLeavesThePrimaryCurrent) {
  ContextTable t;
  t.Add(1, 0x10);
  t.Add(2, 0x20);
  t.OwnAllocation(0xa000);  // in the primary: not listed
  ASSERT_TRUE(t.Select(1).ok());
  t.OwnAllocation(0xb000);
  t.OwnAllocation(0xc000);
  t.DropAllocation(0xc000);  // freed before the destroy
  t.AddInstance(1, /*function=*/7, /*module_id=*/3, /*backend_module=*/0x300, /*backend_function=*/0x301);
  ASSERT_TRUE(t.Select(2).ok());
  t.OwnAllocation(0xd000);
  t.AddInstance(2, 7, 3, 0x400, 0x401);
  EXPECT_EQ(t.InstanceOf(1, 7), 0x301u);
  EXPECT_EQ(t.ModuleInstanceOf(2, 3), 0x400u);
  ASSERT_TRUE(t.Select(1).ok());
  ContextTable::Taken taken = t.Remove(1);
  EXPECT_EQ(taken.allocations, std::vector<uint64_t>{0xb000});
  EXPECT_EQ(taken.instance_modules, std::vector<uint64_t>{0x300});
  EXPECT_EQ(t.current(), 0u);  // it was current
  EXPECT_TRUE(t.valid());
  EXPECT_EQ(t.InstanceOf(1, 7), 0u);
  EXPECT_EQ(t.InstanceOf(2, 7), 0x401u);
  // The guest unloads module 3: its instance in context 2 goes too.
  auto dropped = t.DropModuleInstances(3);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], std::make_pair(uint64_t{2}, uint64_t{0x400}));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.ids(), std::vector<uint64_t>{2});
}

TEST(ContextTableTest, WhatACreatedContextMayRun) {
  using proto::Op;
  for (Op op : {Op::kMemAlloc, Op::kMemcpyDtoH, Op::kLaunchKernel, Op::kStreamCreate, Op::kEventRecord,
                Op::kModuleLoad, Op::kCtxSynchronize, Op::kCtxCreate, Op::kCtxSetCurrent, Op::kPing})
    EXPECT_TRUE(ContextTable::AllowedInCreated(static_cast<uint16_t>(op))) << proto::OpName(static_cast<uint16_t>(op));
  for (Op op : {Op::kBlasCreate, Op::kLtCreate, Op::kDnnCreate, Op::kGraphCreate, Op::kStreamBeginCapture,
                Op::kVmmCreate, Op::kCtxSetLimit, Op::kForkpointWait, Op::kMarkFrozen, Op::kArrayCreate,
                Op::kMemcpy3D, Op::kTexObjectCreate})
    EXPECT_FALSE(ContextTable::AllowedInCreated(static_cast<uint16_t>(op))) << proto::OpName(static_cast<uint16_t>(op));
  EXPECT_FALSE(ContextTable::NeedsContext(static_cast<uint16_t>(Op::kCtxDestroy)));
  EXPECT_TRUE(ContextTable::NeedsContext(static_cast<uint16_t>(Op::kMemAlloc)));
}

}  // namespace
}  // namespace smolvm
