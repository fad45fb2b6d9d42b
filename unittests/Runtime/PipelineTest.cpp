//===- PipelineTest.cpp - pipeline timelines, bubbles and traces ----------===//

#include "merak/Runtime/Pipeline.h"

#include "gtest/gtest.h"

#include <set>

using namespace merak::runtime;

namespace {

PipelineEvent compute(int64_t step, double start, double end,
                      std::string name = "F(0,0)") {
  return {std::move(name), "forward", step, start, end, true};
}

TEST(PipelineTest, BubbleOfTwoRanks) {
  // Step 2 spans [10, 14]: rank 0 busy 3, rank 1 busy 2 → 1 - 5/8.
  std::vector<std::vector<PipelineEvent>> events = {
      {compute(1, 0, 1), compute(2, 10, 12), compute(2, 12, 13)},
      {compute(1, 1, 2),
       compute(2, 12, 14),
       {"send F(0,0) -> 1", "send", 2, 9, 20, false}}};
  BubbleMeasurement all = measureBubble(events, 1);
  EXPECT_EQ(all.steps, 2);
  // Step 1 spans [0, 2], busy 2 of 4.
  EXPECT_NEAR(all.fraction, (0.5 + 0.375) / 2, 1e-12);
  BubbleMeasurement later = measureBubble(events, 2);
  EXPECT_EQ(later.steps, 1);
  EXPECT_NEAR(later.fraction, 0.375, 1e-12);
}

TEST(PipelineTest, EventsRoundTrip) {
  std::vector<PipelineEvent> events = {
      compute(3, 1234.5678901234, 1234.6, "FK(2,7)"),
      {"tied 'wte.weight'", "collective", 4, 2.25, 2.5, false}};
  absl::StatusOr<std::vector<PipelineEvent>> back =
      deserializeEvents(serializeEvents(events));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].name, "FK(2,7)");
  EXPECT_EQ((*back)[0].step, 3);
  EXPECT_DOUBLE_EQ((*back)[0].start, 1234.5678901234);
  EXPECT_TRUE((*back)[0].compute);
  EXPECT_EQ((*back)[1].name, "tied 'wte.weight'");
  EXPECT_EQ((*back)[1].category, "collective");
  EXPECT_FALSE((*back)[1].compute);
  EXPECT_FALSE(deserializeEvents("1\t2\n").ok());
}

TEST(PipelineTest, TraceHasOneProcessPerRank) {
  std::vector<std::vector<PipelineEvent>> events = {
      {compute(1, 100, 101)},
      {{"recv F(0,0) <- 0", "recv", 1, 100.5, 101, false}}};
  std::string json = pipelineTraceJson(events, {"rank 0", "rank 1"});
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("\"name\":\"rank 1\""), std::string::npos);
  // Times are relative to the first event, in microseconds; the receive is
  // on the transfers thread.
  EXPECT_NE(json.find("\"ts\":500000.0"), std::string::npos) << json;
  EXPECT_NE(json.find("\"tid\":1"), std::string::npos);
}

TEST(PipelineTest, TransferTagsAreDistinct) {
  std::set<int64_t> tags;
  for (bool backward : {false, true})
    for (int64_t s = 0; s < 8; ++s)
      for (int64_t m = 0; m < 16; ++m)
        EXPECT_TRUE(
            tags.insert(pipelineTransferTag(backward, s, m, 16)).second);
  EXPECT_GT(*tags.begin(), 32); // above the control tags
}

} // namespace
