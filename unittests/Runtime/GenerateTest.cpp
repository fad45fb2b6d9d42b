//===- GenerateTest.cpp - token choice of text generation -----------------===//

#include "merak/Runtime/Train/Generate.h"

#include "gtest/gtest.h"

#include <cmath>
#include <map>
#include <vector>

using namespace merak::runtime;

namespace {

TEST(PickToken, GreedyTakesTheFirstLargest) {
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  SamplingOptions greedy;
  for (double u : {0.0, 0.5, 0.999})
    EXPECT_EQ(pickToken(logits.data(), 4, greedy, u), 1);
}

TEST(PickToken, SamplingFollowsTheProbabilities) {
  // Temperature 1: probabilities exp(l) / sum, here 0.1, 0.2, 0.3, 0.4 in
  // rank order 3, 2, 1, 0; `uniform` walks the ranked tokens' mass.
  std::vector<float> logits;
  for (double p : {0.1, 0.2, 0.3, 0.4})
    logits.push_back(float(std::log(p)));
  SamplingOptions o;
  o.temperature = 1;
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.0), 3);
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.39), 3);
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.41), 2);
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.71), 1);
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.95), 0);
  // Over many draws, each token about as often as its probability.
  std::map<int64_t, int> counts;
  for (int i = 0; i < 10000; ++i)
    ++counts[pickToken(logits.data(), 4, o, (i + 0.5) / 10000)];
  EXPECT_NEAR(counts[0], 1000, 2);
  EXPECT_NEAR(counts[3], 4000, 2);
}

TEST(PickToken, TopKAndTopPCutTheTail) {
  std::vector<float> logits;
  for (double p : {0.1, 0.2, 0.3, 0.4})
    logits.push_back(float(std::log(p)));
  SamplingOptions o;
  o.temperature = 1;
  o.topK = 2; // tokens 3 and 2, renormalized: 4/7 and 3/7
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.5), 3);
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.6), 2);
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.999), 2);
  o.topK = 0;
  o.topP = 0.65; // 0.4 + 0.3 reaches it: tokens 3 and 2
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.999), 2);
  o.topP = 0.3; // token 3 alone
  for (double u : {0.0, 0.5, 0.999})
    EXPECT_EQ(pickToken(logits.data(), 4, o, u), 3);
  // A low temperature sharpens towards greedy.
  o.topP = 1;
  o.temperature = 0.01;
  EXPECT_EQ(pickToken(logits.data(), 4, o, 0.999), 3);
}

TEST(PickToken, OptionsAreChecked) {
  SamplingOptions o;
  EXPECT_TRUE(checkSampling(o).ok());
  o.temperature = -1;
  EXPECT_FALSE(checkSampling(o).ok());
  o.temperature = std::nan("");
  EXPECT_FALSE(checkSampling(o).ok());
  o = SamplingOptions();
  o.topK = -2;
  EXPECT_FALSE(checkSampling(o).ok());
  o = SamplingOptions();
  o.topP = 0;
  EXPECT_FALSE(checkSampling(o).ok());
  o.topP = 1.5;
  EXPECT_FALSE(checkSampling(o).ok());
}

} // namespace
